"""Gathers in an exported library: ``take``, ``take_along_axis`` and their gradients
(``take_grad``, ``take_along_axis_grad``), with NumPy's semantics.

The indices are checked first, as the Python backends check them
(:func:`~symgrad.ops.indexing._sg_check_indices`): one min and one max over the index array;
an index outside ``[-n, n)`` fails the call with ``NAME_ERROR_VALUE`` and the message Python
raises, naming the op, the line that built it, the index, the axis and its size, which
``NAME_last_error()`` returns. A negative index counts from the end. A gradient adds the
cotangent into zeros in the order of its elements, as ``np.add.at`` does (a repeated index
accumulates, in the same order, so float64 sums are NumPy's). Emitted (``take(x, i, axis=0)``
of an ``x: float64[5, 3]``)::

    /* %2 = take(%x, %i) {axis=0} */
    {
        int64_t sg_lo = 0, sg_hi = 0;
        for (int64_t sg_k = 0; sg_k < (int64_t)((size_t)(sg_s0)); sg_k++) { ... min, max ... }
        if (sg_lo < -(5) || sg_hi >= (5)) {
            sg_status = sg_fail(SG_ERROR_VALUE, "take (built at m.py:4): index %lld is out of "
                                "bounds for axis 0 with size %lld", ...);
            goto done;
        }
    }
    for (int64_t sg_p = 0; sg_p < (int64_t)(1); sg_p++)
        for (int64_t sg_j = 0; sg_j < (int64_t)((size_t)(sg_s0)); sg_j++) {
            const int64_t sg_i = (int64_t)i[sg_j] < 0 ? (int64_t)i[sg_j] + (5) : (int64_t)i[sg_j];
            for (int64_t sg_q = 0; sg_q < (int64_t)(3); sg_q++)
                v2[(sg_p * (...) + sg_j) * (3) + sg_q] = x[(sg_p * (5) + sg_i) * (3) + sg_q];
        }
"""
from __future__ import annotations

from ....ir.location import op_site
from ..ctype import supported
from .dims import c_string
from .moves import fill, heading, product, strides


def _wrapped(index, n) -> str:
    return f"((int64_t)({index}) < 0 ? (int64_t)({index}) + ({n}) : (int64_t)({index}))"


def _check(gen, op, indices, n, axis) -> str:
    """The range check of ``indices`` against an axis of ``n`` elements (see the module
    docstring); ``axis`` None: the flattened input."""
    where = "the flattened input" if axis is None else f"axis {axis}"
    message = c_string(f"{op_site(op)}: index ") + "%lld" + c_string(
        f" is out of bounds for {where} with size ") + "%lld"
    count, source = gen.count(indices), gen.read(indices)
    return "\n".join([
        f"    /* {heading(op)}: the indices' range */",
        "    {",
        "        int64_t sg_lo = 0, sg_hi = 0;",
        f"        for (int64_t sg_k = 0; sg_k < (int64_t)({count}); sg_k++) {{",
        f"            const int64_t sg_i = (int64_t){source}[sg_k];",
        "            if (sg_k == 0 || sg_i < sg_lo)",
        "                sg_lo = sg_i;",
        "            if (sg_k == 0 || sg_i > sg_hi)",
        "                sg_hi = sg_i;",
        "        }",
        f"        if (sg_lo < -({n}) || sg_hi >= ({n})) {{",
        f'            sg_status = sg_fail(SG_ERROR_VALUE, "{message}", (long long)(sg_lo < '
        f"-({n}) ? sg_lo : sg_hi), (long long)({n}));",
        "            goto done;",
        "        }",
        "    }"])


def _usable(op) -> bool:
    return all(supported(v.dtype) for v in list(op.inputs) + list(op.results))


