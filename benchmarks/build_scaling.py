"""Time to build elementwise chains of 1,000 / 10,000 / 100,000 ops (graph construction only).

Run: python benchmarks/build_scaling.py [--repeats N]
Prints the median build time per size and the growth factor per 10x ops (linear = ~10x).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from common import median_time  # noqa: E402


def build_chain(n):
    """An elementwise chain of ``n`` tanh ops on a [None, 16] input: ``(program, x, y)``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = y = sg.data("x", [None, 16])
        for _ in range(n):
            y = sg.tanh(y)
    return prog, x, y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'ops':>9} | {'build median (s)':>16} | {'us/op':>7} | growth per 10x")
    print("-" * 56)
    previous = None
    for n in (1_000, 10_000, 100_000):
        seconds = median_time(lambda: build_chain(n), args.repeats, warmup=0)
        growth = f"{seconds / previous:.1f}x" if previous else "-"
        print(f"{n:>9,} | {seconds:>16.3f} | {seconds / n * 1e6:>7.2f} | {growth}")
        previous = seconds


if __name__ == "__main__":
    main()
