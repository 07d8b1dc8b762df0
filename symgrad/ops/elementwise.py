"""Elementwise ops: arithmetic, transcendental, comparison, logical, cast, where, clip.

Each op is an :class:`OpDef` followed by its front-end function. All follow NumPy
broadcasting and NumPy 2 promotion with weak Python scalars.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import DTypeError
__all__ = ["add", "multiply", "negative", "tanh"]

from .core import ELEMENTWISE, OpDef, as_values, bind, broadcast_shapes, register, ufunc


# --- shape/dtype rules ------------------------------------------------------------------------
def same_rule(types, attrs):
    """One input; the result has its shape and dtype."""
    (shape, dtype), = types
    return shape, dtype


def float_unary_rule(types, attrs):
    """One floating input (integers are promoted as NumPy does: int -> float64)."""
    (shape, dtype), = types
    if dtype.kind == "b":
        raise DTypeError(f"needs a numeric input, got {dtype}")
    return shape, dtype if dtypes.is_float(dtype) else np.dtype("float64")


def binary_rule(types, attrs):
    """Broadcast shapes; promote dtypes (weak scalars were already given a dtype)."""
    shapes = [s for s, _ in types]
    return broadcast_shapes(*shapes), dtypes.promote(*[d for _, d in types])


def _unbroadcast(g, like):
    from .shape import unbroadcast

    return unbroadcast(g, like)


# --- declarations -----------------------------------------------------------------------------
add_p = register(OpDef(
    "add", ELEMENTWISE, binary_rule, np.add,
    vjp=lambda op, g: [_unbroadcast(g[0], op.inputs[0]), _unbroadcast(g[0], op.inputs[1])],
    emitters={"numpy": ufunc("np.add"), "cuda": "({0} + {1})"}))

multiply_p = register(OpDef(
    "multiply", ELEMENTWISE, binary_rule, np.multiply,
    vjp=lambda op, g: [_unbroadcast(g[0] * op.inputs[1], op.inputs[0]),
                       _unbroadcast(g[0] * op.inputs[0], op.inputs[1])],
    emitters={"numpy": ufunc("np.multiply"), "cuda": "({0} * {1})"}))

negative_p = register(OpDef(
    "negative", ELEMENTWISE, same_rule, np.negative,
    vjp=lambda op, g: [-g[0]],
    emitters={"numpy": ufunc("np.negative"), "cuda": "(-{0})"}))

tanh_p = register(OpDef(
    "tanh", ELEMENTWISE, float_unary_rule, np.tanh,
    vjp=lambda op, g: [g[0] * (1.0 - op.results[0] * op.results[0])],
    emitters={"numpy": ufunc("np.tanh"), "cuda": "tanh({0})"}))


# --- front end --------------------------------------------------------------------------------
def add(x, y):
    return bind(add_p, as_values(x, y))


def multiply(x, y):
    return bind(multiply_p, as_values(x, y))


def negative(x):
    return bind(negative_p, as_values(x))


def tanh(x):
    return bind(tanh_p, as_values(x))
