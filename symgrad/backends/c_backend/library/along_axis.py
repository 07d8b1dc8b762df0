"""Ops that run along one axis, in an exported library: ``cumsum``, ``cumprod``,
``linear_recurrence`` (cumprod's gradient) and ``argmax``/``argmin``; and ``logsumexp``
(:func:`logsumexp_rule`).

Each is a loop over the ``outer * inner`` lines of the axis (``outer``: the product of the
dims before it, ``inner``: of those after it; element ``j`` of line ``(p, q)`` at
``(p * n + j) * inner + q``), computed as NumPy does: running sums and products one element
after the other in the result's dtype (so float sums are NumPy's bits), the recurrence
``h[i] = b[i] + a[i] * h[i - 1]`` rounding the product first, and the first extremum's
index (the first NaN's, when the line holds one). Emitted (``cumsum(x, axis=1)`` of an
``x: float32[n, 4]``)::

    /* %1 = cumsum(%x) {axis=1, reverse=False} */
    for (int64_t sg_p = 0; sg_p < (int64_t)(sg_s0); sg_p++)
        for (int64_t sg_q = 0; sg_q < 1; sg_q++)
            for (int64_t sg_j = 0; sg_j < (4); sg_j++) {
                const int64_t sg_at = (sg_p * (4) + sg_j) * (1) + sg_q;
                v1[sg_at] = sg_j == 0 ? (float)x[sg_at] : v1[sg_at - (1)] + (float)x[sg_at];
            }
"""
from __future__ import annotations

from ..ctype import c_type, supported
from .dims import c_string
from .moves import heading, product, strides


def _line(gen, value, axis) -> tuple:
    """``(outer, n, inner)`` of ``value`` around ``axis`` (None: the flattened value)."""
    dims = gen.dims.dims_of(value)
    if axis is None:
        return "1", product(dims), "1"
    return product(dims[:axis]), f"({dims[axis]})", product(dims[axis + 1:])


def _loops(outer, n, inner, body, reverse=False) -> str:
    """The loops over every line and along it (backwards with ``reverse``); ``body`` sees
    ``sg_j`` (the position) and ``sg_at`` (the element's index)."""
    along = (f"for (int64_t sg_j = {n} - 1; sg_j >= 0; sg_j--)" if reverse else
             f"for (int64_t sg_j = 0; sg_j < {n}; sg_j++)")
    return (f"    for (int64_t sg_p = 0; sg_p < {outer}; sg_p++)\n"
            f"        for (int64_t sg_q = 0; sg_q < {inner}; sg_q++)\n"
            f"            {along} {{\n"
            f"                const int64_t sg_at = (sg_p * {n} + sg_j) * ({inner}) + sg_q;\n"
            f"{body}\n"
            f"            }}")


def _usable(op) -> bool:
    return all(supported(v.dtype) for v in list(op.inputs) + list(op.results))


def cumulative_rule(gen, op) -> bool:
    """``cumsum`` (from the end with ``reverse``) and ``cumprod``."""
    if op.name not in ("cumsum", "cumprod") or not _usable(op):
        return False
    (x,), result = op.inputs, op.results[0]
    reverse = bool(op.attrs.get("reverse"))
    outer, n, inner = _line(gen, x, op.attrs["axis"])
    combine = "+" if op.name == "cumsum" else "*"
    source, target, T = gen.read(x), gen.allocate(result), c_type(result.dtype)
    first, previous = (f"{n} - 1", f"sg_at + ({inner})") if reverse else \
        ("0", f"sg_at - ({inner})")
    body = (f"                {target}[sg_at] = sg_j == {first} ? ({T}){source}[sg_at] : "
            f"{target}[{previous}] {combine} ({T}){source}[sg_at];")
    gen.body.append(f"    /* {heading(op)} */\n" + _loops(outer, n, inner, body, reverse))
    return True


def recurrence_rule(gen, op) -> bool:
    """``linear_recurrence``: ``h[i] = b[i] + a[i] * h[i - 1]`` (from the end with
    ``reverse``: ``h[i] = b[i] + a[i + 1] * h[i + 1]``)."""
    if op.name != "linear_recurrence" or not _usable(op):
        return False
    (a, b), result = op.inputs, op.results[0]
    reverse = op.attrs["reverse"]
    outer, n, inner = _line(gen, result, op.attrs["axis"])
    links, values, target = gen.read(a), gen.read(b), gen.allocate(result)
    first, other = (f"{n} - 1", f"sg_at + ({inner})") if reverse else ("0", f"sg_at - ({inner})")
    link = f"{links}[{other}]" if reverse else f"{links}[sg_at]"
    body = (f"                {target}[sg_at] = sg_j == {first} ? {values}[sg_at] : "
            f"{values}[sg_at] + {link} * {target}[{other}];")
    gen.body.append(f"    /* {heading(op)} */\n" + _loops(outer, n, inner, body, reverse))
    return True


