"""The system C compiler: finding it, its flags, and shared libraries cached on disk.

A program's C source becomes ``c_<key>.so`` in the cache directory, ``key`` being a hash of
the source, the compiler, its flags and what the library needs of the machine; a second
process compiling the same program loads that file without running the compiler. A program
of several translation units (:mod:`.units`) is built from one object file per unit,
``c_unit_<key>.o`` keyed by the unit's text and flags (glue units compile at
:data:`GLUE_LEVEL`): the units missing from the cache are compiled in parallel (as many
compiler processes as this process may use CPUs, at most ``options.threads``), then all are
linked; a program sharing units with one built before compiles only the others. Beside each
binary (library or object file) is the record written when it was built (its sha256 and what it needs of the machine:
:func:`~symgrad.backends.cache.seal_binary`), checked before it is used; a library
that fails the check is built again, and one the dynamic loader refuses leaves the cache
(:func:`load`). Which optional flags build is probed once and recorded per compiler binary
and CPU (:func:`_probe`).

Flags: ``-O3`` without ``-ffast-math`` (NaN and infinities keep their IEEE meaning),
``-fno-math-errno`` so math calls vectorize, ``-fno-trapping-math`` so both arms of a
``where`` may be computed and blended (the values are IEEE's all the same; only the
floating-point exception flags, which nothing reads, may differ), ``-ffp-contract=off`` so
products and sums round as NumPy's do, ``-fwrapv`` so integers wrap as NumPy's do,
``-Werror=implicit-function-declaration`` so a call of an undeclared function fails to
compile, ``-fopenmp-simd`` (the ``omp simd`` pragmas; threads are the prelude's own pool, see
``prelude.h.j2``, hence ``-pthread``), ``-march=native`` when it builds, and glibc's libmvec
(``-lmvec``) where it exists, which the prelude's ``simd`` declarations of math functions call
into (with ``sin`` and ``cos`` kept apart: merged into ``sincos`` they would not vectorize).
The prelude's runtime (the thread pool, the array cache, the buffer calls) asks GCC for
``-O1`` by a pragma: it has no loop worth more, and compiles in 0.07 s instead of 0.10, most
of a small program's compile.

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
import re
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
              "-fno-trapping-math", "-ffp-contract=off", "-fwrapv", "-fno-strict-aliasing",
              "-Werror=implicit-function-declaration")
# sin and cos of one value would become one sincos call, which has no vector variant and keeps
# the whole loop from vectorizing
NO_SINCOS = ("-fno-builtin-sin", "-fno-builtin-cos", "-fno-builtin-sinf", "-fno-builtin-cosf")
# the optimization level of glue units (a segment's steps, the entry points: calls,
# allocations and checks, no loops worth optimizing), which compile about 3x faster than at
# -O3 (see .units)
GLUE_LEVEL = "-O0"
HINT = "install one (for example `apt-get install gcc`) or compile with backend=\"numpy\""


class CCompilerNotFoundError(SymgradError, RuntimeError):
    """backend="c" needs a C compiler and none was found."""


class CCompileError(SymgradError, RuntimeError):
    """The C compiler rejected a generated program: a custom op's ``c=`` expression, or a bug
    in symgrad (the message quotes the lines it rejected, each naming its op)."""


class CLoadError(SymgradError, RuntimeError):
    """The dynamic loader refused a program's library, typically because a custom op's ``c=``
    expression calls a function that nothing defines (the message names it and its op)."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """The compiler command and the flags that work with it; ``identity`` keys the cache
    (compiler, version, flags and what a library needs of the machine). ``cpu``: this
    machine's features (:func:`this_cpu`); ``needs``: those a library built with these flags
    needs (all of ``cpu`` with ``-march=native``, else the machine type)."""

    compiler: str
    flags: tuple
    libraries: tuple
    identity: str
    simd: bool
    mvec: bool
    cpu: tuple
    needs: tuple


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


# --- the machine --------------------------------------------------------------------------------
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


def _native_macros(compiler) -> list:
    """The macros ``compiler`` predefines for ``-march=native`` (``__AVX2__``...), where
    ``/proc/cpuinfo`` is missing: the instruction sets it builds for on this CPU."""
    try:
        done = subprocess.run([compiler, "-march=native", "-dM", "-E", "-x", "c", "-"],
                              input="", capture_output=True, text=True)
    except OSError:
        return []
    if done.returncode != 0:
        return []
    return sorted({f"cc:{line.split()[1]}" for line in done.stdout.splitlines()
                   if line.startswith("#define ") and len(line.split()) > 1})


@functools.lru_cache(maxsize=None)
def this_cpu(compiler) -> tuple:
    """What a library built here may need of the machine that loads it: its type
    (``machine:x86_64``) and its CPU's features (``/proc/cpuinfo``'s, else the instruction-set
    macros ``compiler`` predefines for ``-march=native``)."""
    features = cpu_features()
    if features is None:
        features = _native_macros(compiler)
    return (f"machine:{platform.machine()}", *features)


# --- the toolchain: which optional flags build, recorded per compiler and CPU -------------------
_PROBE = """
#include <stdint.h>
double sin(double) __attribute__((simd("notinbranch")));
int probe(int64_t n, double *x) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) x[i] = sin(x[i]);
    return 0;
}
"""
# the toolchain record: what the probe found (the flags are made from it, never read)
_RECORD = {"version": str, "simd": bool, "native": bool, "mvec": (int, type(None)),
           "cpu": list}


def _flags(simd: bool, native: bool, mvec: int | None) -> tuple[list, list]:
    """The compiler flags and libraries with these optional features."""
    flags = list(BASE_FLAGS) + ["-fopenmp-simd"] * simd + ["-march=native"] * native
    if mvec is None:
        return flags, ["-lm"]
    return flags + [f"-DSG_MVEC={mvec}", *NO_SINCOS], ["-lmvec", "-lm"]


def _builds(compiler, flags, libraries) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write(_PROBE)
        done = subprocess.run([compiler, *flags, source, "-o", os.path.join(folder, "probe.so"),
                               *libraries], capture_output=True, text=True)
        return done.returncode == 0


def _sound_record(found, cpu, mvec) -> bool:
    """Whether ``found`` is a toolchain record as :func:`_probe` writes it, for this CPU."""
    return isinstance(found, dict) and set(found) == set(_RECORD) and \
        all(isinstance(found[name], kind) for name, kind in _RECORD.items()) and \
        found["mvec"] in (None, mvec) and found["cpu"] == list(cpu)


def _probe(compiler) -> dict:
    """Which optional flags build with ``compiler`` on this CPU, recorded in the cache per
    compiler binary, set of base flags and CPU (:func:`this_cpu`: a cache shared by machines
    with different CPUs keeps one record for each). A record of another form is reported
    once and probed again."""
    stat = os.stat(compiler)
    cpu, mvec = this_cpu(compiler), _glibc_mvec()
    tag = hashlib.sha256(f"{os.path.realpath(compiler)}:{stat.st_mtime_ns}:{stat.st_size}:"
                         f"{mvec}:{BASE_FLAGS}:{NO_SINCOS}:{cpu}".encode()).hexdigest()[:24]
    path = os.path.join(cache.cache_dir(), f"c_toolchain_{tag}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except FileNotFoundError:
        found = None
    except (OSError, ValueError):   # not JSON
        found = "unreadable"
    if found is not None:
        if _sound_record(found, cpu, mvec):
            return found
        cache.warn_once(f"the C toolchain record {path}", "is not a record symgrad writes")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    simd = _builds(compiler, *_flags(True, False, None))
    native = _builds(compiler, *_flags(simd, True, None))
    if mvec is not None and not _builds(compiler, *_flags(simd, native, mvec)):
        mvec = None
    found = {"version": version.splitlines()[0] if version else "", "simd": simd,
             "native": native, "mvec": mvec, "cpu": list(cpu)}
    cache.write_atomic(path, json.dumps(found))
    return found


@functools.lru_cache(maxsize=None)
def _toolchain(compiler) -> Toolchain:
    found = _probe(compiler)
    flags, libraries = _flags(found["simd"], found["native"], found["mvec"])
    cpu = tuple(found["cpu"])
    needs = cpu if found["native"] else cpu[:1]
    identity = json.dumps([compiler, found["version"], flags, libraries, needs])
    return Toolchain(compiler, tuple(flags), tuple(libraries), identity, found["simd"],
                     found["mvec"] is not None, cpu, needs)


def toolchain() -> Toolchain:
    """The compiler and flags to use (:class:`CCompilerNotFoundError` when there is none)."""
    return _toolchain(find_compiler())


# --- libraries ----------------------------------------------------------------------------------
def library_key(source: str, tools: Toolchain) -> str:
    return cache.cache_key("c-library", source, tools.identity)


def _library_path(key, options) -> str:
    return os.path.join(cache.cache_dir(options), f"c_{key[:cache.HASH_CHARS]}.so")


def cached_library(key, tools, options) -> str | None:
    """The cached library holding the source of ``key``: its own, or else the batch library a
    :func:`deferred` compile put it in (named in ``c_<key>.link``); only one that passes
    :func:`~symgrad.backends.cache.check_binary` (None when its own is there but does not:
    that one is built again)."""
    path = _library_path(key, options)
    if os.path.exists(path):
        return path if cache.check_binary(path, tools.cpu) else None
    try:
        with open(path[:-3] + ".link", encoding="utf-8") as handle:
            target = os.path.join(os.path.dirname(path), os.path.basename(handle.read().strip()))
    except OSError:
        return None
    return target if cache.check_binary(target, tools.cpu) else None


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
    """Compile the concatenated ``sources`` into the shared library ``target`` (atomically,
    with its record: :func:`~symgrad.backends.cache.seal_binary`), unless a sound one is
    there. Processes compiling the same target take turns: one compiles, the others find it
    done."""
    with _exclusive(target[:-3] + ".lock"):
        if not cache.check_binary(target, tools.cpu):
            _compile_now(sources, tools, target)


def _rejected_lines(stderr: str, source_path: str) -> list:
    """The lines of the C file at ``source_path`` that the compiler's ``stderr`` reports
    errors on, as ``line N: text`` (generated lines end in a comment naming their op)."""
    with open(source_path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    numbers = re.findall(rf"^{re.escape(source_path)}:(\d+):\d+: (?:fatal )?error:", stderr,
                         re.MULTILINE)
    return [f"line {n}: {lines[int(n) - 1].strip()}"
            for n in dict.fromkeys(numbers) if 0 < int(n) <= len(lines)]


def _compile_now(sources: list, tools: Toolchain, target: str) -> None:
    stem = target[:-3]
    source_path = stem + ".c"
    cache.write_atomic(source_path, "\n".join(sources))
    _run(tools, [*tools.flags, source_path, *tools.libraries], target, source_path,
         "the C program")


def _run(tools: Toolchain, arguments: list, target: str, source_path, what: str) -> None:
    """Run the compiler with ``arguments``, writing ``target`` (through a temporary file, then
    sealed: :func:`~symgrad.backends.cache.seal_binary`); ``what`` it builds (from the C file
    ``source_path``, or None) names it in the :class:`CCompileError` of a failure, with the
    lines the compiler rejected (each naming its op) and what it said."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-",
                                         suffix=os.path.splitext(target)[1])
    os.close(handle)
    try:
        done = subprocess.run([tools.compiler, *arguments, "-o", temporary],
                              capture_output=True, text=True)
        if done.returncode != 0:
            rejected = "".join(f"\n  {line}" for line in _rejected_lines(done.stderr,
                                                                         source_path)) \
                if source_path is not None else ""
            where = f" {source_path}" if source_path is not None else ""
            raise CCompileError(
                f"{tools.compiler} rejected {what}{where}"
                f"{' at:' + rejected if rejected else ''}\nA line computing a custom op comes "
                f"from its c= expression: fix the expression, or leave c= out to run the op "
                f"through NumPy; anything else is a bug in symgrad (please report it). The "
                f"compiler said:\n{done.stderr}")
        cache.seal_binary(temporary, target, tools.needs)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _jobs(options) -> int:
    """How many compiler processes run at once: the CPUs this process may use, at most
    ``options.threads`` when it is set (a program asked to run on one thread compiles on
    one)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    threads = getattr(options, "threads", None)
    return max(1, min(usable, threads) if threads else usable)


def unit_flags(unit, tools: Toolchain) -> list:
    """The flags compiling translation ``unit`` (:class:`.units.Unit`) into an object file:
    the toolchain's, at :data:`GLUE_LEVEL` for glue."""
    flags = [flag for flag in tools.flags if flag != "-shared"]
    return [GLUE_LEVEL if unit.glue and flag == "-O3" else flag for flag in flags]


