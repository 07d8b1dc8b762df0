"""Data movement in an exported library: slices, their gradients, joins, splits, pads,
transposes and broadcasts as copy loops.

Every buffer is C-contiguous, so each of these ops is one or more *affine copies*
(:func:`affine_copy`): nested loops over the elements of a space of dims (the result, or
one input) that read the source at ``base + sum(index[a] * stride[a])`` and write the target
the same way (contiguously when it is the space itself). A stride of ``0`` broadcasts, a
negative one runs backwards (a slice of step ``-1``). Emitted (``x[1:, ::-1]`` of an
``x: float32[n, 4]``)::

    /* %3 = slice(%x) {index=((1, None, None), (None, None, -1))} */
    {
        const int64_t sg_x0 = sg_slice_start(sg_s0, 1, 1, 0, 0, 1) * ((4)) + ...,
                      sg_y0 = 0;
        for (int64_t sg_e0 = 0; sg_e0 < (sg_len1); sg_e0++)
            for (int64_t sg_e1 = 0; sg_e1 < (4); sg_e1++)
                v3[sg_y0 + sg_e0 * ((4)) + sg_e1 * (1)] = x[sg_x0 + sg_e0 * (1 * ((4))) +
                                                          sg_e1 * (-1 * (1))];
    }

A slice's start on an axis of run-time size follows Python's rules
(``sg_slice_start``, ``sg_slice_length`` in ``c/library/library.c.j2``); the length of
a slice of a run-time dim is a local of the entry bound to the result's dim.
"""
from __future__ import annotations

from ....ir.printer import format_op_head
from ..ctype import c_comment, literal, supported


def strides(dims) -> list:
    """The C expressions of the strides (in elements) of a C-contiguous array of ``dims``."""
    out, stride = [], "1"
    for dim in reversed(dims):
        out.append(stride)
        stride = f"{stride} * ({dim})" if stride != "1" else f"({dim})"
    return out[::-1]


def product(dims) -> str:
    """The C expression of the product of ``dims`` (C expressions), as an ``int64_t``."""
    return " * ".join(f"(int64_t)({d})" for d in dims) or "1"


def affine_copy(note, space, target, source, src_strides, dst_strides=None, src_base="0",
                dst_base="0") -> str:
    """Nested C loops over the elements of ``space`` (dims as C expressions, one loop each,
    the last innermost): ``target[...] = source[...]``, the source element at ``src_base``
    plus each index times its stride of ``src_strides``, the target's likewise
    (``dst_strides`` None: contiguous over the space). A stride ``"0"`` adds nothing."""
    if dst_strides is None:
        dst_strides = strides(space)
    lines = [f"    /* {note} */", "    {",
             f"        const int64_t sg_x0 = {src_base}, sg_y0 = {dst_base};"]
    indent = "        "
    for axis, dim in enumerate(space):
        lines.append(f"{indent}for (int64_t sg_e{axis} = 0; sg_e{axis} < ({dim}); "
                     f"sg_e{axis}++)")
        indent += "    "

    def offset(base, steps):
        return " + ".join([base] + [f"sg_e{a} * ({s})" for a, s in enumerate(steps)
                                    if s != "0"])
    lines.append(f"{indent}{target}[{offset('sg_y0', dst_strides)}] = "
                 f"{source}[{offset('sg_x0', src_strides)}];")
    lines.append("    }")
    return "\n".join(lines)


def fill(target, count, value, dtype) -> str:
    """``target[0:count] = value`` (a C loop)."""
    return (f"    for (int64_t sg_o = 0; sg_o < (int64_t)({count}); sg_o++)\n"
            f"        {target}[sg_o] = {literal(value, dtype)};")


def heading(op) -> str:
    return c_comment(format_op_head(op))


def _all_supported(op) -> bool:
    return all(supported(v.dtype) for v in list(op.inputs) + list(op.results))


# --- slices -----------------------------------------------------------------------------------
def _slice_map(gen, index, dims, result_dims) -> tuple:
    """``(base, strides)`` of a basic ``index`` into an array of ``dims`` (C expressions):
    the offset of the first element it picks and, per axis of the sliced result, its stride
    in the array. A result dim that no input binds (a slice of a run-time dim) is bound to
    a local computing the slice's length."""
    array_strides = strides(dims)
    base, out, axis, out_axis = [], [], 0, 0
    for item in index:
        if item is None:
            out.append("0")
            out_axis += 1
            continue
        n, stride = dims[axis], array_strides[axis]
        if isinstance(item, (list, tuple)):
            start, stop, step = item
            step = 1 if step is None else step
            flags = f"{int(start is not None)}, {start or 0}, {int(stop is not None)}, " \
                    f"{stop or 0}, {step}"
            dim = result_dims[out_axis]
            if not gen.dims.known(dim):
                local = gen.new_local("sg_len")
                gen.body.append(f"    {local} = sg_slice_length({n}, {flags});   "
                                f"/* dim {c_comment(str(dim))} */")
                gen.dims.bind(dim, local)
            base.append(f"sg_slice_start({n}, {flags}) * ({stride})")
            out.append(f"{step} * ({stride})")
            out_axis += 1
        else:
            base.append(f"((int64_t)({item}) < 0 ? (int64_t)({item}) + ({n}) : "
                        f"(int64_t)({item})) * ({stride})")
        axis += 1
    out += array_strides[axis:]
    return " + ".join(base) or "0", out


