"""dtype handling: canonical NumPy dtypes, NumPy 2 promotion, weak Python scalars."""
from __future__ import annotations

import numpy as np

from .errors import DTypeError

SUPPORTED = tuple(
    np.dtype(name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8",
                 "float16", "float32", "float64")
)
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


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_integer_or_bool(dtype) -> bool:
    return np.dtype(dtype).kind in "biu"


def promote(*dtypes_or_scalars) -> np.dtype:
    """NumPy 2 (NEP 50) promotion: Python scalars are weak, so ``float32 * 2.0`` stays float32."""
    return np.result_type(*dtypes_or_scalars)


def scalar_dtype(value, other: np.dtype) -> np.dtype:
    """dtype a weak Python scalar takes when combined with a Value of dtype ``other``."""
    return promote(other, value)
