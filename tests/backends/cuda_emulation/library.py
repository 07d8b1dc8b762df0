"""Many ``.cu`` programs compiled by g++ into one shared library of CPU kernels.

``Library(sources)`` translates each distinct source (:mod:`.translate`), compiles them in
``units`` parallel g++ runs with ``cuda_on_cpu.h`` and links one shared object. The object is
cached under ``cache_dir``, named by the hash of everything that goes into it (the shim, the
sources, the flags, the compiler), beside the ``.cu`` files that its messages cite: a second
library of the same sources, in this process or another (pytest-xdist workers share the
folder), loads the cached object. A file lock keeps two processes from building one object
at once.

``library.kernel(source, entry)`` is the launcher of one entry point; :mod:`.device` turns it
into a CuPy-style kernel.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.session_folder import session_folder

from .translate import entry_points, launcher_name, source_key, translate

SHIM = Path(__file__).with_name("cuda_on_cpu.h")
# -O0: these builds are compiled once and run briefly; the shim reports lines by itself, and
# sanitizer reports need line tables only (-g1)
FLAGS = ("-std=c++17", "-O0", "-fPIC", "-w")
SANITIZER_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g1")


DEFAULT_TIME_LIMIT = 60.0   # CPU seconds a launch may run (the shim's default)


class BuildError(RuntimeError):
    """g++ rejected the translated sources (the message has its errors)."""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def run_tool(command):
    """Run a build command (without a preloaded sanitizer runtime, which is for Python)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run(command, capture_output=True, text=True, env=env)


@functools.lru_cache(maxsize=None)
def _compiler_identity(path: str) -> str:
    done = run_tool([path, "--version"])
    return done.stdout.splitlines()[0] if done.stdout else path


def default_cache_dir() -> Path:
    return Path(os.environ.get("SYMGRAD_EMULATION_CACHE")
                or Path(tempfile.gettempdir()) / f"symgrad-cuda-emulation-{os.getuid()}")


def session_cache_dir(tmp_path_factory) -> Path:
    """The folder a pytest session keeps its libraries in: shared by the session's
    pytest-xdist workers, new each session."""
    return session_folder(tmp_path_factory) / "cuda-emulation"


class Library:
    """The kernels of ``sources`` (``.cu`` texts) as one loaded shared library.

    ``sanitize``: build with AddressSanitizer (the process must have libasan preloaded, see
    :mod:`.asan`); ``compile_seconds``: time spent in g++ (0.0 on a cache hit)."""

    def __init__(self, sources, *, sanitize=False, cache_dir=None, units=2, extra_flags=()):
        self.sources = {source_key(s): s for s in sources}
        self.entries = {key: entry_points(s) for key, s in self.sources.items()}
        self.flags = FLAGS + (SANITIZER_FLAGS if sanitize else ()) + tuple(extra_flags)
        cxx = compiler()
        if cxx is None:
            raise BuildError("no C++ compiler (g++) to build the emulated kernels")
        keys = sorted(self.sources)
        digest = hashlib.sha256()
        for part in (SHIM.read_text(), " ".join(self.flags), _compiler_identity(cxx), *keys):
            digest.update(part.encode())
            digest.update(b"\0")
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"kernels-{digest.hexdigest()[:24]}.so"
        self.compile_seconds = 0.0
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.path.exists():
                self._build(cxx, keys, max(1, min(units, len(keys))))
        self._handle = None

    @property
    def handle(self) -> ctypes.CDLL:
        """The loaded library (loaded on first use: a sanitized one loads only in a process
        that has the sanitizer runtime, so building one elsewhere is fine)."""
        if self._handle is None:
            self._handle = ctypes.CDLL(str(self.path))
            self._handle.sg_emu_set_time_limit.argtypes = [ctypes.c_double]
        return self._handle

    def _build(self, cxx, keys, units):
        start = time.perf_counter()
        folder = self.path.parent
        for key in keys:   # the .cu files that compiler and sanitizer messages cite
            cu = folder / f"program-{key}.cu"
            if not cu.exists():
                cu.write_text(self.sources[key])
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            scratch = Path(scratch)
            commands, objects = [], []
            for unit in range(units):
                cpp, obj = scratch / f"unit{unit}.cpp", scratch / f"unit{unit}.o"
                cpp.write_text("".join(translate(self.sources[k], str(folder / f"program-{k}.cu"))
                                       for k in keys[unit::units]))
                commands.append([cxx, *self.flags, "-include", str(SHIM), "-c", str(cpp),
                                 "-o", str(obj)])
                objects.append(str(obj))
            with ThreadPoolExecutor(units) as pool:
                results = list(pool.map(run_tool, commands))
            linked = scratch / "kernels.so"
            if all(r.returncode == 0 for r in results):
                results.append(run_tool([cxx, "-shared", *self.flags, "-o", str(linked), *objects]))
            failed = [r for r in results if r.returncode != 0]
            if failed:
                raise BuildError(failed[0].stderr[-6000:])
            os.replace(linked, self.path)
        self.compile_seconds = time.perf_counter() - start

    def set_time_limit(self, seconds: float) -> None:
        """Stop a launch after ``seconds`` of CPU time (default :data:`DEFAULT_TIME_LIMIT`)
        with an error."""
        self.handle.sg_emu_set_time_limit(float(seconds))

    def kernel(self, source: str, entry: str):
        """``(launcher, parameters)`` of ``entry`` of ``source`` (one of the library's)."""
        key = source_key(source)
        if key not in self.sources:
            raise KeyError("this .cu source is not in the emulation library (build a library "
                           "with every program the test runs)")
        parameters = self.entries[key].get(entry)
        if parameters is None:
            raise KeyError(f'the program has no extern "C" kernel {entry!r}')
        launcher = getattr(self.handle, launcher_name(source, entry))
        launcher.restype = ctypes.c_int
        return launcher, parameters
