"""Lowering of one fused group (a ``fusion`` op) to NumPy statements.

The group's *iteration shape* is the shape of its map ops (or of its reduction's input).
When that shape holds more than ``options.chunk_size`` elements (or is only known at run
time), the map ops and the reduction run in a loop over blocks of rows along axis 0 (about
``chunk_size`` elements each) with preallocated chunk-sized scratch buffers written through
ufunc ``out=``; a buffer is reused once its value is dead, in place when the op is an exact
ufunc. Captured inputs with the full leading dim are sliced per chunk, the others broadcast.
Exported map values are written chunk by chunk into their full-size arrays. The reduction
accumulates per chunk (in float64 for float32 sums when ``options.accumulate_float64``);
epilogue ops then run once on the reduced values.
"""
from __future__ import annotations

import math

import numpy as np

from ...ops.core import normalize_axis
from ...passes.fusion import split_body
from .literals import dtype_code, shape_code
from ...ir.printer import format_op_head
from .names import comment
from .ops_text import numpy_emitter, trailing, visible_attrs

# reduce_kind -> (ufunc, identity for accumulating chunks, accumulates with a dtype=)
REDUCERS = {
    "sum": ("np.add", 0, True),
    "mean": ("np.add", 0, True),
    "prod": ("np.multiply", 1, True),
    "max": ("np.maximum", "lowest", False),
    "min": ("np.minimum", "highest", False),
}


def _identity(kind_identity, dtype):
    if kind_identity == "lowest":
        return "-np.inf" if dtype.kind == "f" else ("False" if dtype.kind == "b"
                                                    else repr(int(np.iinfo(dtype).min)))
    if kind_identity == "highest":
        return "np.inf" if dtype.kind == "f" else ("True" if dtype.kind == "b"
                                                   else repr(int(np.iinfo(dtype).max)))
    return repr(kind_identity)


def _dims(gen, shape, captures):
    """Source for each dim of ``shape``: a literal, or a capture's run-time dim."""
    out = []
    for axis, dim in enumerate(shape):
        if dim is not None:
            out.append(str(dim))
            continue
        for value in captures:
            k = axis - (len(shape) - value.ndim)
            if k >= 0 and value.shape[k] is None and value not in gen.scalars:
                out.append(f"{gen.expr(value)}.shape[{k}]")
                break
        else:
            raise AssertionError(f"no input of the group gives run-time dim {axis}")
    return out


def _product(dims):
    if all(d.isdigit() for d in dims):
        return str(math.prod(int(d) for d in dims))
    return " * ".join(dims) if dims else "1"


def _last_uses(ops):
    last = {}
    for index, op in enumerate(ops):
        for value in op.inputs:
            last[value] = index
    return last


def _is_ufunc(op):
    emitter = op.opdef.emitters.get("numpy")
    return getattr(emitter, "ufunc", None) is not None


