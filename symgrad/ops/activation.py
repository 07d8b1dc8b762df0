"""Activation functions: ``relu``, ``leaky_relu``, ``gelu`` (tanh approximation) and
``softplus``.

Elementwise ops like those of :mod:`symgrad.ops.elementwise`, published through
:mod:`symgrad.nn` (so ``__all__`` is empty here: they are not top-level ``symgrad`` names).
``gelu``, ``softplus`` and ``leaky_relu`` need a floating input; ``relu`` takes any number and
gives 0 gradient at 0 (``leaky_relu``: ``negative_slope`` at 0).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..errors import DTypeError
from .core import ELEMENTWISE, OpDef, bind, register
from .elementwise import same_rule, sigmoid, tanh, where
from .source import as_values

__all__: list = []

_GELU_C = math.sqrt(2.0 / math.pi)   # tanh approximation: 0.5 x (1 + tanh(c (x + k x^3)))
_GELU_K = 0.044715


def float_rule(types, attrs):
    """One floating input; the result has its shape and dtype."""
    (shape, dtype), = types
    if not dtypes.is_float(dtype):
        raise DTypeError(f"needs a floating input, got {dtype} (cast it first)")
    return shape, dtype


def gelu_ref(x):
    """GELU, tanh approximation (the NumPy reference and the generated code's helper)."""
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))


def _gelu_vjp(op, g):
    x = op.inputs[0]
    x2 = x * x
    t = tanh((x + x2 * x * _GELU_K) * _GELU_C)
    slope = (1 + t) * 0.5 + x * (1 - t * t) * (x2 * (3 * _GELU_K) + 1) * (0.5 * _GELU_C)
    return [g[0] * slope]


relu_p = register(OpDef(
    "relu", ELEMENTWISE, same_rule, lambda x: np.maximum(x, 0),
    vjp=lambda op, g: [where(op.inputs[0] > 0, g[0], 0)]))

gelu_p = register(OpDef(
    "gelu", ELEMENTWISE, float_rule, gelu_ref, vjp=_gelu_vjp))

softplus_p = register(OpDef(
    "softplus", ELEMENTWISE, float_rule, lambda x: np.logaddexp(0, x),
    vjp=lambda op, g: [g[0] * sigmoid(op.inputs[0])]))


def leaky_relu_ref(x, negative_slope):
    """``x`` where positive, else ``x * negative_slope`` (in ``x``'s dtype)."""
    return np.where(x > 0, x, x * x.dtype.type(negative_slope))


leaky_relu_p = register(OpDef(
    "leaky_relu", ELEMENTWISE, float_rule, leaky_relu_ref,
    vjp=lambda op, g: [where(op.inputs[0] > 0, g[0], g[0] * op.attrs["negative_slope"])]))


def relu(x):
    """``maximum(x, 0)``; gradient 1 where x > 0, else 0 (also at 0)."""
    return bind(relu_p, as_values(x))


def gelu(x):
    """GELU with the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return bind(gelu_p, as_values(x))


def softplus(x):
    """``log(1 + exp(x))``, computed as ``logaddexp(0, x)`` (no overflow)."""
    return bind(softplus_p, as_values(x))


def leaky_relu(x, negative_slope=0.01):
    """``x`` where ``x > 0``, else ``negative_slope * x`` (floating ``x``); the gradient is 1
    or ``negative_slope`` (also at 0)."""
    if isinstance(negative_slope, bool) or \
            not isinstance(negative_slope, (int, float, np.integer, np.floating)):
        raise TypeError(f"leaky_relu: negative_slope must be a number, got {negative_slope!r}")
    return bind(leaky_relu_p, as_values(x), {"negative_slope": float(negative_slope)})
