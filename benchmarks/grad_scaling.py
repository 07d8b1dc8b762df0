"""Time to append the backward (``ir_backward.grad``) of chains of 1,000 / 10,000 / 100,000 ops
and of a wide fan-out graph (one input feeding 10,000 ops).

Run: python benchmarks/grad_scaling.py [--repeats N] [--op tanh|negative|sin]
Prints the median time of ``grad`` alone (the forward is rebuilt, untimed, before each run), the
cost per forward op, and the growth factor per 10x ops (linear = ~10x).
"""
import argparse
import gc
import statistics
import time

import symgrad as sg
from symgrad import ir_backward

CHAIN_SIZES = (1_000, 10_000, 100_000)
FAN_OUT = 10_000


def chain(n, op):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float32")
        y = x
        for _ in range(n):
            y = op(y)
    return prog, [y], x


def fan_out(n, op):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float32")
        ys = [op(x * float(i + 1)) for i in range(n)]
    return prog, ys, x


def time_grad(build, repeats):
    """Median seconds of ``grad`` over fresh programs, and the op counts of the last one."""
    times = []
    for _ in range(repeats):
        prog, outputs, x = build()
        forward_ops = prog.num_ops
        gc.collect()
        start = time.perf_counter()
        ir_backward.grad(outputs, x)
        times.append(time.perf_counter() - start)
    return statistics.median(times), forward_ops, prog.num_ops - forward_ops


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--op", default="tanh", choices=["tanh", "negative", "sin"])
    args = parser.parse_args(argv)
    op = getattr(sg, args.op)

    print(f"{'graph':<22} | {'fwd ops':>8} | {'bwd ops':>8} | {'grad median':>11} | "
          f"{'us/fwd op':>9} | growth per 10x")
    print("-" * 84)
    previous = None
    rows = [(f"{args.op} chain {n:,}", lambda n=n: chain(n, op)) for n in CHAIN_SIZES]
    rows.append((f"fan-out {FAN_OUT:,}", lambda: fan_out(FAN_OUT, op)))
    for label, build in rows:
        seconds, forward_ops, backward_ops = time_grad(build, args.repeats)
        growth = f"{seconds / previous:.1f}x" if previous and "chain" in label else "-"
        print(f"{label:<22} | {forward_ops:>8,} | {backward_ops:>8,} | {seconds:>9.3f} s | "
              f"{seconds / forward_ops * 1e6:>9.1f} | {growth}")
        previous = seconds


if __name__ == "__main__":
    main()
