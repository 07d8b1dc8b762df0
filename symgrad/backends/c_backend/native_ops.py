"""The native heavy ops of a segment: matmul, conv2d and its gradients, pooling and its
gradients.

An op with a :class:`~.lowering.CNativeOp` rule whose kind applies to its types is a member of
a segment (:mod:`.segments`), as a loop group is: a C function rendered from
``c/native_op.c.j2`` (helpers in ``c/native.h.j2``; a window op's loops in
``c/window_parts.c.j2`` over ``c/windows.h.j2``, without Python, which an exported C library
renders too: :func:`window_context`, :mod:`.library.windows`), named from a hash of its code
(ops of equal types and attributes share it), which the segment's step calls with the sizes it
reads (:func:`native_dims`) and the buffers of its inputs and result, the segment's arguments
or temporaries. It runs without the GIL and computes:

- ``matmul``: one GEMM for matrices or a stack of them times a matrix (the stack folded into
  the rows), one GEMM per matrix for two stacks of equal batch dims; an operand whose
  buffer holds its transpose (a ``transpose`` the segments absorb: :mod:`.views`, of a
  matrix or of each matrix of a stack) is read with the GEMM's transpose flag, as NumPy's
  ``matmul`` reads a transposed view (a stack read so, times a matrix: one GEMM per matrix);
- ``conv2d``: per sample and group, ``W_g @ im2col(x)`` (the input itself for a 1x1 kernel of
  stride 1 without padding); ``conv2d_input_grad``: ``col2im(W_g^T @ g)``;
  ``conv2d_weight_grad``: the sum over samples of ``im2col(x) @ g^T`` accumulated by the GEMM,
  then transposed. The samples run in chunks on the prelude's thread pool (``threads``), each
  GEMM on one thread (the BLAS's own thread count is set to 1 meanwhile: :mod:`.blas`); the
  weight gradient sums one partial per chunk, in chunk order, so no result depends on the
  threads;
- pooling and its gradients: direct loops over the windows, with the reference's semantics
  (``-inf`` padding and NaN propagation for the max, ties sharing the gradient evenly,
  padding not counted in the mean).

The GEMM is the BLAS NumPy links (see ``c/native.h.j2`` and :mod:`.blas`); its sums round in
another order than NumPy's ``tensordot``, so results agree with the interpreter to rounding.
"""
from __future__ import annotations

import hashlib

from . import blas
from .ctype import c_type
from .kernels import describe
from .lowering import LOWERINGS, CNativeOp
from .units import Piece, guarded

# max pooling whose windows lie inside the plane runs a row of up to this many windows at a time
ROW_WINDOWS = 1024
# the input gradient of a convolution of at most this many kernel taps gets col2im blocks of
# constant bounds
UNROLLED_TAPS = 25
CONVOLUTIONS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
# where each kind finds the input plane x, the output plane y and the conv weight w:
# an input's number, or "result"
_OPERANDS = {
    "conv2d": dict(x=0, w=1, y="result"),
    "conv2d_input_grad": dict(y=0, w=1, x="result"),
    "conv2d_weight_grad": dict(x=0, y=1, w="result"),
    "max_pool2d": dict(x=0, y="result"),
    "max_pool2d_grad": dict(x=0, y=1),
    "max_pool2d_select": dict(x=0, y="result"),
    "avg_pool2d": dict(x=0, y="result"),
    "avg_pool2d_grad": dict(y=0, x="result"),
}


def native_kind(op, scalars) -> str | None:
    """The native template's kind for ``op``, or None when it runs on NumPy (no rule, types
    or shapes the entry does not compute, an input the host inlines as a literal, or no BLAS
    in this process: :func:`.blas.available`)."""
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CNativeOp) or any(v in scalars for v in op.inputs) or \
            not blas.available():
        return None
    return rule.kind(op)


