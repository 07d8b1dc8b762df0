"""An independent reference of symgrad's random numbers, element by element with Python
ints and ``math``, written from the layout that :mod:`symgrad.ops.random` documents (key =
seed; counter = (block, stream, step, counter); Box-Muller with ``math.log``/``cos``/``sin``).
"""
import math

import ml_dtypes
import numpy as np

M32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Philox-4x32-10 (Salmon et al. 2011) of four 32-bit counter words under two key
    words: the four output words."""
    x = list(counter)
    k = list(key)
    for round_number in range(10):
        if round_number:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        hi0, lo0 = divmod(0xD2511F53 * x[0], 1 << 32)
        hi1, lo1 = divmod(0xCD9E8D57 * x[2], 1 << 32)
        x = [hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0]
    return x


def _words(block, seed, stream, step, counter):
    return philox4x32_10([block & M32, stream & M32, step & M32, counter & M32],
                         [seed & M32, (seed >> 32) & M32])


def _bits(dtype):
    return int(ml_dtypes.finfo(np.dtype(dtype)).nmant) + 1


def _finish(values, shape, dtype):
    array = np.array(values, dtype=np.float64).reshape(shape)
    if np.dtype(dtype).itemsize < 4:
        array = array.astype(np.float32)
    return array.astype(dtype)


def uniform(shape, dtype="float32", seed=0, stream=0, step=0, counter=0, low=0.0, high=1.0):
    bits = _bits(dtype)
    values = []
    for i in range(int(np.prod(shape))):
        if bits > 32:
            w = _words(i // 2, seed, stream, step, counter)
            word = (w[2 * (i % 2) + 1] << 32) | w[2 * (i % 2)]
            u = (word >> (64 - bits)) / 2.0 ** bits
        else:
            u = (_words(i // 4, seed, stream, step, counter)[i % 4] >> (32 - bits)) / 2.0 ** bits
        values.append(low + (high - low) * u)
    return _finish(values, shape, dtype)


def normal(shape, dtype="float32", seed=0, stream=0, step=0, counter=0, mean=0.0, std=1.0):
    wide = _bits(dtype) > 32
    values = []
    for i in range(int(np.prod(shape))):
        if wide:
            w = _words(i // 2, seed, stream, step, counter)
            u1 = ((((w[1] << 32) | w[0]) >> 11) + 1) / 2.0 ** 53
            u2 = (((w[3] << 32) | w[2]) >> 11) / 2.0 ** 53
        else:
            w = _words(i // 4, seed, stream, step, counter)
            j = 2 * ((i // 2) % 2)
            u1, u2 = (w[j] + 1) / 2.0 ** 32, w[j + 1] / 2.0 ** 32
        angle = 2 * math.pi * u2
        z = math.sqrt(-2 * math.log(u1)) * (math.sin(angle) if i % 2 else math.cos(angle))
        values.append(mean + std * z)
    return _finish(values, shape, dtype)
