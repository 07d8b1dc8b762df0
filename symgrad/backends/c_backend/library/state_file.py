"""The parameter file of an exported library (``NAME.params``), as ``NAME_state_load`` reads
it: ``SGSTATE1``, a uint32 count, then per parameter a uint32 name length and the name (UTF-8),
a uint32 dtype-name length and the dtype's name, a uint32 rank, the int64 dims, a uint64 byte
count and the C-contiguous bytes; last the uint32 CRC-32 (zlib's) of everything before it.
All little-endian (the machines the export builds on)."""
from __future__ import annotations

import struct
import zlib

import numpy as np

MAGIC = b"SGSTATE1"


def state_bytes(parameters) -> bytes:
    """The file holding ``parameters`` (``[(name, array)]``, in the program's order)."""
    parts = [MAGIC, struct.pack("<I", len(parameters))]
    for name, array in parameters:
        array = np.array(array, order="C", copy=True)   # (ascontiguousarray makes 0-d 1-d)
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        encoded, dtype = name.encode("utf-8"), array.dtype.name.encode("ascii")
        parts += [struct.pack("<I", len(encoded)), encoded, struct.pack("<I", len(dtype)),
                  dtype, struct.pack("<I", array.ndim),
                  struct.pack(f"<{array.ndim}q", *array.shape),
                  struct.pack("<Q", array.nbytes), array.tobytes()]
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body))
