"""Activation functions: ``relu``, ``gelu`` (tanh approximation) and ``softplus``.

Elementwise ops like those of :mod:`symgrad.ops.elementwise`, published through
:mod:`symgrad.nn` (so ``__all__`` is empty here: they are not top-level ``symgrad`` names).
``gelu`` and ``softplus`` need a floating input; ``relu`` takes any number and gives 0 gradient
at 0.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError
from .core import ELEMENTWISE, OpDef, as_values, bind, register
from .elementwise import same_rule, sigmoid, tanh, where

__all__: list = []

_GELU_C = math.sqrt(2.0 / math.pi)   # tanh approximation: 0.5 x (1 + tanh(c (x + k x^3)))
_GELU_K = 0.044715


def float_rule(types, attrs):
    """One floating input; the result has its shape and dtype."""
    (shape, dtype), = types
    if dtype.kind != "f":
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
    vjp=lambda op, g: [where(op.inputs[0] > 0, g[0], 0)],
    emitters={"cuda": "((({0}) > ({T})0 || ({0}) != ({0})) ? ({0}) : ({T})0)"}))

gelu_p = register(OpDef(
    "gelu", ELEMENTWISE, float_rule, gelu_ref, vjp=_gelu_vjp,
    emitters={"cuda": "(({T})0.5 * ({0}) * (({T})1 + tanh(({T})0.7978845608028654"
                      " * (({0}) + ({T})0.044715 * ({0}) * ({0}) * ({0})))))"}))

softplus_p = register(OpDef(
    "softplus", ELEMENTWISE, float_rule, lambda x: np.logaddexp(0, x),
    vjp=lambda op, g: [g[0] * sigmoid(op.inputs[0])],
    emitters={"cuda": "(((({0}) > ({T})0) ? ({0}) : ({T})0) + log1p(exp(-fabs({0}))))"}))


def relu(x):
    """``maximum(x, 0)``; gradient 1 where x > 0, else 0 (also at 0)."""
    return bind(relu_p, as_values(x))


def gelu(x):
    """GELU with the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return bind(gelu_p, as_values(x))


def softplus(x):
    """``log(1 + exp(x))``, computed as ``logaddexp(0, x)`` (no overflow)."""
    return bind(softplus_p, as_values(x))
