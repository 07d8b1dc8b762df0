"""The fixed runtime of generated NumPy modules: chunked loops over many rows, on threads.

Imports only the standard library. A generated module that has a chunked loop imports it
relatively, ``from .row_pool import RowPool``: symgrad loads generated modules as members of
``symgrad.backends.host``, and an AOT artifact ships this file beside its module
(``numpy/row_pool.py``, listed and hashed in the manifest), which the artifact's standalone
runner loads the same way. Every module that imports one copy of this file shares one pool of
worker threads, made on first use; its threads start only as loops need them. A forked child
has none of its parent's threads: it forgets the parent's pool (and the lock guarding it, which
another thread may have held at the fork) and makes its own on first use.

While a loop runs on several threads, the BLAS runs single-threaded (:class:`BlasThreads`):
the loop's threads already fill the CPUs, and a GEMM in a range (a convolution's) would
otherwise split between the BLAS's own threads, which then also spin for a while after each
call, taking the CPUs from the loop's other ranges.

The first ``RowPool`` of a process also tunes glibc's ``malloc`` (:func:`keep_freed_memory`)
so that the arrays of a few MB that a module allocates and frees at every call reuse pages
the process already has, instead of faulting in fresh ones each time.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import threading

MAX_WORKERS = 32       # threads the shared pool may hold (a loop uses RowPool.threads - 1)
MAX_DEFAULT_THREADS = 8

_executor = None
_executor_lock = threading.Lock()


def _forget_pool_after_fork() -> None:
    """In a forked child: the parent's pool has no threads here (a task given to it would
    wait forever), and its lock may be held by a thread that is not here."""
    global _executor, _executor_lock
    _executor, _executor_lock = None, threading.Lock()
    BLAS_THREADS.forget_after_fork()


# (get, set) of an OpenBLAS's thread count, in order of preference: NumPy's wheels bundle
# scipy_openblas (64-bit integers, then 32-bit ones); a system OpenBLAS has the plain names
OPENBLAS_THREAD_CALLS = (
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads", "openblas_set_num_threads"))


def loaded_openblas():
    """``(get, set)``: the thread-count calls of an OpenBLAS that this process has loaded
    (NumPy's, found among the shared objects in ``/proc/self/maps``), or None (not Linux, or
    no OpenBLAS: another BLAS keeps its own threads)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split(None, 5)[5].strip() for line in maps
                            if line.count(" ") >= 5 and "openblas" in line.lower()})
    except OSError:
        return None
    for path in paths:
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in OPENBLAS_THREAD_CALLS:
            if hasattr(library, get) and hasattr(library, set_):
                getter, setter = getattr(library, get), getattr(library, set_)
                getter.restype, getter.argtypes = ctypes.c_int, []
                setter.restype, setter.argtypes = None, [ctypes.c_int]
                return getter, setter
    return None


class BlasThreads:
    """``with BLAS_THREADS.single():`` runs its block with the BLAS single-threaded (an
    OpenBLAS that :func:`loaded_openblas` finds; nothing to do for another BLAS), restoring
    the thread count when the last of the blocks running at once (on any thread) ends."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls = None       # loaded_openblas(), looked up on first use
        self._looked_up = False
        self._depth = 0          # blocks running now
        self._before = 0         # the thread count to restore (0: nothing to restore)

    def forget_after_fork(self) -> None:
        """In a forked child: no block of the parent runs here. If one ran at the fork, the
        BLAS stays single-threaded until the child's first block ends (it restores the
        parent's count); the child calls nothing in the BLAS here."""
        self._lock, self._depth = threading.Lock(), 0

    @contextlib.contextmanager
    def single(self):
        self._enter()
        try:
            yield
        finally:
            self._exit()

    def _enter(self) -> None:
        with self._lock:
            if not self._looked_up:
                self._calls, self._looked_up = loaded_openblas(), True
            if self._depth == 0 and self._calls is not None:
                get, set_ = self._calls
                count = get()
                if count > 1:
                    set_(1)
                    self._before = count
            self._depth += 1

    def _exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._before > 1:
                self._calls[1](self._before)
                self._before = 0


BLAS_THREADS = BlasThreads()


if hasattr(os, "register_at_fork"):   # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


# What keep_freed_memory sets glibc's malloc to, as (mallopt parameter, the environment variable
# glibc reads at startup for it, value): arrays under 32 MiB come from the heap, never from mmap
# (glibc's own dynamic threshold stops there on 64-bit systems), and a heap keeps up to 64 MiB
# of freed memory (twice that, as glibc's dynamic rule does)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_SETTINGS = ((M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 32 << 20),
                 (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 64 << 20))