def _geometry(op, kind) -> dict:
    """Static dims and window attributes of a conv or pooling op."""
    where = _OPERANDS[kind]

    def shape(role):
        at = where.get(role)
        return op.results[0].shape if at == "result" else op.inputs[at].shape

    x, y = shape("x"), shape("y")
    attrs = op.attrs
    if kind in CONVOLUTIONS:
        w = shape("w")
        kernel, dilation, groups = w[2:], attrs["dilation"], attrs["groups"]
        extra = dict(o=w[0], cg=w[1], og=w[0] // groups, groups=groups)
    else:
        kernel, dilation, extra = attrs["kernel_size"], (1, 1), {}
    g = dict(c=x[1], h=x[2], w=x[3], ho=y[2], wo=y[3], kh=kernel[0], kw=kernel[1],
             sh=attrs["stride"][0], sw=attrs["stride"][1], ph=attrs["padding"][0],
             pw=attrs["padding"][1], dh=dilation[0], dw=dilation[1], **extra)
    # every window lies inside the plane (no tap reads padding), and, besides, the windows
    # cover each position once (a gradient then writes each without clearing the plane first)
    g["inside"] = g["ph"] == g["pw"] == 0 and \
        (g["ho"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] < g["h"] and \
        (g["wo"] - 1) * g["sw"] + (g["kw"] - 1) * g["dw"] < g["w"]
    g["tiles"] = g["inside"] and (g["sh"], g["sw"]) == (g["kh"], g["kw"]) and \
        (g["ho"] * g["kh"], g["wo"] * g["kw"]) == (g["h"], g["w"])
    g["taps"] = _taps(g) if kind == "conv2d_input_grad" and g["kh"] * g["kw"] <= UNROLLED_TAPS \
        else []
    return g


def _inside(count, start, stride, size) -> tuple[int, int]:
    """The range ``lo, hi`` of positions ``p < count`` with ``0 <= p * stride + start < size``
    (empty: ``lo == hi``)."""
    lo = min(count, 0 if start >= 0 else (-start + stride - 1) // stride)
    end = (size - start + stride - 1) // stride if size > start else 0
    return lo, max(lo, min(count, end))


def _taps(g) -> list:
    """Per kernel tap ``k = i * kw + j`` of a convolution: the offset ``r, s`` of the input
    position it reads for output (0, 0), and the output rows ``p_lo..p_hi`` and columns
    ``q_lo..q_hi`` for which it reads inside the plane (``c/native_op.c.j2``'s col2im
    blocks)."""
    taps = []
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            r, s = i * g["dh"] - g["ph"], j * g["dw"] - g["pw"]
            p_lo, p_hi = _inside(g["ho"], r, g["sh"], g["h"])
            q_lo, q_hi = _inside(g["wo"], s, g["sw"], g["w"])
            taps.append(dict(k=i * g["kw"] + j, r=r, s=s, p_lo=p_lo, p_hi=p_hi, q_lo=q_lo,
                             q_hi=q_hi))
    return taps


def window_context(op, kind) -> dict:
    """The context of ``c/window_parts.c.j2`` (besides ``part``, ``number``, ``note`` and
    ``T`` and ``kind``) for window op ``op`` of template kind ``kind``: the geometry ``g``,
    ``direct``, ``rows``, ``pooling`` and no ``epilogue``."""
    g = _geometry(op, kind)
    # im2col of a 1x1 kernel of stride 1 without padding is the input itself
    direct = kind in CONVOLUTIONS and (g["kh"], g["kw"], g["sh"], g["sw"], g["ph"], g["pw"]) \
        == (1, 1, 1, 1, 0, 0)
    return dict(g=g, direct=direct, pooling=kind not in CONVOLUTIONS, epilogue=None,
                rows=kind.startswith("max_pool2d") and g["inside"] and g["wo"] <= ROW_WINDOWS)


def native_dims(op, kind) -> list:
    """The dims whose sizes ``op``'s function reads from ``sg_d``: a matmul's first operand's
    dims, then its result's columns; a window op's batch (axis 0 of its first input: every
    other dim is static)."""
    if kind == "matmul":
        return [*op.inputs[0].dims, op.inputs[1].dims[-1]]
    return [op.inputs[0].dims[0]]


def render_native_function(op, kind, transposed, environment, threads=0, flush=False,
                           epilogue=None) -> Piece:
    """The C function computing native ``op`` with template kind ``kind``, named from a hash
    of its code without the comment naming ``op`` (ops it computes alike share it);
    ``transposed``:
    per input, whether its buffer holds its transpose; ``threads``: the program's ``threads``
    option, for the prelude's pool (0: one thread per usable CPU); ``flush``: the program's
    ``flush_denormals`` (every GEMM then runs on threads in the caller's floating-point mode:
    the pool's, or the BLAS on one thread, never the BLAS's own threads); ``epilogue``: the
    context of a conv2d's epilogue (:func:`.epilogues.render_context`), whose operands the
    function takes after the op's inputs and whose outputs it writes instead of the op's
    result."""
    result = op.results[0]
    window = window_context(op, kind) if kind != "matmul" else \
        dict(g={}, direct=False, rows=False, pooling=False)
    window.update(epilogue=epilogue)
    code = environment.get_template("c/native_op.c.j2").render(
        name="@NAME@", number="", note="@NOTE@", kind=kind, inputs=len(op.inputs),
        T=c_type(result.dtype), rank=op.inputs[0].ndim, b_rank=op.inputs[-1].ndim,
        transposed=list(transposed), threads=threads, flush=flush,
        folded=kind == "matmul" and folded(op, transposed), **window)
    name = "sg_n_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    note = describe(op) + ("" if epilogue is None else f", its epilogue {epilogue['note']}")
    code = code.replace("@NAME@", name).replace("@NOTE@", note, 1)
    T = c_type(result.dtype)
    if epilogue is None:
        return _native_piece(name, code, [T] * len(op.inputs), [T])
    return _native_piece(name, code, [T] * len(op.inputs) + epilogue["reads"],
                         epilogue["writes"])


def _native_piece(name, code, inputs, results) -> Piece:
    """The :class:`.units.Piece` of native function ``name``: ``inputs`` and ``results``, the
    C types its pointers point to."""
    parameters = "".join(f", const {t} *" for t in inputs) + \
        "".join(f", {t} *restrict" for t in results)
    return Piece(guarded(name, code), name,
                 f"SG_LINK int {name}(const int64_t *restrict{parameters});", native=True)


def folded(op, transposed) -> bool:
    """Is matmul ``op`` (its operands' buffers ``transposed`` or not) one GEMM, a stack
    times a matrix folded into its rows (``c/native_op.c.j2``)?"""
    a, b = op.inputs
    return b.ndim == 2 and not (a.ndim > 2 and transposed[0])


def pair_note(ops) -> str:
    """The comment naming a pair of matmuls computed side by side."""
    return " beside ".join(describe(op) for op in ops)


def render_matmul_pair(ops, transposed, environment, threads=0) -> Piece:
    """The C function computing two independent matmuls ``ops``, each one GEMM
    (:func:`folded`; ``transposed``: per op, per input, whether its buffer holds its
    transpose), side by side on the pool where both are large and of about equal work
    (``c/matmul_pair.c.j2``): a linear layer's input and weight gradients."""
    products = [dict(rank=op.inputs[0].ndim, transposed=list(flags))
                for op, flags in zip(ops, transposed)]
    T = c_type(ops[0].results[0].dtype)
    code = environment.get_template("c/matmul_pair.c.j2").render(
        name="@NAME@", note="@NOTE@", products=products, T=T,
        offset=ops[0].inputs[0].ndim + 1, threads=threads)
    name = "sg_n_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    code = code.replace("@NAME@", name).replace("@NOTE@", pair_note(ops), 1)
    return _native_piece(name, code, [T] * 4, [T] * 2)
