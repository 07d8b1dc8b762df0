"""Reductions (category REDUCTION): sum, mean, max, min, prod, argmax, argmin, logsumexp;
and ``var`` and ``std``, front-end compositions of them.

Attributes: ``axis`` is the sorted tuple of reduced axes (``argmax``/``argmin``: one int or
``None``), ``keepdims`` a bool, and ``dtype`` (a dtype name) appears only where the result's
dtype differs from the input's: ``sum``/``prod`` of integers and bools accumulate in int64 and
``mean`` of them gives float64, as in NumPy (which would give uint64 for unsigned inputs,
a dtype symgrad does not support). The reductions backends may fuse with the ops feeding them
declare their :class:`~symgrad.ops.core.Reduction`.

VJPs re-insert the reduced axes of the cotangent (when ``keepdims=False``) and broadcast it
back over the input (see :func:`expand_back`). ``max``/``min`` split the cotangent evenly among
tied elements. ``prod``'s VJP is exact with zeros in the input: each element receives the
product of the others, computed without dividing by zero: first derivatives are exact for
any number of zeros, second derivatives unless a reduced slice holds two or more zeros.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..errors import DTypeError
from . import elementwise as ew
from .batching import axis_batch
from .core import (HIGHEST, LOWEST, OPAQUE, REDUCTION, Algebra, OpDef, Reduction, bind,
                   normalize_axis, register)
from .shape import broadcast_like, expand_dims, frontend_checks
from .source import as_value

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "logsumexp", "var", "std"]

_ACCUMULATE_INT = np.dtype("int64")


# --- shape/dtype rules ------------------------------------------------------------------------
def reduced_shape(shape, axes, keepdims):
    """``shape`` with ``axes`` removed (or set to 1 when ``keepdims``)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_rule(types, attrs):
    (shape, dtype), = types
    return reduced_shape(shape, attrs["axis"], attrs["keepdims"]), attrs.get("dtype", dtype)


def _arg_rule(types, attrs):
    (shape, dtype), = types
    axis = attrs["axis"]
    axes = tuple(range(len(shape))) if axis is None else (axis,)
    return reduced_shape(shape, axes, attrs["keepdims"]), _ACCUMULATE_INT


def _numeric_rule(types, attrs):
    (shape, dtype), = types
    if dtype.kind == "b":
        raise DTypeError(f"needs a numeric input, got {dtype}")
    return _reduce_rule(types, attrs)


# --- VJP building blocks -----------------------------------------------------------------------
def keep_axes(v, axes, keepdims):
    """``v`` (a reduction's result or cotangent) with its reduced ``axes`` as size-1 axes."""
    return v if keepdims or not axes else expand_dims(v, axes)


def expand_back(g, x, axes, keepdims):
    """The cotangent ``g`` of a reduction of ``x`` broadcast back to ``x``'s shape (reduced
    leading axes are left for broadcasting to re-create)."""
    if not keepdims:
        lead = 0
        while lead in axes:
            lead += 1
        inner = tuple(a - lead for a in axes if a >= lead)
        g = expand_dims(g, inner) if inner else g
    return broadcast_like(g, x)


def _reduced_axes(op, ndim) -> tuple:
    """The input axes reduction ``op`` reduces (``argmax``'s int or None included)."""
    axis = op.attrs["axis"]
    if axis is None:
        return tuple(range(ndim))
    return tuple(axis) if isinstance(axis, tuple) else (axis % ndim,)


def dims_source(x, axes):
    """``(value, axes)`` with the same run-time dims as ``x`` in ``axes``, read as far up as
    reductions allow: a reduction's kept dims are its input's, so the count of
    ``sum(y, axis=1)`` along axis 0 reads ``y``'s dim 0, and the reduction is not computed
    just for its shape when nothing else needs it. A block argument (``op`` None) is its own
    source."""
    while x.op is not None and x.op.opdef.category == REDUCTION and len(x.op.inputs) == 1:
        source, = x.op.inputs
        reduced = _reduced_axes(x.op, source.ndim)
        kept = [i for i in range(source.ndim)
                if x.op.attrs["keepdims"] or i not in reduced]
        x, axes = source, tuple(kept[a] for a in axes)
    return x, axes


def _count(x, axes, dtype):
    """The number of elements of ``x`` in ``axes``: a Python int when those dims are known,
    else a ``size`` op evaluated at run time on :func:`dims_source`."""
    dims = [x.shape[a] for a in axes]
    if None not in dims:
        return math.prod(dims)
    source, axes = dims_source(x, tuple(axes))
    return bind(size_p, [source], {"axis": axes, "dtype": np.dtype(dtype).name})


def _sum_vjp(op, g):
    x, = op.inputs
    return [expand_back(g[0], x, op.attrs["axis"], op.attrs["keepdims"])]


