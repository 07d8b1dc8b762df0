"""Lowering of one kernel group (a fused group, or a lone elementwise op or reduction) to CUDA.

A group has an *iteration shape* S (the shape of its map ops, or of its reduction's input), a
map phase (elementwise ops over S), optionally one reduction over some axes of S, and an
epilogue (elementwise ops over the reduced shape R). It becomes one kernel, in one of three
styles chosen from which axes are reduced:

* ``map``: no reduction; a grid-stride loop over the N elements of S;
* ``row``: the innermost axis is reduced; a team of threads per output;
* ``col``: the innermost axis is kept; 32 adjacent outputs per block (coalesced loads);
* ``ordered``: a reduction whose partial results do not combine into what one pass gives
  (``Reduction.splits`` False: a product, whose partial products can underflow to 0 or
  overflow to inf where one pass never does); one thread per output combines its K reduced
  elements in order, as NumPy does.

Row and column reductions may split their K reduced elements over P blocks: then a
``_merge`` kernel combines the partial results. The element index ``s`` (dense position in
S) and the output index ``o`` (dense position in R) address contiguous arrays; captures that
broadcast, or that are views (results of injective ops), are read through strides passed as
kernel arguments, as are all sizes, so a new batch size never recompiles. Each kernel exists
in a 32-bit index variant and, when sizes may need it, a 64-bit one (suffix ``_i64``).

Expressions come from the CUDA lowering table (:mod:`.lowering`): a C format string over
``{0}``, ``{1}``..., attr names and ``{T}``, the compute type of the op (the promoted input
type for comparisons, else the result's); a reduction combines partial results with the
expression of the elementwise op its :class:`~symgrad.ops.core.Reduction` names. An op whose
rule is ``indexed`` (random numbers) runs as a map kernel of its own over its result: its
inputs keep their own types and the expression reads the element index ``s``; the device code
it calls is in the prelude (:func:`.lowering.device_helpers`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re

import jinja2
import numpy as np

from ...ir.printer import counted, format_op_head
from ...ops.core import ELEMENTWISE, INJECTIVE, REDUCTION
from ...ir.graph import walk_ops
from ...ops.fused import is_fusion
from ...passes.fusion import split_body
from ..c_expressions import expression_for
from ..common import template_environment
from ..plan import plan_parts
from . import ctype
from .lowering import LOWERINGS, device_helpers

BLOCK = 256
ACC_DTYPES = {"int": np.dtype("int32"), "unsigned int": np.dtype("uint32"),
              "long long": np.dtype("int64"), "unsigned long long": np.dtype("uint64"),
              "float": np.dtype("float32"), "double": np.dtype("float64")}
WIDE = 2 ** 31 - 2 ** 24     # from this many elements on, indices need 64 bits

@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    env = template_environment("cuda")   # the CUDA templates' own environment
    env.globals["device_helpers"] = device_helpers
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


# --- which ops become kernels -------------------------------------------------------------------
def has_cuda_emitter(op) -> bool:
    """Does ``op`` have a rule in the CUDA lowering table that applies to its types?"""
    rule = LOWERINGS.rule(op.opdef)
    return rule is not None and (not rule.floats_only or _op_type(op) in ("float", "double"))


def _indexed(op) -> bool:
    """Is ``op``'s rule ``indexed`` (a kernel of its own over its result)?"""
    rule = LOWERINGS.rule(op.opdef)
    return rule is not None and rule.indexed


def kernel_plan(op, accumulate_float64=True):
    """The :class:`~symgrad.backends.plan.GroupPlan` of ``op`` when it runs as one kernel (a
    loop group, or a lone op whose rule is ``indexed``), else None (it then runs on the host
    through CuPy)."""
    if is_fusion(op):
        parts = split_body(op)
        inner = op.blocks[0].ops
    elif (op.opdef.category == ELEMENTWISE or _indexed(op)) and op.inputs \
            and len(op.results) == 1:
        parts, inner = ([op], None, []), [op]
    elif op.opdef.category == REDUCTION and op.opdef.reduction and len(op.inputs) == 1:
        parts, inner = ([], op, []), []
    else:
        return None
    if not all(has_cuda_emitter(o) for o in inner if o is not parts[1]):
        return None
    if parts[1] is not None and not parts[1].opdef.reduction:
        return None
    values = [v for o in [op] + list(inner) for v in list(o.inputs) + list(o.results)]
    if not all(np.dtype(v.dtype).name in ctype.STORAGE for v in values):
        return None
    return plan_parts(op, parts, accumulate_float64)


