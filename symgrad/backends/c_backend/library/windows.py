"""Convolution and pooling in an exported library: ``conv2d``, ``conv2d_input_grad``,
``conv2d_weight_grad``, ``max_pool2d``, ``max_pool2d_grad``, ``max_pool2d_select``,
``avg_pool2d``, ``avg_pool2d_grad``, NCHW, float32 or float64, every dim static but the batch.

The loops are the C backend's (``c/window_parts.c.j2`` over ``c/windows.h.j2``'s geometry,
im2col and col2im; :func:`..native_ops.window_context` gives their context), rendered once per
op into the library, and the GEMM is the library's CBLAS (``sg_gemm_T``, the C backend's
signature). As in the C backend:

- convolutions: the samples are cut into chunks (``sg_chunk_count``, the same chunks), one
  GEMM per sample and group, and the weight gradient sums the chunks' partials in chunk
  order: the C backend's numbers, given the same GEMM, whichever threads run the chunks.
  They run on the prelude's pool with the BLAS's thread count made 1 meanwhile where the
  BLAS is an OpenBLAS (``sg_blas_threads_single`` in ``c/library/library.c.j2``), else one
  after the other on the calling thread;
- pooling: the planes run on the prelude's pool (each plane computed alone: the same numbers
  whichever thread computes it).

Emitted (a ``conv2d``, abridged)::

    /* %5 = conv2d(%x, %w) {stride=(1, 1), ...} */
    {
        if (sg_blas_fits(64) != 0) { sg_status = sg_fail(SG_ERROR_BLAS, ...); goto done; }
        sg_conv sg_c = {x, ((float *)state->data[0]), NULL, v5, NULL, sg_s0, 1, 0};
        sg_c.chunks = sg_chunk_count((int64_t)(sg_s0) * 13824, (int64_t)(sg_s0), SG_CONV_CHUNKS);
        {
            const int sg_before = sg_blas_threads_single();   /* -1: no OpenBLAS */
            if (sg_before >= 0)
                sg_parallel(sg_w0_part, &sg_c, sg_c.chunks, 0);
            else
                for (int64_t sg_j = 0; sg_j < sg_c.chunks; sg_j++)
                    sg_w0_part(&sg_c, sg_j);
            sg_blas_threads_restore(sg_before);
        }
        if (sg_c.failed) { sg_status = sg_fail(SG_ERROR_MEMORY, ...); goto done; }
    }
"""
from __future__ import annotations

from ..ctype import c_type
from ..lowering import LOWERINGS, CNativeOp
from ..native_ops import CONVOLUTIONS, window_context
from .dims import c_string
from .moves import heading

WINDOW_KINDS = CONVOLUTIONS + ("max_pool2d", "max_pool2d_grad", "max_pool2d_select",
                               "avg_pool2d", "avg_pool2d_grad")
# where each kind's sg_conv finds its operands: x, w, y, out (an input's number, or "result")
_CONV_OPERANDS = {
    "conv2d": ("0", "1", None, "result"),
    "conv2d_input_grad": (None, "1", "0", "result"),
    "conv2d_weight_grad": ("0", None, "1", "result"),
}


def window_kind(op) -> str | None:
    """The window template's kind for ``op`` (the C backend's native kind: float32 or
    float64 throughout, only the batch dim unknown), or None."""
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CNativeOp):
        return None
    kind = rule.kind(op)
    return kind if kind in WINDOW_KINDS else None


def window_rule(gen, op) -> bool:
    kind = window_kind(op)
    if kind is None:
        return False
    number = len(gen.rows)
    part = f"sg_w{number}"
    T = c_type(op.results[0].dtype)
    context = window_context(op, kind)
    gen.helper("c/windows.h.j2")
    gen.rows.append(gen.environment.get_template("c/window_parts.c.j2").render(
        part=part, number=number, note=heading(op), kind=kind, T=T, **context))
    operands = [gen.read(v) for v in op.inputs]
    target = gen.allocate(op.results[0])
    batch = gen.dims.dims_of(op.inputs[0])[0]
    g = context["g"]
    threads = gen.options.threads or 0
    gen.body.append(f"    /* {heading(op)} */")
    if kind in CONVOLUTIONS:
        gen.gemm_types.add(T)
        gen.body.append(_convolution(kind, part, T, g, operands, target, batch,
                                     c_string(heading(op)), threads))
    else:
        second = operands[1] if len(operands) == 2 else "NULL"
        gen.body.append(
            f"    {{\n        struct {part}_args sg_a = {{{operands[0]}, {second}, {target}, "
            f"(int64_t)({batch}) * {g['c']}, 0}};\n"
            f"        sg_a.chunks = sg_chunk_count(sg_a.planes * {g['h'] * g['w']}, "
            f"sg_a.planes, sg_a.planes);\n"
            f"        sg_parallel({part}_part, &sg_a, sg_a.chunks, {threads});\n    }}")
    return True


def _chunks(part, threads) -> list:
    """Run convolution ``part``'s chunks: on the pool with the BLAS on one thread, or one
    after the other where the BLAS's thread count cannot be set."""
    return ["        {",
            "            const int sg_before = sg_blas_threads_single();",
            "            if (sg_before >= 0)",
            f"                sg_parallel({part}_part, &sg_c, sg_c.chunks, {threads});",
            "            else",
            "                for (int64_t sg_j = 0; sg_j < sg_c.chunks; sg_j++)",
            f"                    {part}_part(&sg_c, sg_j);",
            "            sg_blas_threads_restore(sg_before);",
            "        }"]


def _convolution(kind, part, T, g, operands, target, batch, what, threads) -> str:
    """The entry's lines running convolution ``part``'s chunks in order (see the module
    docstring)."""
    def operand(at):
        return "NULL" if at is None else target if at == "result" else operands[int(at)]
    x, w, y, out = (operand(at) for at in _CONV_OPERANDS[kind])
    kk, pp, og = g["cg"] * g["kh"] * g["kw"], g["ho"] * g["wo"], g["og"]
    largest = max(kk, pp, og)
    n = f"(int64_t)({batch})"
    lines = [
        "    {",
        f"        if (sg_blas_fits({largest}) != 0) {{",
        f'            sg_status = sg_fail(SG_ERROR_BLAS, "{what}: a matrix dim of {largest} '
        f'is beyond the integers of the BLAS this library was built with");',
        "            goto done;",
        "        }",
        f"        sg_conv sg_c = {{{x}, {w}, {y}, {out}, NULL, {n}, 1, 0}};",
        f"        sg_c.chunks = sg_chunk_count({n} * {g['groups'] * og * kk * pp}, {n}, "
        f"SG_CONV_CHUNKS);",
    ]
    if kind == "conv2d_weight_grad":
        lines += [
            f"        sg_c.partial = malloc((size_t)(sg_c.chunks * {g['groups'] * kk * og}) "
            f"* sizeof({T}) + 1);",
            "        if (sg_c.partial == NULL)",
            "            sg_c.failed = 1;",
            "        else {",
            *("    " + line for line in _chunks(part, threads)),
            "            if (!sg_c.failed)",
            f"                {part}_sum(sg_c.partial, sg_c.chunks, {target});",
            "            free(sg_c.partial);",
            "        }",
        ]
    else:
        lines += _chunks(part, threads)
    lines += [
        "        if (sg_c.failed) {",
        f'            sg_status = sg_fail(SG_ERROR_MEMORY, "out of memory in {what}");',
        "            goto done;",
        "        }",
        "    }",
    ]
    return "\n".join(lines)


RULES = (window_rule,)
