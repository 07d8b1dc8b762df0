"""Python source text for scalar constants and dtypes in generated code."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..common import number_text
from .lowering import exact_ufunc


def dtype_code(dtype) -> str:
    """``np.float32`` for a dtype (``np.bool_`` for bool, ``ml_dtypes.bfloat16`` for
    bfloat16: a module using it imports ``ml_dtypes``)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "V":
        return f"ml_dtypes.{dtype.name}"
    return "np.bool_" if dtype.kind == "b" else f"np.{dtype.name}"


def python_literal(array: np.ndarray) -> str:
    """Source of a 0-d array's value as a Python literal that converts back to it exactly
    (shortest round-trip digits of its own precision; ``np.nan``/``np.inf`` when not finite)."""
    text = number_text(array)
    if text is not None:
        return text
    value = array[()]
    return "np.nan" if math.isnan(value) else ("np.inf" if value > 0 else "-np.inf")


def typed_scalar(array: np.ndarray) -> str:
    """A NumPy scalar of the array's dtype: strongly typed, like the 0-d array it stands for."""
    return f"{dtype_code(array.dtype)}({python_literal(array)})"


def scalar_for(array: np.ndarray, consumer, position: int) -> str:
    """Source of the 0-d constant ``array`` as argument ``position`` of op ``consumer``: a bare
    (weak) Python literal when NumPy gives the same result dtype that way, else a typed scalar."""
    if not exact_ufunc(consumer.opdef):
        return typed_scalar(array)
    others = tuple(v.dtype for i, v in enumerate(consumer.inputs) if i != position)
    if not others:
        return typed_scalar(array)
    return python_literal(array) if _weak_is_exact(others, array.dtype, array.item()) \
        else typed_scalar(array)


@functools.lru_cache(maxsize=4096)
def _weak_is_exact(others: tuple, dtype, item) -> bool:
    """Does NumPy give the same result dtype for ``others`` with ``item`` as a weak Python
    scalar as with a 0-d array of ``dtype``?"""
    try:
        return np.result_type(*others, item) == np.result_type(*others, dtype)
    except TypeError:
        return False
