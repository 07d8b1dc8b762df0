"""Timing helpers shared by the benchmarks: medians of repeats, peak memory, one table."""
from __future__ import annotations

import gc
import statistics
import time
import tracemalloc


def median_time(fn, repeats=7, warmup=1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` calls (after ``warmup``)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_median_times(fns, repeats=7, warmup=1, number=1, settle=0.0) -> list:
    """Median wall time (seconds per call) of each of ``fns``, timed in alternation: every
    round calls each function ``number`` times in a row (the order rotating from round to
    round), so a slow spell of a noisy machine lands on all of them instead of on whichever
    ran then. Ratios of these medians are what the tables report. Calls of microseconds take
    ``number`` > 1, as ``timeit`` does: one such call timed alone measures the caches the
    other contenders left cold, not the call.

    ``settle`` > 0: at each turn a function first runs untimed for that many seconds (after
    the garbage collection that precedes every turn), so it is timed in its steady state
    rather than in what the one before, or the collection, left behind. Multithreaded
    contenders need it: after a call, OpenBLAS's threads spin for about 0.1 s (2**28 cycles)
    and take a CPU from the next contender's threads (measured on W8: PyTorch eager's step
    2.6x slower, symgrad numpy's 1.4x, right after a hand-written step)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for round_ in range(repeats):
        for k in range(len(fns)):
            index = (k + round_) % len(fns)
            fn = fns[index]
            gc.collect()
            settled = time.perf_counter() + settle
            while time.perf_counter() < settled:
                fn()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times[index].append((time.perf_counter() - start) / number)
    return [statistics.median(t) for t in times]


def peak_bytes(fn) -> int:
    """Peak bytes allocated (tracemalloc, which NumPy reports to) during one ``fn()`` call."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = fn()
        del result
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def optional_import(name):
    """The module ``name``, or None when it is not installed."""
    try:
        return __import__(name)
    except Exception:  # ImportError, or a broken install: the row is skipped
        return None


def format_seconds(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def print_table(rows, columns, title=None):
    """Print ``rows`` (dicts) as an aligned text table with the given ``columns``."""
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    if title:
        print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
