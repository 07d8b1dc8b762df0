"""C types and literals of the dtypes the C backend computes in.

Every supported dtype is stored and computed in one C type (``bool`` for NumPy's one-byte
bools, ``<stdint.h>`` integers, ``float``, ``double``); other dtypes (float16, bfloat16...) are
not lowered to C: groups holding them run on NumPy.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..c_expressions import integer_literal
from ..common import comment, number_text

TYPES = {
    "bool": "bool", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
    "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t",
    "uint64": "uint64_t", "float32": "float", "float64": "double",
}


@functools.lru_cache(maxsize=None)
def _type_of(dtype) -> str | None:
    return TYPES.get(np.dtype(dtype).name)


def supported(dtype) -> bool:
    return _type_of(dtype) is not None


def c_type(dtype) -> str:
    """The C type of ``dtype`` (a ``KeyError`` for one C does not compute)."""
    text = _type_of(dtype)
    if text is None:
        raise KeyError(np.dtype(dtype).name)
    return text


def literal(value, dtype) -> str:
    """A C expression of ``c_type(dtype)`` holding ``value`` (a Python or NumPy scalar)."""
    dtype = np.dtype(dtype)
    array = np.asarray(value).astype(dtype)
    if dtype.kind == "b":
        return "true" if bool(array) else "false"
    if dtype.kind in "iu":
        return integer_literal(int(array), dtype, c_type(dtype))
    single = dtype.name == "float32"
    text = number_text(array)
    if text is None:
        number = float(array)
        if math.isnan(number):
            return '__builtin_nanf("")' if single else '__builtin_nan("")'
        text = "__builtin_inff()" if single else "__builtin_inf()"
        return text if number > 0 else f"(-{text})"
    text += "f" if single else ""
    return f"({text})" if text.startswith("-") else text


def c_comment(text: str) -> str:
    """``text`` safe inside a ``/* */`` comment: ASCII, one line, no comment terminator."""
    return comment(text).replace("*/", "* /")


def value_label(value) -> str:
    """``%12 (name)``: ``value`` named inside a C string literal (errors name it)."""
    text = f"%{value.id}" + (f" ({value.name})" if value.name else "")
    return c_comment(text).replace("\\", "\\\\").replace('"', '\\"')
