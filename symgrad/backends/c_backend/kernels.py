"""One C function per loop group, rendered from its :class:`~symgrad.backends.plan.GroupPlan`.

The function is ``SG_LINK int NAME(const int64_t *restrict d, inputs..., outputs...)`` (a
hidden external: a step function of another translation unit may call it, :mod:`.units`): ``d``
holds the dims of the iteration space S, each input is a pointer to a C-contiguous array (a
scalar constant is inlined instead), each output a pointer to a C-contiguous array the caller
allocated (a map value over S, or a reduced value over R). It returns 0, or -1 when it could not
allocate its accumulators.

Loops. Axes of S that are 1 are dropped, and adjacent axes along which every input either
varies or is broadcast alike (and, with a reduction, that are both reduced or both kept) merge
into one loop, so a dense elementwise group is one flat loop whatever its rank. The innermost
loop carries ``#pragma omp simd`` (math functions go to libmvec's vector variants). The
outermost loop is cut into chunks (one when S is small), computed by ``NAME_part`` and shared
out between threads by the prelude's ``sg_parallel``. An input is read at
``sum(i_L * stride_L)`` with stride 0 along the axes it is broadcast over.

Reductions accumulate into an array ``acc`` over R, in the accumulator dtype of the plan. The
outermost loop splits the work: when it runs over a kept axis each chunk owns whole rows of
``acc``; when it runs over a reduced axis each chunk (their number is set by the sizes only,
so results do not depend on the thread count) accumulates into its own copy of ``acc``, and
the copies are combined in chunk order. An innermost reduced loop accumulates
into a scalar (``omp simd reduction`` for sums and products); an innermost kept loop updates a
row of ``acc``. A final loop over R divides a mean, converts to the result dtype, runs the
epilogue ops and writes the reduced outputs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

from ...ir.printer import counted, format_op_head
from ...ops.fused import is_fusion
from ...ops.core import ELEMENTWISE
from ..plan import plan_parts
from .ctype import c_comment, c_type, literal, supported
from .lowering import LOWERINGS, CLowering
from .units import Piece, guarded

PARALLEL_MIN = 1 << 16     # elements of S from which loops run on several threads
CHUNK = 1 << 14            # elements per chunk of a loop split between threads (about)
CHUNKS = 16                # chunks (accumulator copies) of a reduction over a reduced outer axis
# combine op -> the omp simd reduction operator that vectorizes it (NaN-propagating max/min
# have none: their loops stay scalar)
SIMD_REDUCTIONS = {"add": "+", "multiply": "*"}


def compute_type(op) -> str:
    """The C type ``op`` computes in: its result's, or for a comparison (bool result of
    non-bool operands) the promoted type of its operands."""
    result = op.results[0].dtype
    if result.kind == "b" and op.inputs and any(v.dtype.kind != "b" for v in op.inputs):
        return c_type(np.result_type(*[v.dtype for v in op.inputs]))
    return c_type(result)


# a broadcast (``broadcast_to``, ``broadcast_like``: ``Algebra.broadcast``) run as a loop of its
# own (:func:`broadcast_plan`) copies its first operand, which the loop reads broadcast
COPY = CLowering("{0}")


def rule_for(op):
    """The C lowering of elementwise ``op`` when it applies to its types (of a broadcast op:
    :data:`COPY`), else None."""
    if op.opdef.algebra.broadcast:
        return COPY
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CLowering) or (
            rule.floats_only and compute_type(op) not in ("float", "double")):
        return None
    return rule


def lowerable(plan) -> bool:
    """Can the C backend run loop group ``plan``: every op has a C rule for its types (the
    reduction: its combine op) and every value has a C type."""
    ops = plan.map_ops + plan.epilogue
    if not all(o.opdef.category == ELEMENTWISE and len(o.results) == 1 and rule_for(o)
               for o in ops):
        return False
    if plan.reduction is not None and LOWERINGS.rule(plan.combine) is None:
        return False
    values = [v for o in plan.loop_ops + plan.epilogue for v in list(o.inputs) + o.results]
    return all(supported(v.dtype) for v in values) and (
        plan.accumulator is None or supported(plan.accumulator))


def broadcast_plan(op):
    """The plan of broadcast op ``op`` (``Algebra.broadcast``: ``broadcast_to``,
    ``broadcast_like``) run as a loop group of its own, which writes its result densely: one
    map op over the result's shape, reading its first operand with stride 0 along the axes it
    is broadcast over (``out0[i0] = in0[0];`` for a scalar's). Its operands read only for their
    shape (``broadcast_like``'s reference) are no captures: the loop takes the result's dims
    from ``d``. None for another op or a dtype C does not compute."""
    if not op.opdef.algebra.broadcast or op.blocks or len(op.results) != 1 or \
            not all(supported(v.dtype) for v in (op.inputs[0], op.results[0])):
        return None
    plan = plan_parts(op, ([op], None, []))
    return dataclasses.replace(plan, captures=[op.inputs[0]])


def pointer_inputs(plan, scalars) -> list:
    """The captures of ``plan`` passed to its function by pointer, in parameter order."""
    return [v for v in plan.captures if v not in scalars]


@dataclasses.dataclass
class _Loop:
    axes: list          # axes of the space it runs over (merged)
    size: str           # C expression
    reduced: bool


class _Nest:
    """Loops over a space (S, or R for the finishing loop) and the offsets of arrays in it."""

    def __init__(self, shape, dims, readers, reduced=()):
        # readers: (key, shape) of the arrays read with broadcasting; reduced: axes reduced
        rank = len(shape)
        self.dims = dims
        self.readers = readers
        active = [a for a in range(rank) if shape[a] != 1]
        pattern = {a: (a in reduced,) + tuple(self._present(s, rank, a) for _, s in readers)
                   for a in active}
        self.loops: list[_Loop] = []
        for a in active:
            if self.loops and pattern[self.loops[-1].axes[-1]] == pattern[a]:
                self.loops[-1].axes.append(a)
            else:
                self.loops.append(_Loop([a], "", a in reduced))
        for loop in self.loops:
            loop.size = _product([dims[a] for a in loop.axes])

    @staticmethod
    def _present(shape, rank, axis) -> bool:
        k = axis - (rank - len(shape))
        return k >= 0 and shape[k] != 1

    def offset(self, key, shape, index) -> str:
        """Offset of the element of array ``key`` (of ``shape``, broadcast against the space)
        at the loop indices ``index(L)``."""
        rank = len(self.dims)
        terms = []
        for number, loop in enumerate(self.loops):
            inner = loop.axes[-1]
            if not self._present(shape, rank, inner):
                continue
            stride = self._stride(shape, rank, inner)
            terms.append(index(number) if stride == "1" else f"{index(number)} * {stride}")
        return " + ".join(terms) or "0"

    def _stride(self, shape, rank, axis) -> str:
        lead = rank - len(shape)
        return _product([self.dims[lead + k] if shape[k] is None else str(shape[k])
                         for k in range(axis - lead + 1, len(shape))])

    def dense_offset(self, index, loops=None) -> str:
        """Offset in a C-contiguous array over the loops ``loops`` (default all)."""
        loops = list(range(len(self.loops))) if loops is None else loops
        terms = []
        for position, number in enumerate(loops):
            stride = _product([self.loops[k].size for k in loops[position + 1:]])
            terms.append(index(number) if stride == "1" else f"{index(number)} * {stride}")
        return " + ".join(terms) or "0"


def _product(factors) -> str:
    factors = [f for f in factors if f != "1"]
    if all(f.isdigit() for f in factors):
        return str(math.prod(int(f) for f in factors))
    return " * ".join(f"({f})" if "*" in f else f for f in factors)


class GroupRenderer:
    """Renders the C function of one loop group (see the module docstring)."""

    def __init__(self, plan, scalars, options, environment, aliased=()):
        self.plan = plan
        self.aliased = aliased   # the inputs and outputs whose pointers may be one array
        self.scalars = scalars
        self.options = options
        self.environment = environment
        self.inputs = pointer_inputs(plan, scalars)
        self.pointer = {v: f"in{i}" for i, v in enumerate(self.inputs)}
        self.out = {v: f"out{j}" for j, v in enumerate(plan.outputs)}
        self.number: dict = {}          # Value -> local number, by first mention (not ids)
        self.dims = [f"d[{a}]" if dim is None else str(dim) for a, dim in enumerate(plan.shape)]

    # --- values ----------------------------------------------------------------------------
    def name(self, value) -> str:
        number = self.number.get(value)
        if number is None:
            number = self.number[value] = len(self.number)
        return f"v{number}"

    def read(self, value, op, local) -> str:
        if value in self.scalars:
            text = literal(self.scalars[value][()], value.dtype)
        else:
            text = local[value]
        if op is not None and c_type(value.dtype) != compute_type(op):
            text = f"(({compute_type(op)}){text})"
        return text

    def op_lines(self, ops, local) -> list:
        """``(code, comment)`` lines computing ``ops`` into locals."""
        lines = []
        for op in ops:
            T = compute_type(op)
            shape_only = op.opdef.algebra.shape_only   # no data read: no text
            args = ["" if k in shape_only else self.read(v, op, local)
                    for k, v in enumerate(op.inputs)]
            attrs = {k: _attr_text(v) for k, v in op.attrs.items() if not k.startswith("_")}
            constants = {k: self.scalars[v][()] for k, v in enumerate(op.inputs)
                         if v in self.scalars}
            code = rule_for(op).code(op, args, T, attrs, constants)
            result = op.results[0]
            local[result] = self.name(result)
            lines.append((f"const {c_type(result.dtype)} {local[result]} = {code};",
                          describe(op)))
        return lines

    def loads(self, values, nest, index, local, hoisted, inner) -> None:
        """Load the captures ``values`` read in ``nest``: single elements into ``hoisted``,
        the others into ``inner`` (the loop body)."""
        for value in values:
            if value in local or value in self.scalars:
                continue
            local[value] = self.name(value)
            declare = f"const {c_type(value.dtype)} {local[value]} = {self.pointer[value]}"
            if all(d == 1 for d in value.shape):
                hoisted.append((f"{declare}[0];", ""))
            else:
                inner.append((f"{declare}[{nest.offset(value, value.shape, index)}];", ""))

    def used(self, ops) -> list:
        captured = set(self.inputs)
        return list(dict.fromkeys(v for op in ops for v in op.inputs if v in captured))

    # --- the function ----------------------------------------------------------------------
    def render(self, known=None) -> Piece:
        """The group's function (see the module docstring), named from a hash of its code
        without comments, so that equal groups of any program share it; ``known``: functions
        by name already rendered (one of them is returned, not rendered again, when this
        group's code is the same)."""
        plan = self.plan
        map_readers = [(v, v.shape) for v in self.used(plan.loop_ops)]
        nest = _Nest(plan.shape, self.dims, map_readers, plan.axes)
        local, hoisted, body = {}, [], []
        self.loads([v for v, _ in map_readers], nest, _INDEX, local, hoisted, body)
        body += self.op_lines(plan.map_ops, local)
        dense = nest.dense_offset(_INDEX)
        for value, is_map in zip(plan.outputs, plan.map_outputs):
            if is_map:
                body.append((f"{self.out[value]}[{dense}] = {local[value]};", ""))
        loops = nest.loops
        context = dict(provenance=self.provenance(), hoisted=hoisted, total=_product(self.dims),
                       reduce=plan.reduction is not None, outer=loops[0].size if loops else "1",
                       chunked=bool(loops) and loops[0].reduced,
                       most=CHUNKS if plan.reduction is None or plan.splits else 1,
                       threads=self.options.threads or 0)
        if plan.reduction is None:
            context.update(main=_loops(loops, _INDEX, body))
        else:
            context.update(self.reduction_context(nest, local, body))
        small = context["total"].isdigit() and int(context["total"]) < PARALLEL_MIN
        context.update(small=small, serial=small or self.options.threads == 1)
        pointers = [(f"const {c_type(v.dtype)}", self.pointer[v], self.qualifier(v))
                    for v in self.inputs]
        pointers += [(c_type(v.dtype), self.out[v], self.qualifier(v)) for v in plan.outputs]
        part = "\n".join(code for code, _ in context["hoisted"] + context["main"])
        parameters = "const int64_t *restrict d" + "".join(
            f", {kind} *{qualifier}{pointer}" for kind, pointer, qualifier in pointers)
        context.update(pointers=pointers, reads_dims="d[" in part, chunk_range="sg_lo" in part,
                       part_pointers=[p for p in pointers if f"{p[1]}[" in part],
                       parameters=parameters)
        template = self.environment.get_template("c/group.c.j2")
        code_only = template.render(name="@NAME@", comments=False, **context)
        name = "sg_g_" + hashlib.sha256(code_only.encode()).hexdigest()[:16]
        if known is not None and name in known:
            return known[name]
        code = template.render(name=name, comments=True, **context)
        return Piece(guarded(name, code), name, f"SG_LINK int {name}({parameters});")

    def qualifier(self, value) -> str:
        """``restrict`` for a pointer no other pointer of the function reaches; nothing for
        an output written over its input (an update in place of a parameter, which reads
        each element before writing it) and that input."""
        return "" if any(value is v for v in self.aliased) else "restrict "

    def reduction_context(self, nest, local, body) -> dict:
        """The accumulating loops (see the module docstring) and the finishing loop."""
        plan = self.plan
        acc = c_type(plan.accumulator)
        source = plan.reduction.inputs[0]
        value = self.read(source, None, local)
        if c_type(source.dtype) != acc:
            value = f"(({acc}){value})"
        combine = LOWERINGS.rule(plan.combine).expression
        loops = nest.loops
        kept = [k for k, loop in enumerate(loops) if not loop.reduced]
        # a reduction whose partial results do not combine as one pass does (a product) runs
        # in order: one chunk, no vector lanes
        operator = SIMD_REDUCTIONS.get(plan.combine.name) if plan.splits else None
        if not loops:                              # one element
            main = body + [(f"sg_part[0] = {combine.format('sg_part[0]', value, T=acc)};",
                            describe(plan.reduction))]
        elif loops[-1].reduced:                    # a scalar accumulates the inner loop
            update = (f"sg_a = {combine.format('sg_a', value, T=acc)};",
                      describe(plan.reduction))
            where = f"sg_part[{nest.dense_offset(_INDEX, kept)}]"
            main = _loops(loops, _INDEX, body + [update],
                          before_inner=[(f"{acc} sg_a = {where};", "")],
                          after_inner=[(f"{where} = sg_a;", "")],
                          inner_clause=f"reduction({operator}:sg_a)" if operator else None,
                          inner_simd=operator is not None)
        else:                                      # a row of accumulators
            row = f"sg_part[{nest.dense_offset(_INDEX, kept)}]"
            update = (f"{row} = {combine.format(row, value, T=acc)};", describe(plan.reduction))
            main = _loops(loops, _INDEX, body + [update])
        facts = plan.reduction.opdef.reduction
        return dict(
            acc=acc, identity=literal(plan.identity, plan.accumulator), main=main,
            empty_error=None if facts.has_identity else
            _product([self.dims[a] for a in plan.axes]),
            kept_size=_product([loops[k].size for k in kept]),
            combine_chunks=combine.format("sg_acc[sg_o]", "sg_acc[sg_c * sg_r + sg_o]", T=acc),
            finish=self.finish(acc))

    def finish(self, acc) -> list:
        """The loop over R turning accumulators into the reduced outputs."""
        plan = self.plan
        reduction = plan.reduction
        result = reduction.results[0]
        readers = [(v, v.shape) for v in self.used(plan.epilogue)]
        nest = _Nest(plan.reduced, plan.reduced_dims(self.dims), readers)
        local, hoisted, body = {}, [], []
        dense = nest.dense_offset(_INDEX)
        value = f"sg_acc[{dense}]"
        if plan.mean:
            value = f"{value} / ({acc})({_product([self.dims[a] for a in plan.axes])})"
        local[result] = self.name(result)
        body.append((f"const {c_type(result.dtype)} {local[result]} = "
                     f"({c_type(result.dtype)})({value});", describe(reduction)))
        self.loads([v for v, _ in readers], nest, _INDEX, local, hoisted, body)
        body += self.op_lines(plan.epilogue, local)
        for output, is_map in zip(plan.outputs, plan.map_outputs):
            if not is_map:
                body.append((f"{self.out[output]}[{dense}] = {local[output]};", ""))
        return hoisted + _loops(nest.loops, _INDEX, body, full_first=True)

    def provenance(self) -> list[str]:
        op = self.plan.op
        inner = [describe(o) for o in op.blocks[0].ops] if is_fusion(op) else []
        head = group_heading(self.plan)
        shape = ", ".join("?" if d is None else str(d) for d in self.plan.shape)
        lines = [head, f"over [{shape}]" + (
            f", reducing axes {list(self.plan.axes)}" if self.plan.reduction is not None
            else "")]
        return lines + ["  " + text for text in inner]


def _attr_text(value) -> str:
    """C text of a number or bool attr (an expression refers to it by name)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.number)):
        return literal(value, np.asarray(value).dtype)
    return str(value)


def _INDEX(number) -> str:
    return f"i{number}"


def _loops(loops, index, body, before_inner=(), after_inner=(), inner_clause=None,
           full_first=False, inner_simd=True) -> list:
    """``(code, comment)`` lines of the loops ``loops`` (outermost first) around ``body``.
    The outermost runs over one chunk, ``sg_lo..sg_hi`` (the whole range with
    ``full_first``); ``before_inner``/``after_inner`` go around the innermost loop, which is
    ``omp simd`` (with ``inner_clause``) unless ``inner_simd`` is False (a loop-carried
    accumulation without an omp reduction operator: NaN-propagating max and min, products)."""
    if not loops:
        return list(body)
    lines = []
    last = len(loops) - 1
    for number, loop in enumerate(loops):
        pad = "    " * number
        if number == last:
            lines.extend((pad + code, note) for code, note in before_inner)
            clause = f" {inner_clause}" if inner_clause else ""
            if inner_simd:
                lines.append((f"{pad}#pragma omp simd{clause}", ""))
        i = index(number)
        start, stop = ("sg_lo", "sg_hi") if number == 0 and not full_first else ("0", loop.size)
        lines.append((f"{pad}for (int64_t {i} = {start}; {i} < {stop}; {i}++) {{", ""))
    lines.extend(("    " * len(loops) + code, note) for code, note in body)
    for number in range(last, -1, -1):
        pad = "    " * number
        lines.append((pad + "}", ""))
        if number == last:
            lines.extend((pad + code, note) for code, note in after_inner)
    return lines


def group_heading(plan) -> str:
    """``fused group 3 (5 ops) -> %12, %14`` (or the op, for a lone op), safe in a comment."""
    op = plan.op
    if not is_fusion(op):
        return describe(op)
    return c_comment(f"fused group {op.attrs['group']} ({counted(len(op.blocks[0].ops), 'op')})"
                     f" -> {', '.join(f'%{v.id}' for v in op.results)}")


def describe(op) -> str:
    text = format_op_head(op)
    if op.forward_op is not None:
        text += f"; backward of {format_op_head(op.forward_op)}"
    return c_comment(text)


def render_group(plan, scalars, options, environment, known=None, aliased=()) -> Piece:
    """The C function of ``plan``; ``aliased``: its inputs and outputs whose pointers may be
    one array (their pointers are not ``restrict``)."""
    return GroupRenderer(plan, scalars, options, environment, aliased).render(known)