def _object_path(unit, tools: Toolchain, options) -> str:
    key = cache.cache_key("c-unit", unit.text, tools.identity, *unit_flags(unit, tools))
    return os.path.join(cache.cache_dir(options), f"c_unit_{key[:cache.HASH_CHARS]}.o")


def _compile_unit(unit, number: int, count: int, tools: Toolchain, target: str) -> None:
    """Compile translation unit ``number`` (of ``count``) into the object file ``target``
    (atomically, with its record), unless a sound one is there."""
    with _exclusive(target[:-2] + ".lock"):
        if cache.check_binary(target, tools.cpu):
            return
        source_path = target[:-2] + ".c"
        cache.write_atomic(source_path, unit.text)
        _run(tools, [*unit_flags(unit, tools), "-c", source_path], target, source_path,
             f"unit {number + 1} of {count} ({unit.holds}) of a C program")


def _link_units(units: list, tools: Toolchain, target: str, options) -> None:
    """Build the shared library ``target`` from ``units``: each unit's object file, compiled
    now unless cached (in parallel, :func:`_jobs` at a time), then linked."""
    objects = [_object_path(unit, tools, options) for unit in units]
    missing = [k for k, path in enumerate(objects) if not cache.check_binary(path, tools.cpu)]
    if missing:
        with concurrent.futures.ThreadPoolExecutor(min(len(missing), _jobs(options))) as pool:
            done = [pool.submit(_compile_unit, units[k], k, len(units), tools, objects[k])
                    for k in missing]
            for future in done:    # the first error, in unit order
                future.result()
    _run(tools, ["-shared", "-pthread", *objects, *tools.libraries], target, None,
         "the C program's units (linking)")


