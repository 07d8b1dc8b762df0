"""Lowering of one fused group (a ``fusion`` op) to module-level NumPy functions.

Each group becomes a function ``_groupK(captures...)`` returning the group's results, called
from ``run`` (small functions keep Python's compile time linear in program size). A group
whose functions are the same code as an earlier group's, up to names, calls the earlier ones
instead (:mod:`.functions`); so the functions' text names the group's own things by
placeholder. The group's *iteration shape* is the shape of its map ops (or of its reduction's
input):

* at most ``options.chunk_size`` elements, statically: the ops are plain NumPy expressions;
* more (or a run-time leading dim), with a leading dim other than 1: *chunked*. A second
  function ``_groupK_rows(_start, _stop, _rows, ...)`` runs the map ops and the reduction
  over rows ``_start:_stop`` in chunks of ``_rows`` rows (about ``chunk_size`` elements),
  with chunk-sized scratch buffers of its own written through ufunc ``out=`` (a buffer is
  reused once its value is dead, in place when the op is an exact ufunc). Captured inputs
  with the full leading dim are sliced per chunk, the others broadcast; exported map values
  are written chunk by chunk into their full-size arrays; an op that is not an exact ufunc
  binds the chunk-sized result NumPy allocates for it (``np.where`` writing into a scratch
  buffer would only add a copy). ``_groupK`` hands the rows to the
  module's ``_POOL.over_rows`` (:mod:`.row_pool`), which splits them into contiguous ranges
  run on worker threads when there are enough chunks; with ``options.threads == 1`` it calls
  ``_groupK_rows`` once, directly. A reduction over axis 0 returns one partial accumulator
  per range, combined in row order by ``_groupK``; any other reduction writes its rows of a
  shared result;
* otherwise (leading dim 1, or 0-d): one pass with whole-size scratch buffers.

Sums of float32 accumulate in float64 when ``options.accumulate_float64``. Epilogue ops then
run once on the reduced values.
"""
from __future__ import annotations

import math

from ...ir.graph import last_uses
from ...ir.printer import counted, value_label
from ...ops.core import code_int
from ...ops.fused import FUSION
from ..common import Namer, comment
from ..dim_code import shape_code
from ..options import NUMPY_GROUP_MIN_PARALLEL_CHUNKS
from ..plan import plan_group, structure
from .functions import Commented, Function, Placeholders, indented, wrap_doc
from .literals import dtype_code
from .lowering import exact_ufunc, register_lowering
from .ops_text import numpy_emitter, visible_attrs

# ops NumPy computes at many nanoseconds an element (a float64 sin about 10 ns; a multiply or
# a where is a memory pass): their loops gain from threads on fewer chunks (see has_costly_ops)
COSTLY_PER_ELEMENT = frozenset({
    "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin",
    "arccos", "arctan", "arctan2", "power", "erf", "gelu", "sigmoid", "softplus"})


def _identity_code(value) -> str:
    """Python source of a reduction's identity (a Python number)."""
    if isinstance(value, float):
        if math.isinf(value):
            return "np.inf" if value > 0 else "-np.inf"
        if value.is_integer():
            return repr(int(value))
    return repr(value)


def _product(dims):
    if all(d.isdigit() for d in dims):
        return str(math.prod(int(d) for d in dims))
    return " * ".join(dims) if dims else "1"


def _is_ufunc(op):
    return exact_ufunc(op.opdef)


def lower(gen, op) -> list[str]:
    """Add fusion op ``op``'s function(s) to ``gen.functions`` (a
    :class:`~.functions.FunctionTable`, which may find them already there); return the lines of
    ``run`` that call them (see the module docstring)."""
    return _Lowering(gen, op).lower()


register_lowering(FUSION, statements=lower)


# Render the functions of groups that share a structure anyway, and check that their code is
# the same (the test suite turns this on, so every program it compiles checks the claim of
# :meth:`_Lowering.structure`)
CHECK_STRUCTURES = False


