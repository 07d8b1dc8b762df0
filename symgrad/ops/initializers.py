"""Initial values of parameters: what ``sg.parameter(name, shape, dtype)`` starts from when no
``init`` is given, and initializers to pass as ``init`` (any ``init(shape, dtype) -> array``).

The default follows Paddle's and PyTorch's practice of never starting a weight matrix at zero
(a zero matrix gives every unit the same gradient): floating parameters of rank 2 or more
start from :func:`glorot_uniform`, everything else (biases, scalars, integer and bool
parameters) from zeros. The default draw is seeded by the parameter's name, so building the
same program twice gives the same initial values, and two parameters of one shape differ.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

from .. import dtypes


def glorot_uniform(seed=0):
    """Glorot (Xavier) uniform: ``init(shape, dtype)`` drawing from U(-a, a) with
    ``a = sqrt(6 / (fan_in + fan_out))``. For a matrix ``[in, out]`` the fans are its two dims;
    for a convolution weight ``[out, in/groups, kh, kw]`` both are multiplied by ``kh * kw``.
    ``seed`` (an int) makes the draw reproducible."""
    def init(shape, dtype):
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"glorot_uniform needs a shape of rank 2 or more, got {list(shape)}")
        receptive = math.prod(shape[2:])
        limit = math.sqrt(6.0 / max((shape[0] + shape[1]) * receptive, 1))
        draw = np.random.default_rng(seed).uniform(-limit, limit, shape)
        return draw.astype(dtypes.as_dtype(dtype))
    return init


def zeros(shape, dtype):
    """All zeros (an ``init`` for biases and optimizer state)."""
    return np.zeros(tuple(shape), dtypes.as_dtype(dtype))


def name_seed(name: str) -> int:
    """The seed of a parameter's default draw: the CRC-32 of its name."""
    return zlib.crc32(name.encode("utf-8"))


def default_init(name: str, shape, dtype) -> np.ndarray:
    """The initial value of parameter ``name`` built without ``init`` (see the module
    docstring)."""
    if dtypes.is_float(dtype) and len(shape) >= 2:
        return glorot_uniform(name_seed(name))(shape, dtype)
    return zeros(shape, dtype)
