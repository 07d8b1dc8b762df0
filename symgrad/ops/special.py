"""Special elementwise functions: ``erf`` and ``arctan2``.

``erf`` has no NumPy ufunc: its reference (and the generated NumPy code's helper) computes it
in float64 to within a few ulps (a series with positive terms below 2.5, the continued
fraction of ``erfc`` above) and rounds to the input's dtype; CUDA uses its own ``erf``.
``arctan2`` is ``np.arctan2`` (``atan2`` in CUDA). Both follow the elementwise dtype policy
of :mod:`symgrad.ops.elementwise`; ``erf`` needs a floating input.
"""
from __future__ import annotations

import math

import numpy as np

from .activation import float_rule
from .core import ELEMENTWISE, OpDef, bind, register
from .elementwise import _both, exp, math_rule
from .source import as_values

__all__ = ["erf", "arctan2"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _sg_erf(x):
    """The error function of a floating array, computed in float64 and rounded to its dtype:
    ``2x/sqrt(pi) exp(-x^2) sum_n (2x^2)^n / (1*3*...*(2n+1))`` (Horner's rule) for
    ``|x| < 2.5`` and ``1 - exp(-x^2) / (sqrt(pi) (x + 1/2/(x + 1/(x + 3/2/(x + ...)))))``
    beyond; in chunks, so the temporaries stay small."""
    coefficients = [1.0]
    for n in range(1, 36):
        coefficients.append(coefficients[-1] * 2.0 / (2 * n + 1))
    flat = np.asarray(x, dtype=np.float64).reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, 65536):
        a = np.abs(flat[start:start + 65536])
        part = np.empty_like(a)
        near = a < 2.5
        s = a[near]
        z = s * s
        series = np.full_like(z, coefficients[-1])
        for c in coefficients[-2::-1]:
            series *= z
            series += c
        part[near] = 1.1283791670955126 * s * np.exp(-z) * series
        b = a[~near]
        fraction = b.copy()
        for k in range(36, 0, -1):
            np.divide(0.5 * k, fraction, out=fraction)
            fraction += b
        part[~near] = 1.0 - np.exp(-b * b) / (1.7724538509055159 * fraction)
        out[start:start + 65536] = np.copysign(part, flat[start:start + 65536])
    return out.reshape(np.shape(x)).astype(x.dtype)


def _erf_vjp(op, g):
    x = op.inputs[0]
    return [g[0] * (exp(-(x * x)) * _TWO_OVER_SQRT_PI)]


def _arctan2_vjp(op, g):
    y, x = op.inputs
    norm = x * x + y * y
    return _both(op, lambda: g[0] * x / norm, lambda: -(g[0] * y) / norm)


erf_p = register(OpDef(
    "erf", ELEMENTWISE, float_rule, _sg_erf, vjp=_erf_vjp,
    doc="The error function (floating inputs)."))

arctan2_p = register(OpDef(
    "arctan2", ELEMENTWISE, math_rule(np.arctan2), np.arctan2, vjp=_arctan2_vjp,
    doc="The angle of the point (x, y), in [-pi, pi]."))


def erf(x):
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt`` (floating ``x``)."""
    return bind(erf_p, as_values(x))


def arctan2(y, x):
    """``np.arctan2(y, x)``: the angle of the point ``(x, y)`` in ``[-pi, pi]``, with
    broadcasting; gradients ``x / (x^2 + y^2)`` and ``-y / (x^2 + y^2)``."""
    return bind(arctan2_p, as_values(y, x))
