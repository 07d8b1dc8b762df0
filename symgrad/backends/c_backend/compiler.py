"""The system C compiler: finding it, its flags, and shared libraries cached on disk.

A program's C source becomes ``c_<key>.so`` in the cache directory, ``key`` being a hash of
the source, the compiler and its flags; a second process compiling the same program loads
that file without running the compiler. Flags: ``-O3`` without ``-ffast-math`` (NaN and
infinities keep their IEEE meaning), ``-fno-math-errno`` so math calls vectorize,
``-fno-trapping-math`` so both arms of a ``where`` may be computed and blended (the values
are IEEE's all the same; only the floating-point exception flags, which nothing reads, may
differ), ``-ffp-contract=off`` so products and sums round as NumPy's do, ``-fwrapv`` so
integers wrap as NumPy's do, ``-fopenmp-simd`` (the ``omp simd`` pragmas; threads are the
prelude's own pool, see ``prelude.h.j2``, hence ``-pthread``), ``-march=native`` when it
builds, and glibc's libmvec (``-lmvec``) where it exists, which the prelude's ``simd``
declarations of math functions call into (with ``sin`` and ``cos`` kept apart: merged into
``sincos`` they would not vectorize).

Inside :func:`deferred`, programs are not compiled one by one: their sources are put together
and compiled into one library the first time one of them runs (or when the ``with`` block
ends), in as many parallel compiler runs as there are CPUs. The test suite uses it to compile
hundreds of programs in a few compiler runs.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes.util
import dataclasses
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading

try:
    import fcntl
except ImportError:   # Windows
    fcntl = None

from ...errors import SymgradError
from .. import cache

COMPILERS = ("cc", "gcc", "clang")
BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared", "-pthread", "-fno-math-errno",
              "-fno-trapping-math", "-ffp-contract=off", "-fwrapv", "-fno-strict-aliasing")
# sin and cos of one value would become one sincos call, which has no vector variant and keeps
# the whole loop from vectorizing
NO_SINCOS = ("-fno-builtin-sin", "-fno-builtin-cos", "-fno-builtin-sinf", "-fno-builtin-cosf")
HINT = "install one (for example `apt-get install gcc`) or compile with backend=\"numpy\""


class CCompilerNotFoundError(SymgradError, RuntimeError):
    """backend="c" needs a C compiler and none was found."""


class CCompileError(SymgradError, RuntimeError):
    """The C compiler rejected a generated program (a bug in symgrad: please report it)."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """The compiler command and the flags that work with it; ``identity`` keys the cache
    (compiler, version, flags and the machine ``-march=native`` builds for)."""

    compiler: str
    flags: tuple
    libraries: tuple
    identity: str
    simd: bool
    mvec: bool


def find_compiler() -> str:
    """``$CC``, else the first of :data:`COMPILERS` on the PATH."""
    candidates = [os.environ["CC"]] if os.environ.get("CC") else list(COMPILERS)
    for name in candidates:
        path = shutil.which(name)
        if path is not None:
            return path
    looked = f"$CC ({os.environ['CC']!r})" if os.environ.get("CC") else \
        ", ".join(COMPILERS) + " on the PATH"
    raise CCompilerNotFoundError(f"backend=\"c\" needs a C compiler and found none (looked for "
                                 f"{looked}); {HINT}")


def _glibc_mvec() -> int | None:
    """``SG_MVEC``: glibc's version as 2XX (222 for 2.22) when libmvec is there, else None."""
    if platform.machine() not in ("x86_64", "AMD64") or ctypes.util.find_library("mvec") is None:
        return None
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = (int(part) for part in version.split(".")[:2])
    except (ValueError, OSError, AttributeError):
        return None
    return major * 100 + minor if name == "glibc" and (major, minor) >= (2, 22) else None


_PROBE = """
#include <stdint.h>
double sin(double) __attribute__((simd("notinbranch")));
int probe(int64_t n, double *x) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) x[i] = sin(x[i]);
    return 0;
}
"""


