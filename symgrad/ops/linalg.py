"""Linear algebra: ``matmul`` with NumPy semantics.

1-D operands are promoted as ``np.matmul`` does (a row vector on the left, a column vector on
the right, the added dim dropped from the result) and the batch dims broadcast.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError
from ..ir.dims import broadcast_dims, unify
from ..ir.value import format_shape
from .batching import with_rank
from .core import OPAQUE, OpDef, bind, broadcast_shapes, register
from .source import as_values

__all__ = ["matmul"]


def _ops():
    import symgrad.ops as ops

    return ops


def matmul_rule(types, attrs):
    (sa, da), (sb, db) = types
    shapes = f"{format_shape(sa)} @ {format_shape(sb)}"
    if not sa or not sb:
        raise ShapeError(f"operands must have rank >= 1, got {shapes}")
    if da.kind == "b" and db.kind == "b":
        raise DTypeError("needs numeric operands, got bool @ bool")
    a = sa if len(sa) > 1 else (1,) + sa
    b = sb if len(sb) > 1 else sb + (1,)
    if a[-1] is not None and b[-2] is not None and a[-1] != b[-2]:
        raise ShapeError(f"inner dims differ: {shapes} ({a[-1]} != {b[-2]})")
    try:
        batch = broadcast_shapes(a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(f"batch dims cannot be broadcast: {shapes}") from None
    rows = (a[-2],) if len(sa) > 1 else ()
    cols = (b[-1],) if len(sb) > 1 else ()
    return batch + rows + cols, dtypes.promote(da, db)


def matmul_dims(input_dims, attrs, shapes):
    """Batch dims broadcast, the inner dims unify, rows and columns are kept."""
    da, db = input_dims
    a = da if len(da) > 1 else (1,) + da
    b = db if len(db) > 1 else db + (1,)
    unify(a[-1], b[-2], "the inner dims")
    batch = broadcast_dims(a[:-2], b[:-2], what="the batch dims")
    return [batch + ((a[-2],) if len(da) > 1 else ()) + ((b[-1],) if len(db) > 1 else ())]


def _swap_last(x):
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return _ops().transpose(x, perm)


def matmul_vjp(op, cotangents):
    """Promote 1-D operands (and the cotangent) to matrices, take ``g @ b.T`` and
    ``a.T @ g``, drop the promoted dims again and sum away broadcast batch dims."""
    ops = _ops()
    a, b = op.inputs
    g = cotangents[0]
    a2 = ops.expand_dims(a, 0) if a.ndim == 1 else a
    b2 = ops.expand_dims(b, -1) if b.ndim == 1 else b
    if b.ndim == 1:
        g = ops.expand_dims(g, -1)
    if a.ndim == 1:
        g = ops.expand_dims(g, -2)
    from .shape import unbroadcast

    def grad_a():
        ga = matmul(g, _swap_last(b2))
        return unbroadcast(ops.squeeze(ga, -2) if a.ndim == 1 else ga, a)

    def grad_b():
        gb = matmul(_swap_last(a2), g)
        return unbroadcast(ops.squeeze(gb, -1) if b.ndim == 1 else gb, b)
    return [grad_a, grad_b]


def matmul_batch(op, inputs, axes):
    """Batched operands of per-example rank 2 or more get size-1 axes after the batch up to
    the larger rank, so matmul's own broadcasting pairs examples; a batched vector on the left
    of a shared matrix is a matrix of rows as it is. Any other 1-D operand is promoted to a
    matrix as matmul does (a row ``[1, n]`` on the left, a column ``[n, 1]`` on the right) and
    the promoted axes are squeezed from the result."""
    a, b = op.inputs
    x, y = inputs
    if not ((axes[0] is not None and a.ndim == 1 and (axes[1] is not None or b.ndim > 2))
            or (axes[1] is not None and b.ndim == 1)):
        ndim = max(a.ndim, b.ndim)
        aligned = [v if axis is None or example.ndim < 2 else with_rank(v, ndim)
                   for v, axis, example in zip(inputs, axes, op.inputs)]
        return [bind(matmul_p, aligned)], [0]
    ops = _ops()
    if a.ndim == 1:
        x = ops.expand_dims(x, x.ndim - 1)
    if b.ndim == 1:
        y = ops.expand_dims(y, y.ndim)
    ndim = max(a.ndim, b.ndim, 2)
    x = x if axes[0] is None else with_rank(x, ndim)
    y = y if axes[1] is None else with_rank(y, ndim)
    out = bind(matmul_p, [x, y])
    promoted = (-2,) * (a.ndim == 1) + (-1,) * (b.ndim == 1)
    if promoted:
        out = ops.squeeze(out, (-2, -1) if len(promoted) == 2 else promoted[0])
    return [out], [0]


matmul_p = register(OpDef(
    "matmul", OPAQUE, matmul_rule, np.matmul, vjp=matmul_vjp,
    dims=matmul_dims,
    batch=matmul_batch,
    doc="Matrix product with NumPy semantics (1-D promotion, broadcast batch dims)."))


def _sg_matmul(a, b, out=None, pool=None):
    """``np.matmul(a, b, out=out)`` in a generated NumPy module with a thread pool (``pool``,
    its ``RowPool``): a product of fewer than 2**22 multiply-adds runs with the BLAS
    single-threaded (``pool.single_blas()``). OpenBLAS would split it between its threads for
    little gain, and those would then spin for about 0.1 s after the call, beside the pool's
    threads. A larger product keeps the BLAS's threads."""
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    if pool is None or max(a.size * n, b.size * m) >= 1 << 22:
        return np.matmul(a, b, out=out)
    with pool.single_blas():
        return np.matmul(a, b, out=out)


def matmul(a, b):
    """``a @ b`` as ``np.matmul``: operands of rank >= 1; the last dim of ``a`` must equal
    the second-to-last of ``b`` (the only dim of a 1-D ``b``); batch dims broadcast.

    A product of matrices whose contracted dim is statically 1 is an outer product, built as
    ``a * b`` (``[..., n, 1] * [..., 1, m]``, each element one product, as in the matmul):
    an elementwise op that fuses and writes its result once, where a GEMM with ``k = 1`` per
    matrix would not (the per-example weight gradient of a layer under ``vmap`` is one)."""
    a, b = as_values(a, b)
    if a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == 1 and b.shape[-2] == 1 and \
            a.dtype.kind != "b" and b.dtype.kind != "b":
        return _ops().multiply(a, b)
    return bind(matmul_p, [a, b])
