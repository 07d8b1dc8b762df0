"""Cumulative ops: ``cumsum`` and ``cumprod`` along one axis, as ``np.cumsum`` /
``np.cumprod`` (``axis=None`` flattens first; integers and bools accumulate in int64), and the
internal ``linear_recurrence`` that ``cumprod``'s VJP is built from.

``cumsum`` has a ``reverse`` attr (running sums from the end), which its VJP uses: the
cotangent of a forward cumsum is the reverse cumsum of the cotangent and back.

``cumprod``'s VJP divides by nothing. With ``P = cumprod(x)`` along an axis and ``g`` the
cotangent, the gradient of ``x[j]`` is ``sum over i >= j of g[i] * prod(x[k] for k <= i, k !=
j)`` = ``E[j] * r[j]``, where ``E[j] = P[j - 1]`` (1 at ``j = 0``) is the product of the
elements before ``j`` and ``r[j] = g[j] + x[j + 1] * r[j + 1]`` (``r`` = ``g`` at the last
element) sums the cotangents after ``j`` weighted by the products between: a linear
recurrence run from the end, the op ``linear_recurrence``. The gradient is a polynomial in
``x`` and ``g`` built from ops whose VJPs are exact too (that of ``linear_recurrence`` is two
more recurrences and a shift), so derivatives of every order are exact whatever the zeros in
``x``, also two or more zeros in one slice, where a formula dividing by ``x`` (or by a
product) loses the derivative through the other zeros.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError
from ..ir.dims import unify
from ..ir.value import format_shape
from . import elementwise as ew
from .batching import axis_batch
from .core import OPAQUE, OpDef, bind, normalize_axis, register, same_dims
from .shape import concatenate, frontend_checks, reshape, strided_slice
from .source import as_value

__all__ = ["cumsum", "cumprod"]

_ACCUMULATE_INT = np.dtype("int64")


def _cumulative_rule(types, attrs):
    (shape, dtype), = types
    if not 0 <= attrs["axis"] < len(shape):
        raise ShapeError(f"axis {attrs['axis']} is out of range for {format_shape(shape)}")
    return shape, np.dtype(attrs.get("dtype", dtype))


def _sg_cumsum(x, axis, reverse=False, dtype=None):
    """``np.cumsum`` along ``axis``; running sums from the end with ``reverse``."""
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=dtype), axis)
    return np.cumsum(x, axis=axis, dtype=dtype)


def _cumsum_vjp(op, g):
    x, = op.inputs
    grad = cumsum_along(g[0], op.attrs["axis"], not op.attrs["reverse"])
    return [grad if grad.dtype == x.dtype else ew.cast(grad, x.dtype)]


def _cumprod_vjp(op, g):
    """``E * r`` (module docstring): the products before each element times the recurrence
    from the end that sums the later cotangents."""
    x, = op.inputs
    axis = op.attrs["axis"]
    before = shift_along(op.results[0], axis, fill=1)
    return [before * linear_recurrence(x, g[0], axis, reverse=True)]


def _sg_linear_recurrence(a, b, axis, reverse=False):
    """``h`` along ``axis`` with ``h[0] = b[0]`` and ``h[i] = b[i] + a[i] * h[i - 1]``; with
    ``reverse``, ``h[-1] = b[-1]`` and ``h[i] = b[i] + a[i + 1] * h[i + 1]``. Either way ``a[i]``
    links positions ``i - 1`` and ``i``, and ``a[0]`` is never read. One pass along the axis."""
    h = np.array(b, copy=True)
    rows, links = np.moveaxis(h, axis, 0), np.moveaxis(a, axis, 0)
    if reverse:
        for i in range(len(rows) - 2, -1, -1):
            rows[i] += links[i + 1] * rows[i + 1]
    else:
        for i in range(1, len(rows)):
            rows[i] += links[i] * rows[i - 1]
    return h


def _linear_recurrence_rule(types, attrs):
    (a_shape, a_dtype), (b_shape, b_dtype) = types
    if not dtypes.is_float(a_dtype) or np.dtype(a_dtype) != np.dtype(b_dtype):
        raise DTypeError(f"needs two inputs of one float dtype, got {np.dtype(a_dtype)} and "
                         f"{np.dtype(b_dtype)}")
    if len(a_shape) != len(b_shape) or any(
            m is not None and n is not None and m != n for m, n in zip(a_shape, b_shape)):
        raise ShapeError(f"needs two inputs of one shape, got {format_shape(a_shape)} and "
                         f"{format_shape(b_shape)}")
    shape = tuple(m if n is None else n for m, n in zip(a_shape, b_shape))
    return _cumulative_rule([(shape, b_dtype)], attrs)


def _linear_recurrence_dims(input_dims, attrs, shapes):
    a, b = input_dims
    return [tuple(unify(m, n, f"the inputs, axis {axis}") for axis, (m, n) in enumerate(zip(a, b)))]


def _linear_recurrence_vjp(op, g):
    """With ``u`` the recurrence of the cotangent in the other direction over the same links:
    the gradient of ``b`` is ``u``, that of the link ``a[i]`` is the cotangent arriving at one
    end of it times the value leaving the other (``u[i] * h[i - 1]``, or ``u[i - 1] * h[i]``
    from the end), 0 for the unread ``a[0]``."""
    a, _ = op.inputs
    h, = op.results
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    u = linear_recurrence(a, g[0], axis, not reverse)
    grad_a = shift_along(u, axis, fill=0) * h if reverse else u * shift_along(h, axis, fill=0)
    return [grad_a, u]


cumsum_p = register(OpDef(
    "cumsum", OPAQUE, _cumulative_rule, impl=_sg_cumsum, vjp=_cumsum_vjp,
    dims=same_dims(0),
    batch=axis_batch("axis"),
    doc="Running sums along axis (from the end with reverse)."))

cumprod_p = register(OpDef(
    "cumprod", OPAQUE, _cumulative_rule,
    impl=lambda x, axis, dtype=None: np.cumprod(x, axis=axis, dtype=dtype), vjp=_cumprod_vjp,
    dims=same_dims(0),
    batch=axis_batch("axis"),
    doc="Running products along axis (derivatives of every order exact with zeros)."))

linear_recurrence_p = register(OpDef(
    "linear_recurrence", OPAQUE, _linear_recurrence_rule, impl=_sg_linear_recurrence,
    vjp=_linear_recurrence_vjp, dims=_linear_recurrence_dims,
    batch=axis_batch("axis"),
    doc="h[i] = b[i] + a[i] * h[i - 1] along axis (from the end with reverse: "
        "h[i] = b[i] + a[i + 1] * h[i + 1]); cumprod's VJP."))


def linear_recurrence(a, b, axis, reverse=False):
    """Internal: the ``linear_recurrence`` op of ``a`` (the links) and ``b`` along a
    normalised ``axis`` (see :func:`_sg_linear_recurrence`)."""
    return bind(linear_recurrence_p, [a, b], {"axis": axis, "reverse": bool(reverse)})


def shift_along(x, axis, fill):
    """Internal: ``y`` with ``y[i] = x[i - 1]`` along ``axis`` and ``y[0] = fill`` (0 or 1),
    built from slices and a concatenation (so it is differentiable, and empty for an empty
    axis)."""
    def index(item):
        return ((None, None, None),) * axis + (item,)
    first = strided_slice(x, index((None, 1, None)))
    start = ew.zeros_like(first) if fill == 0 else ew.ones_like(first)
    return concatenate([start, strided_slice(x, index((None, -1, None)))], axis)


def cumsum_along(x, axis, reverse=False):
    """Internal: the ``cumsum`` op along a normalised ``axis``."""
    attrs = {"axis": axis, "reverse": bool(reverse)}
    if not dtypes.is_float(x.dtype) and x.dtype != _ACCUMULATE_INT:
        attrs["dtype"] = _ACCUMULATE_INT.name
    return bind(cumsum_p, [x], attrs)


def _cumulative(name, x, axis):
    x = as_value(x)
    if axis is None:
        x = reshape(x, [-1])
        axis = 0
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an int or None, got {axis!r}")
    with frontend_checks(name, [x]):
        if x.ndim == 0:
            raise ShapeError("needs an input of rank >= 1 (or axis=None)")
        return x, normalize_axis(int(axis), x.ndim)[0]


def cumsum(x, axis=None):
    """``np.cumsum``: running sums along ``axis`` (``None``: of the flattened ``x``);
    integers and bools give int64."""
    x, axis = _cumulative("cumsum", x, axis)
    return cumsum_along(x, axis)


def cumprod(x, axis=None):
    """``np.cumprod``: running products along ``axis`` (``None``: of the flattened ``x``);
    integers and bools give int64. Derivatives of every order are exact with zeros in ``x``
    (module docstring)."""
    x, axis = _cumulative("cumprod", x, axis)
    attrs = {"axis": axis}
    if not dtypes.is_float(x.dtype):
        attrs["dtype"] = _ACCUMULATE_INT.name
    return bind(cumprod_p, [x], attrs)