def slice_rule(gen, op) -> bool:
    if op.name != "slice" or not _all_supported(op):
        return False
    (x,), result = op.inputs, op.results[0]
    base, src = _slice_map(gen, op.attrs["index"], gen.dims.dims_of(x), result.dims)
    space = gen.dims.dims_of(result)
    gen.body.append(affine_copy(heading(op), space, gen.allocate(result), gen.read(x), src,
                                src_base=base))
    return True


def slice_scatter_rule(gen, op) -> bool:
    """The gradient of a slice: zeros, the cotangent written where the slice read."""
    if op.name != "slice_scatter" or not _all_supported(op):
        return False
    g, result = op.inputs[0], op.results[0]
    dims = gen.dims.dims_of(result)
    base, dst = _slice_map(gen, op.attrs["index"], dims, g.dims)
    target = gen.allocate(result)
    gen.body.append(fill(target, gen.count(result), 0, result.dtype))
    gen.body.append(affine_copy(heading(op), gen.dims.dims_of(g), target, gen.read(g),
                                strides(gen.dims.dims_of(g)), dst, dst_base=base))
    return True


# --- joins and splits --------------------------------------------------------------------------
def concatenate_rule(gen, op) -> bool:
    """Each input copied into its place along the axis (the dtype converted as C does)."""
    if op.name not in ("concatenate", "stack") or not _all_supported(op):
        return False
    result, axis = op.results[0], op.attrs["axis"]
    out = strides(gen.dims.dims_of(result))
    target = gen.allocate(result)
    offset = "0"
    for k, value in enumerate(op.inputs):
        dims = gen.dims.dims_of(value)
        if op.name == "stack":
            dst, base = out[:axis] + out[axis + 1:], f"(int64_t){k} * ({out[axis]})"
        else:
            dst, base = out, f"(int64_t)({offset}) * ({out[axis]})"
            offset = f"{offset} + ({dims[axis]})" if offset != "0" else f"({dims[axis]})"
        gen.body.append(affine_copy(f"{heading(op)}: input {k}", dims, target,
                                    gen.read(value), strides(dims), dst, dst_base=base))
    return True


def split_rule(gen, op) -> bool:
    """Each piece copied out of its place along the axis (``split``, ``split_like``)."""
    if op.name not in ("split", "split_like") or not _all_supported(op):
        return False
    x, axis = op.inputs[0], op.attrs["axis"]
    src, src_dims = gen.read(x), gen.dims.dims_of(x)
    offset = "0"
    for k, piece in enumerate(op.results):
        dims = gen.dims.dims_of(piece)
        base = f"(int64_t)({offset}) * ({strides(src_dims)[axis]})"
        gen.body.append(affine_copy(f"{heading(op)}: piece {k}", dims, gen.allocate(piece),
                                    src, strides(src_dims), src_base=base))
        offset = f"{offset} + ({dims[axis]})" if offset != "0" else f"({dims[axis]})"
    return True


def pad_rule(gen, op) -> bool:
    if op.name != "pad" or not _all_supported(op):
        return False
    (x,), result = op.inputs, op.results[0]
    out = strides(gen.dims.dims_of(result))
    target = gen.allocate(result)
    base = " + ".join(f"(int64_t){before} * ({stride})" for (before, _), stride in
                      zip(op.attrs["pad_width"], out) if before) or "0"
    dims = gen.dims.dims_of(x)
    gen.body.append(fill(target, gen.count(result), op.attrs["constant_values"], result.dtype))
    gen.body.append(affine_copy(heading(op), dims, target, gen.read(x), strides(dims), out,
                                dst_base=base))
    return True


# --- transposes and broadcasts -----------------------------------------------------------------
def transpose_rule(gen, op) -> bool:
    """A transpose the GEMM does not read through its flag: a copy loop."""
    if op.name != "transpose" or not _all_supported(op):
        return False
    (x,), result = op.inputs, op.results[0]
    if result in gen.folded:
        return True
    within = strides(gen.dims.dims_of(x))
    gen.body.append(affine_copy(heading(op), gen.dims.dims_of(result), gen.allocate(result),
                                gen.read(x), [within[a] for a in op.attrs["axes"]]))
    return True


def broadcast_rule(gen, op) -> bool:
    """``broadcast_to``/``broadcast_like``: the input's axes that are absent or of size 1
    read with stride 0 (a dim unknown when the program was built is never broadcast)."""
    if op.name not in ("broadcast_to", "broadcast_like") or not _all_supported(op):
        return False
    source, result = op.inputs[0], op.results[0]
    within, outs = strides(gen.dims.dims_of(source)), gen.dims.dims_of(result)
    lead = len(outs) - source.ndim
    src = ["0" if a < lead or source.dims[a - lead] == 1 else within[a - lead]
           for a in range(len(outs))]
    gen.body.append(affine_copy(heading(op), outs, gen.allocate(result), gen.read(source),
                                src))
    return True


RULES = (transpose_rule, broadcast_rule, slice_rule, slice_scatter_rule, concatenate_rule,
         split_rule, pad_rule)

__all__ = ["RULES", "affine_copy", "fill", "product", "strides"]