def _take_loops(gen, op, target, source, indices, n, outer, inner, scatter) -> str:
    """``take``'s loops (``scatter``: its gradient's, adding into ``target``)."""
    m = gen.count(indices)
    index = _wrapped(f"{gen.read(indices)}[sg_j]", n)
    gathered = f"(sg_p * (int64_t)({m}) + sg_j) * ({inner}) + sg_q"
    taken = f"(sg_p * ({n}) + sg_i) * ({inner}) + sg_q"
    assignment = (f"{target}[{taken}] += {source}[{gathered}];" if scatter else
                  f"{target}[{gathered}] = {source}[{taken}];")
    return "\n".join([
        f"    /* {heading(op)} */",
        f"    for (int64_t sg_p = 0; sg_p < ({outer}); sg_p++)",
        f"        for (int64_t sg_j = 0; sg_j < (int64_t)({m}); sg_j++) {{",
        f"            const int64_t sg_i = {index};",
        f"            for (int64_t sg_q = 0; sg_q < ({inner}); sg_q++)",
        f"                {assignment}",
        "        }"])


def take_rule(gen, op) -> bool:
    if op.name not in ("take", "take_grad") or not _usable(op):
        return False
    scatter = op.name == "take_grad"
    data, indices = op.inputs[:2]
    result, axis = op.results[0], op.attrs["axis"]
    full = gen.dims.dims_of(result if scatter else data)   # the gathered array's dims
    if axis is None:
        n, outer, inner = product(full), "1", "1"
    else:
        n, outer, inner = full[axis], product(full[:axis]), product(full[axis + 1:])
    gen.body.append(_check(gen, op, indices, n, axis))
    target = gen.allocate(result)
    if scatter:
        gen.body.append(fill(target, gen.count(result), 0, result.dtype))
    gen.body.append(_take_loops(gen, op, target, gen.read(data), indices, n, outer, inner,
                                scatter))
    return True


def take_along_axis_rule(gen, op) -> bool:
    """``take_along_axis`` and its gradient: a loop over the gathered elements, the indices
    and the array read with stride 0 on the axes they broadcast along."""
    if op.name not in ("take_along_axis", "take_along_axis_grad") or not _usable(op):
        return False
    scatter = op.name == "take_along_axis_grad"
    data, indices = op.inputs[:2]
    result, axis = op.results[0], op.attrs["axis"]
    array = result if scatter else data              # the array gathered from
    space_value = data if scatter else result        # the gathered elements
    dims = gen.dims.dims_of(array)
    space = gen.dims.dims_of(space_value)
    if axis is None:
        n = product(dims)
        array_strides, index_strides = ["0"], strides(space)
        axis_stride = "1"
    else:
        n, within = dims[axis], strides(dims)
        axis_stride = within[axis]
        array_strides = ["0" if d == axis or array.dims[d] == 1 else within[d]
                         for d in range(len(space))]
        index_within = strides(gen.dims.dims_of(indices))
        index_strides = ["0" if indices.dims[d] == 1 and space_value.dims[d] != 1
                         else index_within[d] for d in range(len(space))]
    gen.body.append(_check(gen, op, indices, n, axis))
    target = gen.allocate(result)
    if scatter:
        gen.body.append(fill(target, gen.count(result), 0, result.dtype))
    total = " * ".join(f"(size_t)({d})" for d in space) or "1"
    steps = []
    for d in range(len(space) - 1, -1, -1):
        step = f"sg_c = sg_r % ({space[d]}); sg_r /= ({space[d]});"
        if array_strides[d] != "0":
            step += f" sg_x += sg_c * ({array_strides[d]});"
        if index_strides[d] != "0":
            step += f" sg_k += sg_c * ({index_strides[d]});"
        steps.append(step)
    at = f"sg_x + {_wrapped(f'{gen.read(indices)}[sg_k]', n)} * ({axis_stride})"
    assignment = (f"{target}[{at}] += {gen.read(data)}[sg_o];" if scatter else
                  f"{target}[sg_o] = {gen.read(data)}[{at}];")
    lines = [f"    /* {heading(op)} */",
             f"    for (int64_t sg_o = 0; sg_o < (int64_t)({total}); sg_o++) {{",
             "        int64_t sg_r = sg_o, sg_x = 0, sg_k = 0, sg_c = 0;"]
    lines += [f"        {step}" for step in steps]
    lines += ["        (void)sg_r; (void)sg_c;", f"        {assignment}", "    }"]
    gen.body.append("\n".join(lines))
    return True


RULES = (take_rule, take_along_axis_rule)
