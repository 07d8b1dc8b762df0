"""The fixed runtime of generated NumPy modules: chunked loops over many rows, on threads.

Imports only the standard library. A generated module that has a chunked loop imports it
relatively, ``from .row_pool import RowPool``: symgrad loads generated modules as members of
``symgrad.backends.host``, and an AOT artifact ships this file beside its module
(``numpy/row_pool.py``, listed and hashed in the manifest), which the artifact's standalone
runner loads the same way. Every module that imports one copy of this file shares one pool of
worker threads, made on first use; its threads start only as loops need them. A forked child
has none of its parent's threads: it forgets the parent's pool (and the lock guarding it, which
another thread may have held at the fork) and makes its own on first use.
"""
from __future__ import annotations

import concurrent.futures
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


if hasattr(os, "register_at_fork"):   # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


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
    usable CPUs, at most 8), and only when a loop has ``min_chunks`` chunks or more."""

    def __init__(self, threads=None, min_chunks=4):
        self.threads = threads
        self.min_chunks = min_chunks

    def thread_count(self) -> int:
        if self.threads:
            return min(self.threads, MAX_WORKERS + 1)
        return min(usable_cpus(), MAX_DEFAULT_THREADS)

    def over_rows(self, body, n, rows, *args) -> list:
        """Run ``body(start, stop, rows, *args)`` over rows 0:n; return the results in row
        order.

        Rows go in chunks of ``rows``: with ``min_chunks`` chunks or more, each thread takes
        a contiguous range of whole chunks (the calling thread the first), else the calling
        thread takes all. NumPy releases the GIL inside ufuncs, so the ranges run in
        parallel."""
        chunks = -(-n // rows)
        workers = min(self.thread_count(), chunks) if chunks >= self.min_chunks else 1
        if workers < 2:
            return [body(0, n, rows, *args)]
        bounds = [min(n, k * chunks // workers * rows) for k in range(workers + 1)]
        executor = shared_executor()
        futures = [executor.submit(body, bounds[k], bounds[k + 1], rows, *args)
                   for k in range(1, workers)]
        try:
            first = body(0, bounds[1], rows, *args)
        finally:
            concurrent.futures.wait(futures)
        return [first] + [future.result() for future in futures]
