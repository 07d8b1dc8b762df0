"""Cumulative ops: ``cumsum`` and ``cumprod`` along one axis, as ``np.cumsum`` /
``np.cumprod`` (``axis=None`` flattens first; integers and bools accumulate in int64).

``cumsum`` has a ``reverse`` attr (running sums from the end), which its VJP uses: the
cotangent of a forward cumsum is the reverse cumsum of the cotangent and back.

``cumprod``'s VJP needs no division by zero: with ``P = cumprod(x)``, element ``j`` before
the first zero of its slice gets ``rcumsum(g * P)_j / x_j``; the first zero gets
``rcumsum(g * Q)_j`` with ``Q`` the cumprod of ``x`` with that zero replaced by 1; elements
after it get 0 (as ``rcumsum(g * P) / 1``, which keeps their dependence on the zero). First
derivatives are exact for any number of zeros, second derivatives unless a slice holds two or
more zeros (as for ``prod``).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import ShapeError
from ..ir.value import format_shape
from . import elementwise as ew
from .core import OPAQUE, OpDef, bind, normalize_axis, register, same_dims
from .shape import frontend_checks, reshape
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
    x, = op.inputs
    axis = op.attrs["axis"]
    is_zero = ew.equal(x, 0)
    zeros_so_far = cumsum_along(ew.cast(is_zero, "int64"), axis)
    first_zero = ew.logical_and(is_zero, ew.equal(zeros_so_far, 1))
    without_first = bind(cumprod_p, [ew.where(first_zero, 1, x)], {"axis": axis})
    at_first = cumsum_along(g[0] * without_first, axis, reverse=True)
    others = cumsum_along(g[0] * op.results[0], axis, reverse=True) / ew.where(is_zero, 1, x)
    return [ew.where(first_zero, at_first, others)]


cumsum_p = register(OpDef(
    "cumsum", OPAQUE, _cumulative_rule, impl=_sg_cumsum, vjp=_cumsum_vjp,
    dims=same_dims(0),
    doc="Running sums along axis (from the end with reverse)."))

cumprod_p = register(OpDef(
    "cumprod", OPAQUE, _cumulative_rule,
    impl=lambda x, axis, dtype=None: np.cumprod(x, axis=axis, dtype=dtype), vjp=_cumprod_vjp,
    dims=same_dims(0),
    doc="Running products along axis (a VJP exact with zeros)."))


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
    integers and bools give int64. The gradient is exact with zeros in ``x`` (module
    docstring)."""
    x, axis = _cumulative("cumprod", x, axis)
    attrs = {"axis": axis}
    if not dtypes.is_float(x.dtype):
        attrs["dtype"] = _ACCUMULATE_INT.name
    return bind(cumprod_p, [x], attrs)