def arg_extremum_rule(gen, op) -> bool:
    """``argmax``/``argmin``: the index of the first extremum of each line (of the first NaN
    in a line that holds one); an empty line fails as NumPy does."""
    if op.name not in ("argmax", "argmin") or not _usable(op):
        return False
    (x,), result = op.inputs, op.results[0]
    outer, n, inner = _line(gen, x, op.attrs["axis"])
    better = ">" if op.name == "argmax" else "<"
    source, target = gen.read(x), gen.allocate(result)
    message = c_string(f"attempt to get {op.name} of an empty sequence")
    gen.body.append("\n".join([
        f"    /* {heading(op)} */",
        f"    if ({n} == 0 && (int64_t)({gen.count(result)}) > 0) {{",
        f'        sg_status = sg_fail(SG_ERROR_VALUE, "{message}");',
        "        goto done;",
        "    }",
        f"    for (int64_t sg_p = 0; sg_p < {outer}; sg_p++)",
        f"        for (int64_t sg_q = 0; sg_q < {inner}; sg_q++) {{",
        "            int64_t sg_best = 0;",
        f"            for (int64_t sg_j = 1; sg_j < {n}; sg_j++) {{",
        f"                const int64_t sg_b = (sg_p * {n} + sg_best) * ({inner}) + sg_q;",
        f"                const int64_t sg_at = (sg_p * {n} + sg_j) * ({inner}) + sg_q;",
        f"                if ({source}[sg_b] != {source}[sg_b])",
        "                    break;   /* a NaN: the first one wins */",
        f"                if ({source}[sg_at] != {source}[sg_at] || "
        f"{source}[sg_at] {better} {source}[sg_b])",
        "                    sg_best = sg_j;",
        "            }",
        f"            {target}[sg_p * ({inner}) + sg_q] = sg_best;",
        "        }"]))
    return True


def logsumexp_rule(gen, op) -> bool:
    """``logsumexp`` over its axes, as the reference computes it: the line's max subtracted
    (0 when it is not finite), ``log`` of the sum of ``exp``, the max added back; in the
    result's float type. The sum runs in order (NumPy's is pairwise) and ``exp``/``log`` are
    the C library's: the numbers agree to rounding, not to the bit."""
    if op.name != "logsumexp" or not _usable(op) or op.results[0].dtype.kind != "f":
        return False
    (x,), result = op.inputs, op.results[0]
    dims, axes = gen.dims.dims_of(x), op.attrs["axis"]
    within = strides(dims)
    kept = [a for a in range(len(dims)) if a not in axes]
    T, source, target = c_type(result.dtype), gen.read(x), gen.allocate(result)

    def offset(index, over):
        steps = [f"sg_c = sg_r % ({dims[a]}); sg_r /= ({dims[a]}); sg_at += sg_c * "
                 f"({within[a]});" for a in reversed(over)]
        return [f"            int64_t sg_r = {index}, sg_c = 0, sg_at = sg_base;",
                *[f"            {step}" for step in steps], "            (void)sg_r; (void)sg_c;"]
    lines = [f"    /* {heading(op)} */",
             f"    for (int64_t sg_o = 0; sg_o < {product([dims[a] for a in kept])}; sg_o++) {{",
             "        int64_t sg_base = 0;", "        {",
             *[line.replace("sg_at = sg_base", "sg_at = 0") for line in offset("sg_o", kept)],
             "            sg_base = sg_at;", "        }",
             f"        {T} sg_peak = -({T})__builtin_inf(), sg_sum = 0;",
             f"        const int64_t sg_count = {product([dims[a] for a in axes])};",
             "        for (int64_t sg_k = 0; sg_k < sg_count; sg_k++) {",
             *offset("sg_k", axes),
             f"            const {T} sg_v = ({T}){source}[sg_at];",
             "            if (sg_v > sg_peak || sg_v != sg_v)",
             "                sg_peak = sg_peak != sg_peak ? sg_peak : sg_v;",
             "        }",
             "        if (!__builtin_isfinite(sg_peak))",
             "            sg_peak = 0;",
             "        for (int64_t sg_k = 0; sg_k < sg_count; sg_k++) {",
             *offset("sg_k", axes),
             f"            sg_sum += exp(({T}){source}[sg_at] - sg_peak);",
             "        }",
             f"        {target}[sg_o] = log(sg_sum) + sg_peak;",
             "    }"]
    gen.body.append("\n".join(lines))
    return True


RULES = (cumulative_rule, recurrence_rule, arg_extremum_rule, logsumexp_rule)
