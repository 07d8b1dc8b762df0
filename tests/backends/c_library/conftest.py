"""Fixtures of the C library export tests: one BLAS thread while comparing (OpenBLAS rounds
differently when it splits a GEMM between threads), and NumPy's bundled OpenBLAS, which the
libraries that are compared with Python link (``blas="numpy"``): the C backend's GEMM, so
that float64 results can be compared exactly even where a system CBLAS is installed."""
import contextlib
import ctypes

import pytest

from symgrad.backends.c_backend import blas as numpy_blas
from symgrad.backends.c_backend.compiler import CCompilerNotFoundError, toolchain
from symgrad.backends.c_backend.library.cblas import find_blas
from symgrad.backends.c_backend.library.errors import LibraryExportError


@contextlib.contextmanager
def one_blas_thread():
    """NumPy's bundled OpenBLAS (which the exported libraries of these tests link too) on one
    thread, then as it was."""
    libraries = []
    for path in numpy_blas._candidates():
        library = ctypes.CDLL(path)
        if hasattr(library, "scipy_openblas_set_num_threads64_"):
            libraries.append((library.scipy_openblas_set_num_threads64_,
                              library.scipy_openblas_get_num_threads64_()))
    for setter, _ in libraries:
        setter(1)
    try:
        yield
    finally:
        for setter, count in libraries:
            setter(count)


@pytest.fixture(scope="session")
def cblas():
    """NumPy's bundled OpenBLAS as an export links it (skips the test without one)."""
    try:
        return find_blas(toolchain().compiler, "numpy")
    except (LibraryExportError, CCompilerNotFoundError) as exc:
        pytest.skip(f"no C compiler or no CBLAS to link an exported library with: {exc}")