def _build(source: str, units: list, tools: Toolchain, target: str, options) -> None:
    """Build the library ``target`` of a program (``source``, its ``units``), unless a sound
    one is there: one unit is compiled as one file, several are compiled apart and linked."""
    if len(units) == 1:
        _compile([source], tools, target)
        return
    with _exclusive(target[:-3] + ".lock"):
        if not cache.check_binary(target, tools.cpu):
            _link_units(units, tools, target, options)


def compile_library(source: str, units: list, key: str, tools: Toolchain, options) -> str:
    """The path of the shared library of ``source`` (its ``units``; ``key`` from
    :func:`library_key`), built now unless cached."""
    path = cached_library(key, tools, options)
    if path is None:
        path = _library_path(key, options)
        _build(source, units, tools, path, options)
    return path


def load(bind, path: str, source: str, units: list, tools: Toolchain, options) -> str:
    """``bind(path)`` (which loads the library at ``path``, of ``source`` and its ``units``,
    with ctypes) and return the path bound. When the dynamic loader refuses a batch library
    that a :func:`deferred` compile shared between programs, it is removed from the cache and
    the program built alone; when it refuses the program's own library, that is removed
    too (nothing broken stays in the cache) and :class:`CLoadError` names what the loader
    said and the lines of ``source`` using the symbol it missed, each naming its op."""
    own = _library_path(library_key(source, tools), options)
    while True:
        try:
            bind(path)
            return path
        except OSError as error:
            cache.discard_binary(path)
            if path == own:
                raise _load_error(error, source, path) from None
        _build(source, units, tools, own, options)
        path = own