# --- how a kernel reads one array -------------------------------------------------------------
def _same_dims(a, b) -> bool:
    """Equal shapes up to leading 1s, unknown dims matching any dim but a static 1."""
    a, b = list(a), list(b)
    while a and a[0] == 1:
        a.pop(0)
    while b and b[0] == 1:
        b.pop(0)
    if len(a) != len(b):
        return False
    return all(x == y or (None in (x, y) and 1 not in (x, y)) for x, y in zip(a, b))


@dataclasses.dataclass
class Access:
    """``kind``: "literal" (inlined constant), "one" (a single element), "dense" (contiguous
    with the space's shape) or "strided"; ``dims``: for "strided", (space axis, own axis)
    pairs of the axes that do not broadcast."""

    kind: str
    dims: tuple = ()


def classify(value, shape, scalars, views) -> Access:
    if value in scalars:
        return Access("literal")
    if all(d == 1 for d in value.shape):
        return Access("one")
    if value not in views and _same_dims(value.shape, shape):
        return Access("dense")
    lead = len(shape) - value.ndim
    dims = tuple((lead + k, k) for k, d in enumerate(value.shape)
                 if d != 1 and shape[lead + k] != 1)
    return Access("strided", dims)


# --- the kernel ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Kernel:
    """A rendered kernel and what its launch needs.

    ``name``: base name of the entry points; ``style``: map/row/col; ``source``: its CUDA
    text; ``shape``/``axes``: iteration shape and reduced axes; ``strides``: (Value, axis)
    per stride argument, in order; ``inputs``: (Value, dense) per input pointer (one output
    pointer per result of the group follows them, in order); ``acc``: accumulator dtype of a
    reduction (None for map); ``variants``: entry-point suffixes ("" and/or "_i64");
    ``entries``: every entry-point name; ``captures``: the group's captures, in order (a group
    of the same structure that shares the kernel maps them to its own by position).
    """

    name: str
    style: str
    source: str
    shape: tuple
    axes: tuple
    strides: list
    inputs: list
    acc: np.dtype | None
    variants: tuple
    entries: tuple
    captures: list


def _op_type(op) -> str:
    result = op.results[0].dtype
    if result.kind == "b" and op.inputs and any(v.dtype.kind != "b" for v in op.inputs):
        return ctype.compute_type(np.result_type(*[v.dtype for v in op.inputs]))
    return ctype.compute_type(result)


def _attr_text(value):
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.number)):
        return ctype.literal(value, np.asarray(value).dtype)
    return str(value)


def _provenance_line(op) -> str:
    text = format_op_head(op)
    if op.forward_op is not None:
        text += f"; backward of {format_op_head(op.forward_op)}"
    return ctype.c_comment(text)


def _decompose(var, dims, needed, prefix, coord) -> list[str]:
    """Lines setting ``coord(axis)`` for the ``needed`` axes from the linear index ``var``
    over ``dims`` ((axis, size expression) pairs, outermost first)."""
    positions = [i for i, (axis, _) in enumerate(dims) if axis in needed]
    if not positions:
        return []
    first = min(positions)
    lines = [f"I {prefix} = {var};"]
    for i in range(len(dims) - 1, first - 1, -1):
        axis, size = dims[i]
        if i == 0:     # the outermost axis needs no modulo
            lines.append(f"const I {coord(axis)} = {prefix};")
            continue
        lines.append(f"const I {coord(axis)} = {prefix} % {size};")
        if i > first:
            lines.append(f"{prefix} /= {size};")
    return lines