def _mean_vjp(op, g):
    x, = op.inputs
    axes, keepdims = op.attrs["axis"], op.attrs["keepdims"]
    count = _count(x, axes, g[0].dtype)
    if isinstance(count, int):  # an empty reduction has nothing to receive the cotangent
        scaled = g[0] * (1.0 / count) if count else g[0]
    else:
        scaled = g[0] / count
    return [expand_back(scaled, x, axes, keepdims)]


def _extremum_vjp(op, g):
    """Even split among the elements equal to the result."""
    x, = op.inputs
    axes, keepdims = op.attrs["axis"], op.attrs["keepdims"]
    hit = ew.cast(ew.equal(x, keep_axes(op.results[0], axes, keepdims)), x.dtype)
    share = hit / sum(hit, axis=axes, keepdims=True)
    return [keep_axes(g[0], axes, keepdims) * share]


def _prod_vjp(op, g):
    """d prod / d x_i = the product of the other elements, built without dividing by zero:
    ``prod / x_i`` at non-zero x_i (0 when the slice holds a zero, yet still carrying the
    right derivative through ``prod``), and at a zero the product of the non-zeros if it is
    the slice's only zero, else 0."""
    x, = op.inputs
    axes, keepdims = op.attrs["axis"], op.attrs["keepdims"]
    is_zero = ew.equal(x, 0)
    safe = ew.where(is_zero, 1, x)
    only_zero = ew.cast(ew.equal(sum(ew.cast(is_zero, x.dtype), axis=axes, keepdims=True), 1),
                        x.dtype)
    at_zero = only_zero * prod(safe, axis=axes, keepdims=True)
    others = ew.where(is_zero, at_zero, keep_axes(op.results[0], axes, keepdims) / safe)
    return [keep_axes(g[0], axes, keepdims) * others]


def _logsumexp_vjp(op, g):
    x, = op.inputs
    axes, keepdims = op.attrs["axis"], op.attrs["keepdims"]
    softmax = ew.exp(x - keep_axes(op.results[0], axes, keepdims))
    return [keep_axes(g[0], axes, keepdims) * softmax]


# --- references ----------------------------------------------------------------------------------
def _sg_logsumexp(x, axis, keepdims, dtype=None):
    """Stable ``log(sum(exp(x)))`` over ``axis``: the (finite) max is subtracted first."""
    if dtype is not None:
        x = x.astype(dtype)
    peak = np.amax(x, axis=axis, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return out if keepdims else np.squeeze(out, axis=axis)


def _numpy_reduction(function):
    return lambda x, axis, keepdims, dtype=None: function(x, axis=axis, keepdims=keepdims,
                                                          dtype=dtype)


def _arg_batch(op, inputs, axes):
    """argmax/argmin over one axis shift it; over the whole of each example, the examples
    are flattened first (static per-example size)."""
    if op.attrs["axis"] is not None:
        return _BATCH_AXIS(op, inputs, axes)
    (x,), (example,) = inputs, op.inputs
    if op.attrs["keepdims"] or example.size is None:
        return NotImplemented
    flat = bind("reshape", [x], {"shape": (-1, example.size)})
    return [bind(op.opdef, [flat], {"axis": 1, "keepdims": False})], [0]


_BATCH_AXIS = axis_batch("axis")


# --- declarations -----------------------------------------------------------------------------
sum_p = register(OpDef(
    "sum", REDUCTION, _reduce_rule, _numpy_reduction(np.sum), vjp=_sum_vjp,
    reduction=Reduction(ew.add_p, 0, widens=True), batch=_BATCH_AXIS))

mean_p = register(OpDef(
    "mean", REDUCTION, _reduce_rule, _numpy_reduction(np.mean), vjp=_mean_vjp,
    reduction=Reduction(ew.add_p, 0, widens=True, mean=True), batch=_BATCH_AXIS))

prod_p = register(OpDef(
    "prod", REDUCTION, _reduce_rule, _numpy_reduction(np.prod), vjp=_prod_vjp,
    reduction=Reduction(ew.multiply_p, 1, splits=False), batch=_BATCH_AXIS))

max_p = register(OpDef(
    "max", REDUCTION, _reduce_rule,
    lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims), vjp=_extremum_vjp,
    reduction=Reduction(ew.maximum_p, LOWEST, result_dtype=False), batch=_BATCH_AXIS))

min_p = register(OpDef(
    "min", REDUCTION, _reduce_rule,
    lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims), vjp=_extremum_vjp,
    reduction=Reduction(ew.minimum_p, HIGHEST, result_dtype=False), batch=_BATCH_AXIS))

argmax_p = register(OpDef(
    "argmax", REDUCTION, _arg_rule,
    lambda x, axis, keepdims: np.argmax(x, axis=axis, keepdims=keepdims),
    doc="Index of the first maximum (int64); no gradient.", batch=_arg_batch))

argmin_p = register(OpDef(
    "argmin", REDUCTION, _arg_rule,
    lambda x, axis, keepdims: np.argmin(x, axis=axis, keepdims=keepdims),
    doc="Index of the first minimum (int64); no gradient.", batch=_arg_batch))

