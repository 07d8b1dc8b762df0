"""NumPy's array data allocator while a C program runs: the library's caching handler.

Each call of a compiled program allocates the same large arrays (the host's ``np.empty`` for
every entry's result, NumPy's own temporaries); from ``malloc`` each is fresh memory whose pages
fault on their first write (W8: about 1,000 page faults a step, a third of its time on two
threads). Every C library holds a caching allocator (``sg_array_cache`` in
``c/prelude.h.j2``: freed blocks of 64 KiB and more, up to 64 MiB, handed back for an
allocation of the same size), and :class:`~symgrad.backends.c_backend.CExecutable` makes it
NumPy's data allocator for the duration of each call (:func:`swap` before and after), through NumPy's ``PyDataMem_SetHandler`` (NEP 49): the handler is a
context variable, so other threads and the caller's own allocations after the call keep theirs,
and each array frees its memory through the handler that allocated it.

:func:`handler` is None (calls run with NumPy's allocator, as before) where this NumPy has no
handler API (before 1.22) or its C-API table cannot be read, and a program none of whose values
can reach :data:`MIN_BYTES` (:func:`worth_it`) does without it: its calls then do not pay the
two handler swaps (about 1 us).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from ...dtypes import as_dtype
from ...ir.graph import walk_defined

# blocks the cache keeps: at least this many bytes (SG_CACHE_MIN of c/prelude.h.j2)
MIN_BYTES = 1 << 16
# PyDataMem_SetHandler's place in NumPy's C-API table (numpy/__multiarray_api.h; the indices
# of that table never change)
SET_HANDLER = 304


@functools.lru_cache(maxsize=None)
def _set_handler():
    """NumPy's ``PyDataMem_SetHandler`` as a ctypes function, or None."""
    if np.lib.NumpyVersion(np.__version__) < "1.22.0":
        return None
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:   # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    capsule = getattr(umath, "_ARRAY_API", None)
    if capsule is None:
        return None
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = ctypes.cast(pointer(capsule, None), ctypes.POINTER(ctypes.c_void_p))
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[SET_HANDLER])


def worth_it(program) -> bool:
    """Whether some value ``program`` defines takes :data:`MIN_BYTES` or more with its
    symbolic dims counted as 1 (a program of small arrays only allocates nothing the cache
    keeps, unless its run-time dims are large)."""
    for value in walk_defined(program.ops):
        count = 1
        for dim in value.shape:
            count *= dim if isinstance(dim, int) else 1
        if count * as_dtype(value.dtype).itemsize >= MIN_BYTES:
            return True
    return False


def handler(library):
    """The capsule of ``library``'s caching handler (a ``ctypes.PyDLL``), or None."""
    if _set_handler() is None or not hasattr(library, "sg_array_cache"):
        return None
    make = library.sg_array_cache
    make.restype = ctypes.py_object
    make.argtypes = []
    return make()


def swap(capsule):
    """Make ``capsule`` (from :func:`handler`, or the previous handler :func:`swap` returned)
    NumPy's data allocator in this context; returns the one it replaces."""
    return _set_handler()(capsule)
