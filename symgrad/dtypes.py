"""dtype handling: canonical NumPy dtypes, NumPy 2 promotion, weak Python scalars.

``bfloat16`` comes from ``ml_dtypes`` (importing this module registers it with NumPy, so
``np.dtype("bfloat16")`` works). NumPy sees it as an extension dtype of kind ``"V"``; symgrad
treats it as a floating dtype everywhere (:func:`is_float`, :func:`kind`). Promotion follows
``ml_dtypes`` (bfloat16 with float32 gives float32; bfloat16 with float16 or int32 has no
common dtype: cast first), except that a weak Python scalar keeps a bfloat16 operand's dtype,
as it keeps float16's.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DTypeError

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
SUPPORTED = tuple(
    np.dtype(name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8",
                 "float16", "float32", "float64")
) + (BFLOAT16,)
DEFAULT_FLOAT = np.dtype("float32")


def as_dtype(dtype) -> np.dtype:
    """Canonical ``np.dtype`` for a name, type or dtype; ``DTypeError`` if unsupported."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"unknown dtype {dtype!r}") from exc
    if dt not in SUPPORTED:
        raise DTypeError(f"unsupported dtype {dt} (supported: {', '.join(map(str, SUPPORTED))})")
    return dt


def kind(dtype) -> str:
    """NumPy's kind character of ``dtype``, with ``"f"`` for bfloat16."""
    dt = np.dtype(dtype)
    kind = dt.kind
    return "f" if kind == "V" and dt == BFLOAT16 else kind


def is_float(dtype) -> bool:
    return kind(dtype) == "f"


def is_integer_or_bool(dtype) -> bool:
    return np.dtype(dtype).kind in "biu"


def significand_bits(dtype) -> int:
    """Bits of precision of a floating dtype, the implicit leading bit included (53 for
    float64, 24 for float32, 11 for float16, 8 for bfloat16)."""
    return int(ml_dtypes.finfo(np.dtype(dtype)).nmant) + 1


def promote(*dtypes_or_scalars) -> np.dtype:
    """NumPy 2 (NEP 50) promotion: Python scalars are weak, so ``float32 * 2.0`` stays float32
    (and ``bfloat16 * 2.0`` stays bfloat16)."""
    strong = [d for d in dtypes_or_scalars if not _is_python_number(d)]
    if strong:
        result = np.result_type(*strong)
        if len(strong) == len(dtypes_or_scalars):   # no weak operand
            return result
        if result == BFLOAT16:
            weak = [d for d in dtypes_or_scalars if _is_python_number(d)]
            if all(np.result_type(np.float16, w) == np.float16 for w in weak):
                return result
    return np.result_type(*dtypes_or_scalars)


def _is_python_number(value) -> bool:
    return isinstance(value, (bool, int, float, complex))


def scalar_dtype(value, other: np.dtype) -> np.dtype:
    """dtype a weak Python scalar takes when combined with a Value of dtype ``other``."""
    return promote(other, value)
