"""The BLAS the C library calls: the OpenBLAS that NumPy's wheels bundle.

NumPy 2.x wheels ship ``scipy_openblas`` (ILP64, symbols such as ``scipy_cblas_sgemm64_``) in
``numpy.libs`` beside the package; importing NumPy loads it. The C library links nothing at
build time: ``c/native.h.j2`` finds the GEMM among the shared objects loaded in the process
(``dl_iterate_phdr``, Linux) the first time a native op runs, trying :data:`SYMBOLS` in order.
So the library, and an artifact saved with it, uses whichever NumPy the process imported, and
needs no new dependency. The convolutions run their per-sample GEMMs on symgrad's own thread
pool, with that library's thread count set to 1 meanwhile (:data:`THREAD_SYMBOLS`; restored
after), so that OpenBLAS neither splits those small GEMMs between its threads nor serializes
concurrent calls.

:func:`available` says whether this process has such a BLAS; without one (a NumPy built
against a system BLAS with other symbol names, or a platform without ``dl_iterate_phdr``),
the ops the C backend would compute natively run through NumPy as before.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys

import numpy as np

# (sgemm, dgemm, 64-bit integers), in order of preference
SYMBOLS = (("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", True),
           ("scipy_cblas_sgemm", "scipy_cblas_dgemm", False),
           ("cblas_sgemm64_", "cblas_dgemm64_", True))
# (get, set) of the thread count of the library holding the GEMM, in order of preference: a
# native op running its GEMMs on symgrad's pool makes it 1 meanwhile (see c/native.h.j2)
THREAD_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                  ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                  ("openblas_get_num_threads", "openblas_set_num_threads"))


def _candidates() -> list:
    """The shared libraries NumPy's Linux wheels bundle (``numpy.libs`` beside the package)
    whose name says OpenBLAS."""
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    return sorted(path for path in glob.glob(os.path.join(folder, "*"))
                  if "openblas" in os.path.basename(path).lower())


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the C library will find a GEMM in this process (see the module docstring)."""
    if not sys.platform.startswith("linux"):
        return False
    for path in _candidates():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        if any(hasattr(library, s) and hasattr(library, d) for s, d, _ in SYMBOLS):
            return True
    return False