class KernelBuilder:
    """Builds the :class:`Kernel` of one group. ``scalars`` maps inlined 0-d constants to
    their arrays; ``views`` holds the Values that may be non-contiguous (read by strides)."""

    def __init__(self, name, plan, scalars, views):
        self.name = name
        self.plan = plan
        self.op = plan.op
        self.map_ops, self.reduction, self.epilogue = plan.map_ops, plan.reduction, plan.epilogue
        self.scalars = scalars
        self.views = views
        self.captures, self.outputs = plan.captures, plan.outputs
        self.shape, self.axes, self.reduced = plan.shape, plan.axes, plan.reduced
        self.rank = len(self.shape)
        self.strides, self.inputs, self.ptrs, self.input_ptr = [], [], [], {}
        self.stride_names = []

    # --- arguments -------------------------------------------------------------------------------
    def pointer(self, value) -> str:
        """The input pointer parameter of capture ``value`` (declared on first use)."""
        name = self.input_ptr.get(value)
        if name is None:
            name = f"in{len(self.input_ptr)}"
            self.input_ptr[value] = name
            dense = value not in self.views
            self.inputs.append((value, dense))
            self.ptrs.append(f"const {ctype.storage_type(value.dtype)}* __restrict__ {name}")
        return name

    def stride(self, value, own_axis, label) -> str:
        name = f"{label}{self.pointer(value)[2:]}_{own_axis}"
        if name not in self.stride_names:
            self.stride_names.append(name)
            self.strides.append((value, own_axis))
        return name

    # --- code -------------------------------------------------------------------------------------
    def expression(self, value, local) -> str:
        if value in self.scalars:
            return ctype.literal(self.scalars[value][()], value.dtype)
        return local[value]

    def op_lines(self, ops, local) -> list[str]:
        lines = []
        for op in ops:
            T = _op_type(op)
            args = []
            for value in op.inputs:
                text = self.expression(value, local)
                if ctype.compute_type(value.dtype) != T and not _indexed(op):
                    text = f"(({T})({text}))"
                args.append(text)
            attrs = {k: _attr_text(v) for k, v in op.attrs.items() if not k.startswith("_")}
            constants = {k: self.scalars[v][()] for k, v in enumerate(op.inputs)
                         if v in self.scalars}
            template = expression_for(LOWERINGS.rule(op.opdef), constants)
            try:
                code = template.format(*args, T=T, **attrs)
            except (KeyError, IndexError) as exc:
                raise NotImplementedError(f"CUDA emitter of {op.name!r} refers to {exc}, "
                                          f"which the op does not provide") from None
            result = op.results[0]
            name = f"v{result.id}"
            local[result] = name
            lines.append(f"const {ctype.compute_type(result.dtype)} {name} = {code};  "
                         f"// {_provenance_line(op)}")
        return lines

    def loads(self, values, space, index, coord, label, hoisted, lines, local):
        """Read ``values`` (captures) in ``space`` (a shape) at dense index ``index``."""
        needed = set()
        for value in values:
            if value in local or value in self.scalars:
                continue
            access = classify(value, space, self.scalars, self.views)
            pointer = self.pointer(value)
            name = f"v{value.id}"
            local[value] = name
            declare = f"const {ctype.compute_type(value.dtype)} {name} = "
            if access.kind == "one":
                hoisted.append(declare + ctype.load(value.dtype, f"{pointer}[0]") + ";")
            elif access.kind == "dense":
                lines.append(declare + ctype.load(value.dtype, f"{pointer}[{index}]") + ";")
            else:
                terms = [f"{coord(axis)} * {self.stride(value, k, label)}"
                         for axis, k in access.dims] or ["0"]
                needed.update(axis for axis, _ in access.dims)
                lines.append(declare + ctype.load(value.dtype,
                                                  f"{pointer}[{' + '.join(terms)}]") + ";")
        return needed

    def used_captures(self, ops):
        captured = set(self.captures)
        return list(dict.fromkeys(v for op in ops for v in op.inputs if v in captured))

    def output_stores(self, values, index, local) -> list[str]:
        lines = []
        for value in values:
            j = next(j for j, v in enumerate(self.outputs) if v is value)
            lines.append(f"out{j}[{index}] = {ctype.store(value.dtype, local[value])};")
        return lines

    def build(self) -> Kernel:
        out_ptrs = [f"{ctype.storage_type(v.dtype)}* __restrict__ out{j}"
                    for j, v in enumerate(self.outputs)]
        dims = [f"n{d}" for d in range(self.rank)]
        map_outputs = [v for v, is_map in zip(self.outputs, self.plan.map_outputs) if is_map]
        reduced_outputs = [v for v, is_map in zip(self.outputs, self.plan.map_outputs)
                           if not is_map]
        if self.reduction is None:
            style = "map"
        elif not self.plan.splits:
            style = "ordered"
        else:
            style = "row" if not self.rank or (self.rank - 1) in self.axes else "col"

        # map phase
        local, hoisted, loads = {}, [], []
        map_reads = self.used_captures(self.map_ops + ([self.reduction] if self.reduction
                                                      else []))
        general = style != "map" and not self._simple_layout(style)
        coord = (lambda axis: f"c{axis}")
        needed = self.loads(map_reads, self.shape, "s", coord, "st", hoisted, loads, local)
        body = self.op_lines(self.map_ops, local)
        stores = self.output_stores(map_outputs, "s", local)
        size_of = list(zip(range(self.rank), dims))
        index, prologue = [], []
        if style == "map":
            coords = _decompose("s", size_of, needed, "rest", coord)
        elif not general:
            kept_first = self._simple_layout("row")
            index = ["const I s = o * K + k;" if kept_first else "const I s = k * M + o;"]
            coords = _decompose("s", size_of, needed, "rest", coord)
        else:
            kept = [(a, n) for a, n in size_of if a not in self.axes]
            red = [(a, n) for a, n in size_of if a in self.axes]
            all_axes = set(range(self.rank))
            prologue = [f"const I cs{self.rank - 1} = 1;"] + [
                f"const I cs{d} = cs{d + 1} * n{d + 1};" for d in range(self.rank - 2, -1, -1)]
            index = (_decompose("o", kept, all_axes, "rest_o", coord)
                     + _decompose("k", red, all_axes, "rest_k", coord)
                     + ["const I s = " + " + ".join(f"c{d} * cs{d}" for d in range(self.rank))
                        + ";"])
            coords = []

        context = dict(name=self.name, provenance=self.provenance(), hoisted=hoisted,
                       coords=coords, loads=loads, body=body, stores=stores, block=BLOCK,
                       shape_text=", ".join("?" if d is None else str(d) for d in self.shape),
                       axes_text=str(tuple(self.axes)))
        acc_dtype = None
        if style == "map":
            ints = ["N"] + dims
            template = "elementwise.cu.j2"
        else:
            acc_dtype = self.reduce_context(local, reduced_outputs, context)
            ints = ["M", "K", "P", "T"] + dims
            context.update(index=index, prologue=prologue, merges=style != "ordered")
            template = f"reduce_{style}.cu.j2"
        ints += self.stride_names
        ptrs = self.ptrs + out_ptrs + ([f"{context['acc']}* __restrict__ partial"]
                                       if acc_dtype is not None else [])
        variants = self.variants()
        context.update(ints=ints, ptrs=ptrs, variants=variants)
        source = render(template, **context)
        entries = tuple(self.name + suffix for suffix, _ in variants)
        if context.get("merges"):
            entries += tuple(f"{self.name}_merge{suffix}" for suffix, _ in variants)
        return Kernel(self.name, style, source, self.shape, tuple(self.axes),
                      list(self.strides), list(self.inputs), acc_dtype,
                      tuple(s for s, _ in variants), entries, list(self.captures))

    def _simple_layout(self, style) -> bool:
        """Reduced axes are exactly the trailing (row) or leading (col) axes of S (ordered:
        either)."""
        count = len(self.axes)
        trailing = tuple(self.axes) == tuple(range(self.rank - count, self.rank))
        leading = tuple(self.axes) == tuple(range(count))
        return {"row": trailing, "col": leading, "ordered": trailing or leading}[style]

    def reduce_context(self, map_local, reduced_outputs, context) -> np.dtype:
        """Fill the reduction parts of the template ``context``; returns the dtype of the
        accumulator as stored in the partial-results buffer."""
        reduction = self.reduction
        result = reduction.results[0]
        acc_dtype = self.plan.accumulator
        acc = ctype.accumulator_type(acc_dtype)
        combine = LOWERINGS.rule(self.plan.combine).expression.format("a", "b", T=acc)
        divide = self.plan.mean
        source = reduction.inputs[0]
        reduce_input = self.expression(source, map_local)

        # finish: the reduced value, the epilogue over R, the reduced outputs at o
        local = {}
        res_t = ctype.compute_type(result.dtype)
        value = f"acc / ({acc})K" if divide else "acc"
        name = f"v{result.id}"
        local[result] = name
        finish = [f"const {res_t} {name} = ({res_t})({value});  "
                  f"// {_provenance_line(reduction)}"]
        kept = [a for a in range(self.rank) if a not in self.axes]
        r_axes = list(range(self.rank)) if self.plan.keepdims else kept   # S axis of each R axis
        loads = []
        epi_reads = self.used_captures(self.epilogue)
        needed = self.loads(epi_reads, self.reduced, "o", lambda a: f"e{r_axes[a]}", "et",
                            loads, loads, local)
        coords = _decompose("o", [(a, f"n{a}") for a in kept], {r_axes[a] for a in needed},
                            "rest", lambda a: f"e{a}")
        finish += loads + self.op_lines(self.epilogue, local)
        finish += self.output_stores(reduced_outputs, "o", local)
        context.update(acc=acc, identity=ctype.literal(self.plan.identity, acc_dtype),
                       combine=combine, finish=finish, finish_coords=coords,
                       reduce_input=reduce_input)
        return ACC_DTYPES[acc]

    def variants(self):
        static = None not in self.shape
        size = math.prod(self.shape) if static else None
        biggest = max([size or 0] + [math.prod(v.shape) for v in self.captures
                                     if None not in v.shape])
        if static and all(None not in v.shape for v in self.captures):
            return (("_i64", "long long"),) if biggest >= WIDE else (("", "int"),)
        return (("", "int"), ("_i64", "long long"))

    def provenance(self) -> list[str]:
        op = self.op
        results = ", ".join(f"%{v.id}" for v in op.results)
        if is_fusion(op):
            head = (f"kernel {self.name}: fused group {op.attrs['group']} "
                    f"({counted(len(op.blocks[0].ops), 'op')}) -> {results}")
            inner = list(op.blocks[0].ops)
        else:
            head = f"kernel {self.name}: {format_op_head(op)}"
            inner = []
        lines = [f"// {ctype.c_comment(head)}"]
        if op.forward_op is not None:
            lines.append(f"//   backward of {ctype.c_comment(format_op_head(op.forward_op))}")
        lines += [f"//   {_provenance_line(o)}" for o in inner]
        return lines


_COMMENT = re.compile(r"//[^\n]*")
_LOCAL = re.compile(r"\bv\d+\b")


def canonical_code(source: str) -> str:
    """A kernel's code without comments and with its value names (``v<id>``) numbered in
    order of appearance: equal for kernels that differ only in the values they are for."""
    names: dict = {}
    lines = (_COMMENT.sub("", line).rstrip() for line in source.split("\n"))
    code = "\n".join(line for line in lines if line)
    return _LOCAL.sub(lambda m: names.setdefault(m.group(0), f"v_{len(names)}"), code)


def views_of(program) -> set:
    """Values that may be non-contiguous views: results of injective ops."""
    return {v for op in walk_ops(program.ops) if op.opdef.category == INJECTIVE
            for v in op.results}


def build_kernel(name, plan, scalars, views) -> Kernel:
    return KernelBuilder(name, plan, scalars, views).build()