class _Lowering:
    def __init__(self, gen, op):
        self.gen, self.op = gen, op
        self.group = plan_group(op, gen.options.accumulate_float64)
        self.map_ops, self.reduction, self.epilogue = (self.group.map_ops, self.group.reduction,
                                                       self.group.epilogue)
        self.loop_ops = self.group.loop_ops
        self.captures = [v for v in op.inputs if v not in gen.scalars]
        self.shape = self.group.shape
        static = None not in self.shape
        self.plain = static and math.prod(self.shape) <= gen.options.chunk_size
        # a reduction whose partial results do not combine as one pass gives runs in one pass
        self.chunked = bool(self.shape) and self.shape[0] != 1 and not self.plain and (
            self.reduction is None or self.reduction.opdef.reduction.splits)
        self.exported = {inner: outer for inner, outer in zip(op.blocks[0].yields, op.results)}
        self.plan = getattr(gen, "buffer_plan", {})

    def structure(self) -> tuple:
        """The group's :func:`~symgrad.backends.plan.structure`, and which of its results the
        memory plan gives a buffer. Groups of equal structure render to the same code (with
        other names), so a group whose structure was seen renders nothing."""
        return structure(self.op, self.gen.scalars) + (
            tuple([self.plan.get(v) is not None for v in self.op.results]),)

    def _start_rendering(self):
        """Names and state used only to render the group's functions."""
        gen, op = self.gen, self.op
        # every value the functions mention gets its module-wide name first
        mentioned = [gen.expr(v) for v in self.captures]
        mentioned += [gen.namer.value(v) for inner in op.blocks[0].ops for v in inner.results]
        # names made for the group's functions only (``_s0``, ``x_c``...)
        self.locals = Namer(reserved=list(gen.helpers) + mentioned)
        self.names = Placeholders()   # the functions' text names things by placeholder
        # a run-time dim of the iteration space is a parameter (``run`` renders its size
        # from the binding); the rows function takes those of axes past the first
        self.dims = [str(d) if d is not None else self.fresh("_n" if a == 0 else f"_n{a}")
                     for a, d in enumerate(self.shape)]
        self.name = gen.namer.fresh(f"_group{code_int(op.attrs['group'])}")
        self.worker = f"{self.name}_rows"
        self.local = {}           # Value -> the name an op of the group reads it by
        self.scratch = []         # scratch buffer names, in allocation order
        self.temporaries = []     # names of map values living in scratch buffers
        self.functions = []       # the group's Functions, the one ``run`` calls last

    # --- names ------------------------------------------------------------------------------------
    def name_of(self, value) -> str:
        """How the group's functions read ``value``: a scalar constant's literal, else the
        placeholder of its name."""
        if value in self.gen.scalars:
            return self.gen.expr(value)
        return self.names.of(self.gen.namer.value(value))

    def fresh(self, base: str) -> str:
        """The placeholder of a new local name made from ``base``."""
        return self.names.of(self.locals.fresh(base))

    def args(self, op) -> list[str]:
        gen, local = self.gen, self.local
        return [local[v] if v in local else gen.expr(v, op, i) if v in gen.scalars
                else self.name_of(v) for i, v in enumerate(op.inputs)]

    # --- text ------------------------------------------------------------------------------------
    def heading(self) -> str:
        results = ", ".join(value_label(v) for v in self.op.results)
        return (f"fused group {self.op.attrs['group']} ({counted(len(self.op.blocks[0].ops), 'op')}"
                + (", chunked" if self.chunked else "") + f") -> {results}")

    def docstring(self) -> str:
        loop = [counted(len(self.map_ops), "map op")] if self.map_ops else []
        if self.reduction is not None:
            loop.append(self.gen.text.head(self.reduction))
        text = f"{self.heading()[0].upper()}{self.heading()[1:]}: {' and '.join(loop)}"
        text += f" in chunks of rows ({self.worker})" if self.chunked else ""
        if self.epilogue:
            text += f", then {len(self.epilogue)} epilogue ops"
        text += "."
        forward = {id(inner.forward_op): inner.forward_op for inner in self.op.blocks[0].ops
                   if inner.forward_op is not None}
        if forward:
            ordered = sorted(forward.values(), key=lambda fwd: fwd.results[0].id)
            text += "\n\nBackward of " + "; ".join(map(self.gen.text.head, ordered)) + "."
        return "\n".join("\n".join(wrap_doc(part)) for part in text.split("\n"))

    # --- map phase ------------------------------------------------------------------------------
    def map_lines(self, allocate, scratch_shape) -> list[str]:
        """Statements of the map ops; scratch allocations go to ``allocate``."""
        lines = []
        last = last_uses(self.loop_ops)
        slot_of, free = {}, {}

        def take(dtype):
            pool = free.setdefault(dtype.str, [])
            if pool:
                return pool.pop()
            buffer = self.fresh(f"_s{len(self.scratch)}")
            allocate.append(f"{buffer} = np.empty({shape_code(scratch_shape)}, "
                            f"{dtype_code(dtype)})")
            self.scratch.append(buffer)
            return buffer

        for index, inner_op in enumerate(self.map_ops):
            value = inner_op.results[0]
            name = self.name_of(value)
            args = self.args(inner_op)
            attrs = visible_attrs(inner_op)
            dying = list({id(v): v for v in inner_op.inputs
                          if v in slot_of and last.get(v) == index}.values())
            if value in self.exported:
                direct = self.plain and self.plan.get(self.exported[value]) is None
            else:   # small, or not a ufunc: a chunk-sized result NumPy allocates
                direct = self.plain or not _is_ufunc(inner_op)
            if direct:
                lines.append(Commented(f"{name} = {numpy_emitter(inner_op)(args, attrs)}",
                                       self.gen.text.trailing, inner_op))
                self.local[value] = name
                for v in dying:   # the inputs' scratch buffers are free for later ops
                    free.setdefault(v.dtype.str, []).append(slot_of.pop(v))
                continue
            if value in self.exported:
                target = f"{name}[_lo:_hi]" if self.chunked else name
                name = self.local[value]
            else:
                reuse = next((v for v in dying if v.dtype == value.dtype), None)
                if reuse is not None:
                    target = slot_of.pop(reuse)
                    dying = [v for v in dying if v is not reuse]
                else:
                    target = take(value.dtype)
                slot_of[value] = target
                self.local[value] = name
                self.temporaries.append(name)
            for v in dying:
                free.setdefault(v.dtype.str, []).append(slot_of.pop(v))
            if _is_ufunc(inner_op):
                lines.append(Commented(
                    f"{name} = {numpy_emitter(inner_op)(args, attrs, out=target)}",
                    self.gen.text.trailing, inner_op))
            else:
                lines.append(f"{name} = {target}")
                lines.append(Commented(f"{numpy_emitter(inner_op)(args, attrs, out=name)}",
                                       self.gen.text.trailing, inner_op))
        return lines

    # --- the reduction --------------------------------------------------------------------------
    def reduction_parts(self):
        """``(ufunc, reduce call text for an argument, axes, accumulate dtype, dims of the
        accumulator)``."""
        group = self.group
        ufunc = f"np.{group.combine.ufunc.__name__}"
        axes, keepdims, accumulate = group.axes, group.keepdims, group.accumulator
        typed = self.reduction.opdef.reduction.result_dtype
        dtype_kw = f", dtype={dtype_code(accumulate)}" if typed else ""
        keep_kw = ", keepdims=True" if keepdims else ""

        def call(arg):
            return f"{ufunc}.reduce({arg}, axis={axes!r}{dtype_kw}{keep_kw})"
        out_dims = [("1" if a in axes else d) for a, d in enumerate(self.dims)
                    if keepdims or a not in axes]
        return ufunc, call, axes, accumulate, out_dims

    def finish_reduction(self, acc) -> list[str]:
        """Lines turning the accumulator ``acc`` into the reduction's result."""
        op = self.reduction
        lines = []
        if self.group.mean:
            count = _product([self.dims[a] for a in self.group.axes])
            lines.append(f"{acc} = np.true_divide({acc}, {count})")
        result = op.results[0]
        name = self.name_of(result)
        lines.append(f"{name} = np.asarray({acc}, dtype={dtype_code(result.dtype)})")
        self.local[result] = name
        return lines

    def empty_reduction_check(self, axes, ufunc) -> list[str]:
        """Lines raising NumPy's error when the reduced extent is empty at run time (the
        chunk accumulator would otherwise return its identity, where NumPy and the
        interpreter raise)."""
        dims = [self.dims[a] for a in axes]
        if all(d.isdigit() and d != "0" for d in dims):
            return []
        message = (f"zero-size array to reduction operation {ufunc.removeprefix('np.')} "
                   f"which has no identity")
        return [f"if {_product(dims)} == 0:", f"    raise ValueError({message!r})"]

    # --- the functions --------------------------------------------------------------------------
    def exported_map_values(self):
        """(inner value, outer value) of the exported map values, in result order."""
        map_set = set(self.map_ops)
        return [(inner, outer) for inner, outer in self.exported.items() if inner.op in map_set]

    def lower(self) -> list[str]:
        gen, group = self.gen, self.op.attrs["group"]
        run_lines = [f"# {comment(self.heading())}"]
        args = [gen.expr(v) for v in self.captures]
        args += [gen.dim_code(d) for d, known in zip(self.group.dims, self.shape) if known is None]
        for _, outer in self.exported_map_values():
            slot = self.plan.get(outer)
            if slot is not None:   # the memory plan's buffer, allocated by run
                args.append(gen.slot(slot, outer, run_lines))
        structure = self.structure()
        table = gen.functions
        callee, shared_with = table.reuse(structure, group)
        if callee is None:
            callee, shared_with = table.add(self.render(), group, structure)
        elif CHECK_STRUCTURES:
            table.check(self.render(), structure)
        if shared_with is not None:   # the ops are named here: the function names another's
            run_lines[0] += f" (runs {callee}: the same code as fused group {shared_with}):"
            describe = gen.text.describe
            run_lines[1:1] = [f"#   {describe(inner)}" for inner in self.op.blocks[0].ops]
        readable = ", ".join(gen.namer.value(v) for v in self.op.results)
        run_lines.append(f"{readable} = {callee}({', '.join(args)})")
        return run_lines

    def render(self) -> list:
        """The group's Functions (see the module docstring)."""
        self._start_rendering()
        gen = self.gen
        params = [self.name_of(v) for v in self.captures]
        params += [d for d, known in zip(self.dims, self.shape) if known is None]
        body = []
        for inner, outer in self.exported_map_values():
            name = self.name_of(inner)
            if self.plan.get(outer) is not None:   # the memory plan's buffer, from run
                params.append(name)
            elif not self.plain:
                body.append(f"{name} = np.empty({shape_code(self.dims)}, "
                            f"{dtype_code(inner.dtype)})")
            self.local[inner] = name
        body.extend(self.chunked_lines() if self.chunked else self.one_pass_lines())
        for value in self.captures:   # the epilogue reads whole inputs, not chunk views
            self.local[value] = self.name_of(value)
        for inner_op in self.epilogue:
            body.append(Commented("", gen.text.line, inner_op))
            body.extend(gen.simple(inner_op, self.local, self.name_of))
            self.local[inner_op.results[0]] = self.name_of(inner_op.results[0])
        results = [self.name_of(v) for v in self.op.results]
        body.append(f"return {', '.join(results)}")
        self.functions.append(Function(self.names.of(self.name), params, self.docstring, body,
                                       self.names.names))
        return self.functions

    def one_pass_lines(self) -> list[str]:
        lines = []
        lines.extend(self.map_lines(lines, self.dims))
        if self.reduction is None:
            return lines
        _, call, _, _, _ = self.reduction_parts()
        source = self.reduction.inputs[0]
        acc = self.fresh("_acc")
        lines.append(Commented(f"{acc} = {call(self.local.get(source) or self.name_of(source))}",
                               self.gen.text.trailing, self.reduction))
        lines.extend(self.finish_reduction(acc))
        if self.epilogue and not self.plain:
            lines.append(f"del {', '.join(self.scratch + self.temporaries + [acc])}")
        return lines

    def has_costly_ops(self) -> bool:
        """Whether an op of the loop costs NumPy far more than a memory pass an element (a
        transcendental function, or an op the library does not define), so that its loop takes
        the pool from the pool's own ``min_chunks`` on; a loop of cheap ops only does from
        :data:`~symgrad.backends.options.NUMPY_GROUP_MIN_PARALLEL_CHUNKS` chunks on."""
        return any(op.opdef.name in COSTLY_PER_ELEMENT or op.opdef.user_defined
                   for op in self.loop_ops)

    def chunked_lines(self) -> list[str]:
        """The lines of ``_groupK`` around its rows function, which this appends."""
        gen, lines = self.gen, []
        n = self.dims[0]
        inner = _product(self.dims[1:])
        if inner.isdigit():
            rows = str(max(1, gen.options.chunk_size // int(inner)))
        else:
            rows = "_rows"
            lines.append(f"_rows = max(1, {gen.options.chunk_size} // ({inner}))")

        # the rows function: parameters are what its loop reads
        loop_reads = {v for o in self.loop_ops for v in o.inputs}
        worker_params = [self.name_of(v) for v in self.captures if v in loop_reads]
        worker_params += [d for d, known in zip(self.dims[1:], self.shape[1:]) if known is None]
        worker_params += [self.name_of(inner) for inner, _ in self.exported_map_values()]
        allocate, loop = [], []
        for value in self.captures:   # captures spanning the leading dim: sliced per chunk
            if value in loop_reads and value.ndim == len(self.dims) and value.shape[0] != 1:
                view = self.fresh(f"{gen.expr(value)}_c")
                loop.append(f"{view} = {self.name_of(value)}[_lo:_hi]")
                self.local[value] = view
        for inner, _ in self.exported_map_values():
            self.local[inner] = self.fresh(f"{gen.namer.value(inner)}_c")
        scratch_shape = ["min(_rows, _stop - _start)"] + self.dims[1:]
        loop.extend(self.map_lines(allocate, scratch_shape))

        after, returns = [], None
        if self.reduction is not None:
            ufunc, call, axes, accumulate, out_dims = self.reduction_parts()
            if not self.reduction.opdef.reduction.has_identity:
                lines.extend(self.empty_reduction_check(axes, ufunc))
            source = self.reduction.inputs[0]
            call_text = call(self.local.get(source) or self.name_of(source))
            acc = self.fresh("_acc")
            if 0 in axes:   # one partial accumulator per row range
                allocate.append(f"{acc} = np.full({shape_code(out_dims)}, "
                                f"{_identity_code(self.group.identity)}, {dtype_code(accumulate)})")
                loop.append(Commented(f"{ufunc}({acc}, {call_text}, out={acc})", gen.text.trailing,
                                      self.reduction))
                returns = acc
            else:           # rows of one shared result
                lines.append(f"{acc} = np.empty({shape_code(out_dims)}, "
                             f"{dtype_code(accumulate)})")
                worker_params.append(acc)
                loop.append(Commented(f"{call_text[:-1]}, out={acc}[_lo:_hi])", gen.text.trailing,
                                      self.reduction))
            after = self.finish_reduction(acc)

        worker = self.names.of(self.worker)
        body = allocate + ["for _lo in range(_start, _stop, _rows):",
                           "    _hi = min(_lo + _rows, _stop)"]
        if self.scratch:
            body.append("    if _hi - _lo < _rows:  # the last chunk is shorter")
            body += [f"        {s} = {s}[:_hi - _lo]" for s in self.scratch]
        body += [indented(line) for line in loop]
        if returns is not None:
            body.append(f"return {returns}")
        doc = (f"Rows _start:_stop of fused group {self.op.attrs['group']}, in chunks of _rows "
               f"rows, with scratch buffers of its own")
        if returns is not None:
            doc += (f"; returns its partial {self.reduction.name} "
                    f"({value_label(self.reduction.results[0])})")
        doc += "."
        self.functions.append(Function(worker, ["_start", "_stop", "_rows"] + worker_params,
                                       lambda: "\n".join(wrap_doc(doc)), body, self.names.names))

        call_args = ", ".join([n, rows] + worker_params)
        pool_args = call_args if self.has_costly_ops() else \
            f"{call_args}, min_chunks={NUMPY_GROUP_MIN_PARALLEL_CHUNKS}"
        threaded = gen.options.threads != 1
        if returns is not None:
            ufunc = self.reduction_parts()[0]
            if threaded:
                lines.append(f"_partial = _POOL.over_rows({worker}, {pool_args})")
                lines.append(f"{returns} = {ufunc}.reduce(_partial, axis=0)")
            else:
                lines.append(f"{returns} = {worker}(0, {call_args})")
        else:
            lines.append(f"_POOL.over_rows({worker}, {pool_args})" if threaded
                         else f"{worker}(0, {call_args})")
        if threaded:
            gen.uses_threads = True
        return lines + after
