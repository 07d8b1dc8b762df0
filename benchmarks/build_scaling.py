"""Time to build elementwise chains of 1,000 / 10,000 / 100,000 ops (graph construction only).

Run: python benchmarks/build_scaling.py [--repeats N]
Prints the median build time per size and the growth factor per 10x ops (linear = ~10x).
"""
import argparse
import statistics
import time

import symgrad as sg


def build_chain(n):
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", [None, 16])
        for _ in range(n):
            y = sg.tanh(y)
    return prog


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'ops':>9} | {'build median (s)':>16} | {'us/op':>7} | growth per 10x")
    print("-" * 56)
    previous = None
    for n in (1_000, 10_000, 100_000):
        seconds = median_time(lambda: build_chain(n), args.repeats)
        growth = f"{seconds / previous:.1f}x" if previous else "-"
        print(f"{n:>9,} | {seconds:>16.3f} | {seconds / n * 1e6:>7.2f} | {growth}")
        previous = seconds


if __name__ == "__main__":
    main()