def lower(gen, op) -> list[str]:
    """The lines computing fusion op ``op`` (see the module docstring)."""
    from .codegen import render

    body = op.attrs["_body"]
    map_ops, reduction, epilogue = split_body(op)
    shape = reduction.inputs[0].shape if reduction is not None else map_ops[0].results[0].shape
    dims = _dims(gen, shape, body.captures)
    static = None not in shape
    size = math.prod(shape) if static else None
    chunked = bool(shape) and shape[0] != 1 and not (static and size <= gen.options.chunk_size)
    exported = {inner: outer for inner, outer in zip(body.outputs, op.results)}
    plan = getattr(gen, "buffer_plan", {})
    loop_ops = map_ops + ([reduction] if reduction is not None else [])

    names = [f"%{v.id}" for v in op.results]
    before = [f"# fused group {op.attrs['group']} ({len(op.blocks[0].ops)} ops"
              + (", chunked" if chunked else "") + f") -> {comment(', '.join(names))}"]
    loop, after = [], []

    # sizes
    if chunked:
        inner = _product(dims[1:])
        if inner.isdigit():
            rows = str(max(1, gen.options.chunk_size // int(inner)))
        else:
            rows = gen.namer.fresh("_rows")
            before.append(f"{rows} = max(1, CHUNK // ({inner}))")
        n = dims[0]
        if not n.isdigit():
            before.append(f"_n = {n}")
            n = dims[0] = "_n"
        first = str(min(int(rows), int(n))) if rows.isdigit() and n.isdigit() \
            else f"min({rows}, {n})"
        scratch_shape = [first] + dims[1:]
    else:
        scratch_shape = dims
    temporaries = []   # names bound before the loop: deleted after it
    loop_names = []    # names bound inside the loop: deleted only when there is no loop

    # full-size outputs of map values
    local = {}
    map_set = set(map_ops)
    for index, (inner, outer) in enumerate(zip(body.outputs, op.results)):
        if inner.op not in map_set:
            continue
        name = gen.namer.value(inner)
        if plan.get(outer) is not None:
            before.append(f"{name} = {gen.slot(plan[outer], outer, before)}")
        else:
            before.append(f"{name} = np.empty({shape_code(dims)}, {dtype_code(inner.dtype)})")
        if chunked:
            view = gen.namer.fresh(f"{name}_c")
            local[inner] = view
            loop_names.append(view)
        else:
            local[inner] = name

    # captures read inside the loop: slice those spanning the leading dim
    if chunked:
        for value in body.captures:
            if value in gen.scalars or not any(v is value for o in loop_ops for v in o.inputs):
                continue
            if value.ndim == len(shape) and value.shape[0] != 1:
                view = gen.namer.fresh(f"{gen.expr(value)}_c")
                loop.append(f"{view} = {gen.expr(value)}[_lo:_hi]")
                local[value] = view
                loop_names.append(view)

    # map ops with scratch buffers
    last = _last_uses(loop_ops)
    scratch_of, free, scratch_count = {}, {}, [0]

    def take(dtype):
        pool = free.setdefault(dtype.str, [])
        if pool:
            return pool.pop()
        number = scratch_count[0]
        scratch_count[0] += 1
        buffer = gen.namer.fresh(f"_s{number}")
        before.append(f"{buffer} = np.empty({shape_code(scratch_shape)}, {dtype_code(dtype)})")
        temporaries.append(buffer)
        scratch_of[buffer] = dtype
        return buffer

    slot_of = {}
    for index, inner_op in enumerate(map_ops):
        value = inner_op.results[0]
        emitter = numpy_emitter(inner_op)
        args = gen.args(inner_op, local)
        dying = list({id(v): v for v in inner_op.inputs
                      if v in slot_of and last.get(v) == index}.values())
        if value in exported:
            target = f"{gen.namer.value(value)}[_lo:_hi]" if chunked else gen.namer.value(value)
            name = local[value]
        else:
            reuse = next((v for v in dying if v.dtype == value.dtype), None) \
                if _is_ufunc(inner_op) else None
            if reuse is not None:
                buffer = slot_of.pop(reuse)
                dying = [v for v in dying if v is not reuse]
            else:
                buffer = take(value.dtype)
            slot_of[value] = buffer
            target = f"{buffer}[:_m]" if chunked else buffer
            name = gen.namer.value(value)
            local[value] = name
            loop_names.append(name)
        for v in dying:
            free.setdefault(v.dtype.str, []).append(slot_of.pop(v))
        attrs = visible_attrs(inner_op)
        tail = trailing(inner_op)
        if _is_ufunc(inner_op):
            loop.append(f"{name} = {emitter(args, attrs, out=target)}{tail}")
        else:
            if name != target:
                loop.append(f"{name} = {target}")
            loop.append(f"{emitter(args, attrs, out=name)}{tail}")

    # the reduction
    if reduction is not None:
        loop, after = _reduce(gen, reduction, dims, chunked, local, before, loop, after,
                              temporaries)

    # epilogue
    for inner_op in epilogue:
        after.append(f"# {comment(format_op_head(inner_op))}")
        after.extend(gen.simple(inner_op, local))
        local[inner_op.results[0]] = gen.namer.value(inner_op.results[0])
    dead = set(temporaries) | {gen.namer.value(v) for o in epilogue + [reduction]
                               if o is not None for v in o.results if v not in exported}
    dead = sorted(dead if chunked else dead | set(loop_names))
    if dead:
        after.append(f"del {', '.join(dead)}")
    if chunked:
        text = render("chunk_loop.py.j2", before=before, n=n, rows=rows, body=loop, after=after)
        return text.rstrip("\n").split("\n")
    return before + loop + after


def _reduce(gen, op, dims, chunked, local, before, loop, after, temporaries):
    """Emit reduction ``op`` (per chunk when ``chunked``); returns (loop, after)."""
    ufunc, identity, takes_dtype = REDUCERS[op.opdef.reduce_kind]
    source = op.inputs[0]
    result = op.results[0]
    axes = normalize_axis(op.attrs.get("axis"), source.ndim)
    keepdims = result.ndim == source.ndim
    dtype = result.dtype
    accumulate = dtype
    if takes_dtype and dtype.kind == "f" and dtype.itemsize < 8 and \
            gen.options.accumulate_float64 and op.opdef.reduce_kind in ("sum", "mean"):
        accumulate = np.dtype("float64")
    arg = local.get(source) or gen.expr(source)
    dtype_kw = f", dtype={dtype_code(accumulate)}" if takes_dtype else ""
    keep_kw = ", keepdims=True" if keepdims else ""
    call = f"{ufunc}.reduce({arg}, axis={axes!r}{dtype_kw}{keep_kw})"
    acc = gen.namer.fresh("_acc")
    temporaries.append(acc)
    out_dims = [("1" if a in axes else d) for a, d in enumerate(dims)
                if keepdims or a not in axes]
    head = trailing(op)
    if chunked and 0 in axes:
        before.append(f"{acc} = np.full({shape_code(out_dims)}, "
                      f"{_identity(identity, accumulate)}, {dtype_code(accumulate)})")
        loop.append(f"{ufunc}({acc}, {call}, out={acc}){head}")
    elif chunked:
        before.append(f"{acc} = np.empty({shape_code(out_dims)}, {dtype_code(accumulate)})")
        out_call = call[:-1] + f", out={acc}[_lo:_hi])"
        loop.append(f"{out_call}{head}")
    else:
        loop.append(f"{acc} = {call}{head}")
    value = acc
    if op.opdef.reduce_kind == "mean":
        count = _product([dims[a] for a in axes])
        after.append(f"{acc} = np.true_divide({acc}, {count})")
    after.append(f"{gen.namer.value(result)} = np.asarray({value}, dtype={dtype_code(dtype)})")
    local[result] = gen.namer.value(result)
    return loop, after
