"""C types and literals for generated CUDA code.

Each dtype has a *storage* type (how arrays hold it) and a *compute* type (what kernels do
arithmetic in): float16 is stored as ``sg_half`` (16 raw bits, converted by the prelude's
``sg_h2f``/``sg_f2h``) and bfloat16 as ``sg_bf16`` (``sg_bf2f``/``sg_f2bf``, rounding to
nearest even), both computed in float; every other dtype computes in its own type.
Reduction accumulators widen narrow integers and bools to ``int`` so warp shuffles apply.
"""
from __future__ import annotations

import math

import numpy as np

from ..c_expressions import integer_literal
from ..common import comment

STORAGE = {
    "bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
    "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
    "int64": "long long", "uint64": "unsigned long long", "float16": "sg_half",
    "bfloat16": "sg_bf16", "float32": "float", "float64": "double",
}
COMPUTE = dict(STORAGE, float16="float", bfloat16="float")
_CONVERT = {"float16": ("sg_h2f", "sg_f2h"), "bfloat16": ("sg_bf2f", "sg_f2bf")}
ACCUMULATOR = dict(COMPUTE, bool="int", int8="int", int16="int", uint8="unsigned int",
                   uint16="unsigned int")


def _name(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in STORAGE:
        raise NotImplementedError(f"the CUDA backend does not support dtype {name}")
    return name


def storage_type(dtype) -> str:
    return STORAGE[_name(dtype)]


def compute_type(dtype) -> str:
    return COMPUTE[_name(dtype)]


def accumulator_type(dtype) -> str:
    return ACCUMULATOR[_name(dtype)]


def load(dtype, element: str) -> str:
    """Expression reading array element ``element`` (e.g. ``in0[s]``) as the compute type."""
    convert = _CONVERT.get(_name(dtype))
    return f"{convert[0]}({element})" if convert else element


def store(dtype, expression: str) -> str:
    """Expression converting a compute-type value to the storage type."""
    convert = _CONVERT.get(_name(dtype))
    return f"{convert[1]}({expression})" if convert else expression


def literal(value, dtype) -> str:
    """A C expression of compute type for ``value`` (a Python or NumPy scalar) as ``dtype``."""
    name = _name(dtype)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return "true" if bool(value) else "false"
    if kind in "iu":
        return integer_literal(int(value), dtype, compute_type(dtype))
    is_double = name == "float64"
    number = float(np.asarray(value, dtype=dtype))   # rounded to the dtype first
    if math.isnan(number):
        return "__longlong_as_double(0x7ff8000000000000LL)" if is_double \
            else "__int_as_float(0x7fc00000)"
    if math.isinf(number):
        text = "__longlong_as_double(0x7ff0000000000000LL)" if is_double \
            else "__int_as_float(0x7f800000)"
        return text if number > 0 else f"(-{text})"
    text = repr(number) if is_double else str(np.float32(number))
    if not any(c in text for c in ".e"):
        text += ".0"
    text = text if is_double else text + "f"
    return text if number >= 0 else f"({text})"


def c_comment(text: str) -> str:
    """``text`` safe for a ``//`` comment: ASCII, one line, never ending in a backslash
    (which would continue the comment onto the next line)."""
    text = comment(text)
    return text + "." if text.endswith("\\") else text