# set by the user (environment variables read by glibc at startup): then keep_freed_memory
# changes nothing
MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_kept = []   # [whether keep_freed_memory changed the settings], once it ran


def heap_settings(environ) -> tuple:
    """What :func:`keep_freed_memory` sets under the environment ``environ`` (entries of
    :data:`HEAP_SETTINGS`): nothing where the user tuned glibc's malloc
    (:data:`MALLOC_VARIABLES` or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES``)."""
    if any(name in environ for name in MALLOC_VARIABLES) or \
            "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return ()
    return HEAP_SETTINGS


def heap_environment(environ) -> dict:
    """The environment variables (``{name: value}``) that start a child of a process with
    environment ``environ`` on what :func:`keep_freed_memory` sets there: those of
    :func:`heap_settings`."""
    return {name: str(value) for _, name, value in heap_settings(environ)}


def keep_freed_memory() -> bool:
    """Once per process: set glibc's ``malloc`` to :data:`HEAP_SETTINGS` (see
    :func:`heap_settings`); True if it did. By default glibc serves an array over 128 KiB by
    ``mmap``, raising that threshold as such arrays are freed, and gives the top of a heap
    back to the OS once more than twice the threshold is free there, which a step freeing
    several arrays of a few MB does every time (a worker thread's arena at every loop). Each
    call of a generated module then faults in its arrays' pages anew: W8's step (a CNN's
    Adam step, arrays of 0.5 to 2.4 MB) took about 1,500 page faults (6 MB) a call, 9% of its
    time on 2 threads and 17% on 1. With these settings it takes none; a process keeps up to
    64 MiB of freed memory per arena for reuse. Nothing on a C library other than glibc."""
    if _kept:
        return _kept[0]
    settings = heap_settings(os.environ)
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt if hasattr(libc, "gnu_get_libc_version") else None
    except (OSError, TypeError):   # no C library to load this way (Windows)
        mallopt = None
    if mallopt is not None and settings:
        mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
        for parameter, _, value in settings:
            mallopt(parameter, value)
    _kept.append(mallopt is not None and bool(settings))
    return _kept[0]


def shared_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads shared by every module using this file, made on first use."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(MAX_WORKERS,
                                                              thread_name_prefix="symgrad")
    return _executor


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it)."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(usable) if usable else os.cpu_count() or 1


class RowPool:
    """How one generated module runs its chunked loops: on ``threads`` threads (None: the
    usable CPUs, at most 8), and only when a loop has ``min_chunks`` chunks or more. Making
    one calls :func:`keep_freed_memory`."""

    def __init__(self, threads=None, min_chunks=4):
        self.threads = threads
        self.min_chunks = min_chunks
        keep_freed_memory()

    def thread_count(self) -> int:
        if self.threads:
            return min(self.threads, MAX_WORKERS + 1)
        return min(usable_cpus(), MAX_DEFAULT_THREADS)

    def single_blas(self):
        """``with pool.single_blas():`` runs its block with the BLAS single-threaded when
        this pool runs loops on several threads (:data:`BLAS_THREADS`), else as it is."""
        return BLAS_THREADS.single() if self.thread_count() > 1 else contextlib.nullcontext()

    def over_rows(self, body, n, rows, *args, min_chunks=None) -> list:
        """Run ``body(start, stop, rows, *args)`` over rows 0:n; return the results in row
        order.

        Rows go in chunks of ``rows``: with ``min_chunks`` chunks or more (the argument, else
        the pool's), each thread takes a contiguous range of whole chunks (the calling thread
        the first), else the calling thread takes all. NumPy releases the GIL inside ufuncs,
        copies and BLAS calls, so the ranges run in parallel, the BLAS single-threaded
        meanwhile (:data:`BLAS_THREADS`)."""
        chunks = -(-n // rows)
        least = self.min_chunks if min_chunks is None else min_chunks
        workers = min(self.thread_count(), chunks) if chunks >= least else 1
        if workers < 2:
            return [body(0, n, rows, *args)]
        bounds = [min(n, k * chunks // workers * rows) for k in range(workers + 1)]
        executor = shared_executor()
        with BLAS_THREADS.single():
            futures = [executor.submit(body, bounds[k], bounds[k + 1], rows, *args)
                       for k in range(1, workers)]
            try:
                first = body(0, bounds[1], rows, *args)
            finally:
                concurrent.futures.wait(futures)
        return [first] + [future.result() for future in futures]