logsumexp_p = register(OpDef(
    "logsumexp", REDUCTION, _numeric_rule, _sg_logsumexp, vjp=_logsumexp_vjp,
    doc="log(sum(exp(x))) computed stably (the max is subtracted first).", batch=_BATCH_AXIS))

size_p = register(OpDef(
    "size", OPAQUE,
    lambda types, attrs: ((), np.dtype(attrs["dtype"])),
    impl=lambda x, axis, dtype: np.asarray(math.prod(x.shape[a] for a in axis), dtype=dtype),
    algebra=Algebra(shape_only=(0,)),
    batch=axis_batch("axis", shared_ok=True, shared_result=True),
    doc="The number of elements of the input in ``axis``, read from its run-time shape "
        "(a scalar of ``dtype``; used by mean's VJP when those dims are unknown)."))


# --- front end --------------------------------------------------------------------------------
def _reduce(opdef, x, axis, keepdims, dtype_rule=None):
    x = as_value(x)
    with frontend_checks(opdef.name, [x]):
        axes = normalize_axis(axis, x.ndim)
    attrs = {"axis": axes, "keepdims": bool(keepdims)}
    dtype = dtype_rule(x.dtype) if dtype_rule else x.dtype
    if dtype != x.dtype:
        attrs["dtype"] = dtype.name
    return bind(opdef, [x], attrs)


def _accumulate(dtype):
    return dtype if dtypes.is_float(dtype) else _ACCUMULATE_INT


def _mean_dtype(dtype):
    return dtype if dtypes.is_float(dtype) else np.dtype("float64")


def sum(x, axis=None, keepdims=False):  # noqa: A001  (NumPy's name)
    """``np.sum`` over ``axis`` (None: all, an int, or a tuple); ints and bools give int64."""
    return _reduce(sum_p, x, axis, keepdims, _accumulate)


def mean(x, axis=None, keepdims=False):
    """``np.mean``; ints give float64. Its VJP divides by the count known at run time."""
    return _reduce(mean_p, x, axis, keepdims, _mean_dtype)


def prod(x, axis=None, keepdims=False):
    """``np.prod``; ints and bools give int64. Its VJP handles zeros (module docstring)."""
    return _reduce(prod_p, x, axis, keepdims, _accumulate)


def max(x, axis=None, keepdims=False):  # noqa: A001  (NumPy's name)
    """``np.max``; the gradient is split evenly among tied maxima."""
    return _reduce(max_p, x, axis, keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001  (NumPy's name)
    """``np.min``; the gradient is split evenly among tied minima."""
    return _reduce(min_p, x, axis, keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x), axis))`` computed stably; ints give float64."""
    return _reduce(logsumexp_p, x, axis, keepdims, _mean_dtype)


def _arg_reduce(opdef, x, axis, keepdims):
    x = as_value(x)
    if axis is not None:
        with frontend_checks(opdef.name, [x]):
            axis, = normalize_axis(int(axis), x.ndim)
    return bind(opdef, [x], {"axis": axis, "keepdims": bool(keepdims)})


def argmax(x, axis=None, keepdims=False):
    """``np.argmax`` (int64; ``axis`` None or one int); carries no gradient."""
    return _arg_reduce(argmax_p, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """``np.argmin`` (int64; ``axis`` None or one int); carries no gradient."""
    return _arg_reduce(argmin_p, x, axis, keepdims)


def var(x, axis=None, keepdims=False, ddof=0):
    """``np.var``: the mean squared deviation from the mean over ``axis``, divided by
    ``count - ddof`` instead of ``count`` (``ddof=1``: the unbiased estimate); ints and bools
    give float64. Composed of ``mean``/``sum``, so its gradients are theirs."""
    x = as_value(x)
    with frontend_checks("var", [x]):
        axes = normalize_axis(axis, x.ndim)
    if isinstance(ddof, bool) or not isinstance(ddof, (int, np.integer)) or ddof < 0:
        raise ValueError(f"var: ddof must be a non-negative int, got {ddof!r}")
    if not dtypes.is_float(x.dtype):
        x = ew.cast(x, "float64")
    centered = x - mean(x, axis=axes, keepdims=True)
    squares = centered * centered
    if not ddof:
        return mean(squares, axis=axes, keepdims=keepdims)
    count = _count(x, axes, x.dtype)
    divisor = float(count - ddof if count > ddof else 0) if isinstance(count, int) else \
        ew.maximum(count - ddof, 0)
    return sum(squares, axis=axes, keepdims=keepdims) / divisor


def std(x, axis=None, keepdims=False, ddof=0):
    """``np.std``: ``sqrt(var(x, axis, keepdims, ddof))``."""
    return ew.sqrt(var(x, axis=axis, keepdims=keepdims, ddof=ddof))