def _load_error(error: OSError, source: str, path: str) -> CLoadError:
    symbols = re.findall(r"undefined symbol: (\w+)", str(error))
    using = [line.strip() for line in source.splitlines()
             if symbols and re.search(rf"\b{re.escape(symbols[0])}\b", line)]
    shown = "".join(f"\n  {line}" for line in using[:5])
    return CLoadError(
        f"the C library of this program does not load ({error}); it was removed from the "
        f"cache ({path}). "
        + (f"These lines use {symbols[0]!r}:{shown}\nA custom op's c= expression may call "
           f"only functions that C's math library or the program defines. "
           if using else "")
        + "Compile with backend=\"numpy\" to run the program without it.")


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
        part's library. A part the compiler rejects gets no links: each of its programs is
        compiled alone when it runs, so an error is raised by the program it belongs to."""
        with self.lock:
            pending, self.pending = self.pending, []
        pending = [p for p in pending if cached_library(p[0], p[2], p[3]) is None]
        if not pending:
            return
        parts = max(1, min(len(pending), os.cpu_count() or 1))
        chunks = [pending[k::parts] for k in range(parts)]

        def build(chunk):
            key = cache.cache_key("c-batch", *[k for k, *_ in chunk])
            target = _library_path(key, chunk[0][3])
            try:
                _compile([source for _, source, _, _ in chunk], chunk[0][2], target)
            except CCompileError:
                return
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


def library(source: str, units: list, tools: Toolchain, options):
    """``(path, None)`` of the library of ``source`` (the program's C; ``units``: its
    translation units, :mod:`.units`), building it now; inside :func:`deferred`,
    ``(None, resolve)`` where ``resolve()`` builds what is pending and returns the path (a
    program of one unit is compiled with the batch, one of several on its own)."""
    key = library_key(source, tools)
    if _batch is None:
        return compile_library(source, units, key, tools, options), None
    path = cached_library(key, tools, options)
    if path is not None:
        return path, None
    batch = _batch
    if len(units) == 1:
        batch.add(key, source, tools, options)

    def resolve():
        found = cached_library(key, tools, options)
        if found is None and len(units) == 1:
            batch.compile()
            found = cached_library(key, tools, options)
        if found is None:   # left out of a batch by an error, or several units
            found = compile_library(source, units, key, tools, options)
        return found
    return None, resolve