def _builds(compiler, flags, libraries) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write(_PROBE)
        done = subprocess.run([compiler, *flags, source, "-o", os.path.join(folder, "probe.so"),
                               *libraries], capture_output=True, text=True)
        return done.returncode == 0


def _probe(compiler) -> dict:
    """Which optional flags build with ``compiler`` (cached on disk per compiler binary and
    set of base flags)."""
    stat = os.stat(compiler)
    tag = hashlib.sha256(f"{os.path.realpath(compiler)}:{stat.st_mtime_ns}:{stat.st_size}:"
                         f"{platform.machine()}:{_glibc_mvec()}:{BASE_FLAGS}:{NO_SINCOS}"
                         .encode()).hexdigest()[:24]
    path = os.path.join(cache.cache_dir(), f"c_toolchain_{tag}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        pass
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    mvec = _glibc_mvec()
    base = list(BASE_FLAGS)
    simd = _builds(compiler, base + ["-fopenmp-simd"], [])
    if simd:
        base.append("-fopenmp-simd")
    native = _builds(compiler, base + ["-march=native"], [])
    if native:
        base.append("-march=native")
    libraries = ["-lm"]
    if mvec is not None and _builds(compiler, base + [f"-DSG_MVEC={mvec}"], ["-lmvec", "-lm"]):
        base += [f"-DSG_MVEC={mvec}", *NO_SINCOS]
        libraries = ["-lmvec", "-lm"]
    else:
        mvec = None
    found = {"version": version.splitlines()[0] if version else "", "flags": base,
             "libraries": libraries, "simd": simd, "mvec": mvec is not None,
             "cpu": _cpu_model() if native else ""}
    cache.write_atomic(path, json.dumps(found))
    return found


def cpu_features() -> list | None:
    """This CPU's instruction-set features, sorted, as ``/proc/cpuinfo`` lists them (``flags``
    on x86, ``Features`` on ARM); None where it does not say. A library built with
    ``-march=native`` runs on a CPU that has all of them (the standalone runner checks this
    with its own copy of the reader: it cannot import symgrad)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return sorted(set(value.split()))
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    """What ``-march=native`` builds for (a library built for one CPU may not run on another)."""
    features = cpu_features()
    if features is None:
        return platform.processor() or platform.machine()
    return hashlib.sha256(" ".join(features).encode()).hexdigest()[:16] + platform.machine()


@functools.lru_cache(maxsize=None)
def _toolchain(compiler) -> Toolchain:
    found = _probe(compiler)
    identity = json.dumps([compiler, found["version"], found["flags"], found["libraries"],
                           found["cpu"]])
    return Toolchain(compiler, tuple(found["flags"]), tuple(found["libraries"]), identity,
                     found["simd"], found["mvec"])


def toolchain() -> Toolchain:
    """The compiler and flags to use (:class:`CCompilerNotFoundError` when there is none)."""
    return _toolchain(find_compiler())


# --- libraries ----------------------------------------------------------------------------------
def library_key(source: str, tools: Toolchain) -> str:
    return cache.cache_key("c-library", source, tools.identity)


def _library_path(key, options) -> str:
    return os.path.join(cache.cache_dir(options), f"c_{key[:cache.HASH_CHARS]}.so")


def cached_library(key, options) -> str | None:
    """The cached library holding the source of ``key``: its own, or the batch library a
    :func:`deferred` compile put it in (named in ``c_<key>.link``)."""
    path = _library_path(key, options)
    if os.path.exists(path):
        return path
    try:
        with open(path[:-3] + ".link", encoding="utf-8") as handle:
            target = os.path.join(os.path.dirname(path), os.path.basename(handle.read().strip()))
    except OSError:
        return None
    return target if os.path.exists(target) else None


@contextlib.contextmanager
def _exclusive(path: str):
    """Hold an exclusive lock on the file ``path`` (created if missing) across processes;
    a no-op where ``fcntl`` is missing (Windows)."""
    if fcntl is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile(sources: list, tools: Toolchain, target: str) -> None:
    """Compile the concatenated ``sources`` into the shared library ``target`` (atomically).
    Processes compiling the same target take turns: one compiles, the others find it done."""
    with _exclusive(target[:-3] + ".lock"):
        if not os.path.exists(target):
            _compile_now(sources, tools, target)


def _compile_now(sources: list, tools: Toolchain, target: str) -> None:
    directory = os.path.dirname(target)
    stem = os.path.basename(target)[:-3]
    source_path = os.path.join(directory, stem + ".c")
    cache.write_atomic(source_path, "\n".join(sources))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".so")
    os.close(handle)
    try:
        done = subprocess.run([tools.compiler, *tools.flags, source_path, "-o", temporary,
                               *tools.libraries], capture_output=True, text=True)
        if done.returncode != 0:
            raise CCompileError(f"{tools.compiler} failed on {source_path}:\n{done.stderr}")
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def compile_library(source: str, key: str, tools: Toolchain, options) -> str:
    """The path of the shared library of ``source`` (``key`` from :func:`library_key`),
    compiled now unless cached."""
    path = cached_library(key, options)
    if path is None:
        path = _library_path(key, options)
        _compile([source], tools, path)
    return path


# --- deferred, batched compiles ---------------------------------------------------------------
class _Batch:
    """Sources waiting to be compiled together, and the executables waiting for them."""

    def __init__(self):
        self.pending: list = []     # (key, source, tools, options)
        self.lock = threading.Lock()

    def add(self, key, source, tools, options) -> None:
        with self.lock:
            if all(key != k for k, *_ in self.pending):
                self.pending.append((key, source, tools, options))

    def compile(self) -> None:
        """Compile every pending source: the sources are split into one part per CPU, each
        part one library (compiled in parallel), and each source's key gets a link to its
        part's library."""
        with self.lock:
            pending, self.pending = self.pending, []
        pending = [p for p in pending if cached_library(p[0], p[3]) is None]
        if not pending:
            return
        parts = max(1, min(len(pending), os.cpu_count() or 1))
        chunks = [pending[k::parts] for k in range(parts)]

        def build(chunk):
            key = cache.cache_key("c-batch", *[k for k, *_ in chunk])
            target = _library_path(key, chunk[0][3])
            _compile([source for _, source, _, _ in chunk], chunk[0][2], target)
            for k, _, _, options in chunk:
                cache.write_atomic(_library_path(k, options)[:-3] + ".link",
                                   os.path.basename(target))

        with concurrent.futures.ThreadPoolExecutor(parts) as pool:
            list(pool.map(build, chunks))


_batch: _Batch | None = None


@contextlib.contextmanager
def deferred():
    """Compile the C programs built inside the ``with`` block together (see the module
    docstring); they are compiled when one of them first runs, or when the block ends."""
    global _batch
    outer = _batch
    if outer is None:
        _batch = _Batch()
    try:
        yield
    finally:
        if outer is None:
            batch, _batch = _batch, None
            batch.compile()


def library(source: str, tools: Toolchain, options):
    """``(path, None)`` of the library of ``source``, compiling it now; inside
    :func:`deferred`, ``(None, resolve)`` where ``resolve()`` compiles what is pending and
    returns the path."""
    key = library_key(source, tools)
    if _batch is None:
        return compile_library(source, key, tools, options), None
    path = cached_library(key, options)
    if path is not None:
        return path, None
    batch = _batch
    batch.add(key, source, tools, options)

    def resolve():
        found = cached_library(key, options)
        if found is None:
            batch.compile()
            found = cached_library(key, options)
        if found is None:   # left out of a batch by an error: compile it alone
            found = compile_library(source, key, tools, options)
        return found
    return None, resolve
