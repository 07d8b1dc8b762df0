"""The CBLAS an exported library links, found when it is exported.

In order: the flags given (``blas=``, or the ``SYMGRAD_BLAS_LIBS`` environment variable;
``"numpy"`` names NumPy's bundled OpenBLAS, the one the C backend calls from Python);
pkg-config's ``cblas`` or ``openblas``; ``-lopenblas``, ``-lcblas``; else the OpenBLAS that
NumPy's wheels bundle (:func:`..blas._candidates`), whose GEMM is ``scipy_cblas_sgemm64_``
with 64-bit integers: the library is then built with ``-DSG_CBLAS_SGEMM=...`` naming it (the
shim ``c/library/library.c.j2`` documents; ``-DSG_BLAS_SET_THREADS=...`` names its thread
count's calls, which a convolution sets to 1 while it runs its samples on the library's
threads) and linked to that file by path, with an rpath.
Each candidate is used only when a small program calling ``cblas_sgemm`` through it links.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import shlex
import shutil
import subprocess
import tempfile

from .. import blas as numpy_blas
from .errors import LibraryExportError


@dataclasses.dataclass(frozen=True)
class BlasChoice:
    description: str
    cflags: str
    libs: str


NONE = BlasChoice("no BLAS (the program calls no GEMM)", "", "")
_PROBE = """
#include <stdint.h>
#ifndef SG_CBLAS_SGEMM
#define SG_CBLAS_SGEMM cblas_sgemm
#endif
#ifndef SG_BLAS_INT
#define SG_BLAS_INT int
#endif
void SG_CBLAS_SGEMM(int, int, int, SG_BLAS_INT, SG_BLAS_INT, SG_BLAS_INT, float, const float *,
                    SG_BLAS_INT, const float *, SG_BLAS_INT, float, float *, SG_BLAS_INT);
int main(void)
{
    float a[1] = {2}, b[1] = {3}, c[1] = {0};
    SG_CBLAS_SGEMM(101, 111, 111, 1, 1, 1, 1, a, 1, b, 1, 0, c, 1);
    return c[0] == 6 ? 0 : 1;
}
"""


def links(compiler: str, choice: BlasChoice) -> bool:
    """Whether a program calling the GEMM through ``choice`` builds and runs."""
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w") as handle:
            handle.write(_PROBE)
        binary = os.path.join(folder, "probe")
        try:
            built = subprocess.run([compiler, *shlex.split(choice.cflags), source, "-o", binary,
                                    *shlex.split(choice.libs)], capture_output=True,
                                   timeout=60)
            return built.returncode == 0 and subprocess.run(
                [binary], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def _pkg_config(package: str) -> BlasChoice | None:
    if shutil.which("pkg-config") is None:
        return None
    done = subprocess.run(["pkg-config", "--cflags", "--libs", package], capture_output=True,
                          text=True)
    if done.returncode != 0:
        return None
    cflags = subprocess.run(["pkg-config", "--cflags", package], capture_output=True,
                            text=True).stdout.strip()
    libs = subprocess.run(["pkg-config", "--libs", package], capture_output=True,
                          text=True).stdout.strip()
    return BlasChoice(f"the system's {package} (pkg-config {package})", cflags, libs)


def numpy_openblas() -> BlasChoice | None:
    """The OpenBLAS NumPy's wheel bundles, through the shim macros (None when there is none
    with a known GEMM symbol)."""
    for path in numpy_blas._candidates():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for sgemm, dgemm, ilp64 in numpy_blas.SYMBOLS:
            if hasattr(library, sgemm) and hasattr(library, dgemm):
                cflags = (f"-DSG_CBLAS_SGEMM={sgemm} -DSG_CBLAS_DGEMM={dgemm} "
                          f"-DSG_BLAS_INT={'int64_t' if ilp64 else 'int'}")
                for get, set_ in numpy_blas.THREAD_SYMBOLS:   # its thread count's calls
                    if hasattr(library, get) and hasattr(library, set_):
                        cflags += f" -DSG_BLAS_GET_THREADS={get} -DSG_BLAS_SET_THREADS={set_}"
                        break
                folder = os.path.dirname(path)
                return BlasChoice(f"the OpenBLAS bundled with NumPy ({os.path.basename(path)}, "
                                  f"{'64' if ilp64 else '32'}-bit integers)", cflags,
                                  f"{shlex.quote(path)} -Wl,-rpath,{shlex.quote(folder)}")
    return None


def find_blas(compiler: str, given: str | None = None) -> BlasChoice:
    """The CBLAS to link (see the module docstring); a :class:`LibraryExportError` when none
    links."""
    given = given if given is not None else os.environ.get("SYMGRAD_BLAS_LIBS")
    if given == "numpy":
        choice = numpy_openblas()
        if choice is None or not links(compiler, choice):
            raise LibraryExportError("blas=\"numpy\": this NumPy bundles no OpenBLAS that a "
                                     "C program links")
        return choice
    if given:
        choice = BlasChoice(f"the CBLAS given ({given})", "", given)
        if not links(compiler, choice):
            raise LibraryExportError(f"the BLAS given ({given}) does not link a program calling "
                                     f"cblas_sgemm with {compiler}")
        return choice
    candidates = [_pkg_config("cblas"), _pkg_config("openblas"),
                  BlasChoice("the system's OpenBLAS (-lopenblas)", "", "-lopenblas"),
                  BlasChoice("the system's CBLAS (-lcblas)", "", "-lcblas")]
    for choice in candidates:
        if choice is not None and links(compiler, choice):
            return choice
    choice = numpy_openblas()
    if choice is not None and links(compiler, choice):
        return choice
    raise LibraryExportError(
        "no CBLAS found to link the exported library with: install one (for example "
        "`apt-get install libopenblas-dev`) or pass blas=\"-L/path -lopenblas\"")
