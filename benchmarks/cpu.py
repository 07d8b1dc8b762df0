"""CPU benchmarks: symgrad's generated NumPy against hand-written NumPy, measured in one run.

Run: python benchmarks/cpu.py [--quick]
Prints one table of median times and ratios (hand-written time / symgrad time: above 1 means
symgrad is faster), plus peak memory of W2/W2b. symgrad and its hand-written counterpart are
timed in alternation (``common.paired_median_times``), so a noisy spell hits both. JAX /
PyTorch / autograd / PyTensor rows are added for W2 when those packages are installed and
skipped otherwise.

W1  MLP gradient: x (256, 784), dense 784-512-512-10 tanh, softmax cross-entropy, grads of
    all weights and biases (float32).
W2  grad w.r.t. x of sum(tanh(x*1.5+0.5)*sin(x) + exp(-x*x)*0.3 + log1p(x*x)), 4,000,000 float32.
W2b memory-bound chain of adds, multiplies and a where over 16,000,000 float64.
W3  a 16-element float64 vector through 300 small elementwise ops, gradient.
W4  compile time (grad + compile) of elementwise chains of 1,000 / 10,000 / 100,000 ops;
    W4b the 10,000-op chain with a distinct constant in every multiply (no shared functions).
W5  4th derivative of sin at 1,000,000 points vs the closed form.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from symgrad import ir_backward  # noqa: E402
from workloads import mlp_init, mlp_program, w2_program  # noqa: E402
from common import (format_seconds, median_time, optional_import, paired_median_times,  # noqa: E402
                    peak_bytes, print_table)


def _row(name, ours, hand, note=""):
    ratio = f"{hand / ours:.2f}x" if ours and hand else "-"
    return {"workload": name, "symgrad": format_seconds(ours),
            "hand-written NumPy": format_seconds(hand), "speedup": ratio, "note": note}


# --- W1 ---------------------------------------------------------------------------------------
def w1(repeats):
    init = mlp_init()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 784)).astype("float32")
    labels = rng.integers(0, 10, 256)
    prog, fetches = mlp_program(init)
    fn = sg.compile(prog, fetches, backend="numpy")

    def hand():
        acts = [x]
        for i, (w, b) in enumerate(init):
            z = acts[-1] @ w + b
            acts.append(np.tanh(z) if i < len(init) - 1 else z)
        logits = acts[-1]
        m = logits.max(axis=1, keepdims=True)
        e = np.exp(logits - m)
        p = e / e.sum(axis=1, keepdims=True)
        n = logits.shape[0]
        out_loss = -np.mean(np.log(p[np.arange(n), labels]))
        g = p
        g[np.arange(n), labels] -= 1
        g /= n
        gs = []
        for i in reversed(range(len(init))):
            w, _ = init[i]
            gs.append(g.sum(axis=0))
            gs.append(acts[i].T @ g)
            if i:
                g = (g @ w.T) * (1 - acts[i] * acts[i])
        return out_loss, gs

    got = fn(x=x, labels=labels)
    ref_loss, ref_grads = hand()
    assert np.allclose(got[0], ref_loss, rtol=1e-4)
    assert all(g.dtype == np.float32 for g in ref_grads)  # a fair, all-float32 baseline
    ours, theirs = paired_median_times([lambda: fn(x=x, labels=labels), hand], repeats * 5)
    return _row("W1 MLP grad (256x784, 784-512-512-10)", ours, theirs,
                f"{fn.stats['fused_groups']} fused groups")


# --- W2 ---------------------------------------------------------------------------------------
def w2_hand(x):
    a = x * np.float32(1.5) + np.float32(0.5)
    t = np.tanh(a)
    s = np.sin(x)
    xx = x * x
    e = np.exp(-xx)
    # backward of sum(t*s + e*0.3 + log1p(xx))
    dt = s
    da = dt * (1 - t * t)
    dx = da * np.float32(1.5)
    dx = dx + t * np.cos(x)
    dxx = e * np.float32(0.3) * np.float32(-1) + 1 / (1 + xx)
    dx = dx + dxx * (x + x)
    return dx


def w2(repeats, n):
    prog, _, gx = w2_program(n)
    fn = sg.compile(prog, [gx], backend="numpy")
    x = np.random.default_rng(0).uniform(-2, 2, n).astype("float32")
    np.testing.assert_allclose(fn(x=x)[0], w2_hand(x), rtol=1e-3, atol=1e-4)
    ours, hand = paired_median_times([lambda: fn(x=x), lambda: w2_hand(x)], repeats)
    mem_ours, mem_hand = peak_bytes(lambda: fn(x=x)), peak_bytes(lambda: w2_hand(x))
    rows = [_row(f"W2 grad, {n:,} float32", ours, hand,
                 f"peak {mem_ours / 2**20:.0f} MiB vs {mem_hand / 2**20:.0f} MiB; "
                 f"{fn.stats['fused_groups']} fused group(s)")]
    rows += _w2_frameworks(x, ours, hand, repeats)
    return rows


def _framework_row(name, version, seconds, ours, hand):
    """A row for another framework: its time sits in the first time column, with its speedup
    over hand-written NumPy; the note compares it with symgrad's."""
    row = _row(f"W2 {name}", seconds, hand)
    row["note"] = f"{name} {version}; symgrad's time is {ours / seconds:.2f}x this"
    return row


def _w2_frameworks(x, ours, hand, repeats):
    rows = []
    jax = optional_import("jax")
    if jax is not None:
        import jax.numpy as jnp

        f = jax.jit(jax.grad(lambda v: jnp.sum(jnp.tanh(v * 1.5 + 0.5) * jnp.sin(v)
                                               + jnp.exp(-v * v) * 0.3 + jnp.log1p(v * v))))
        xj = jnp.asarray(x)
        np.testing.assert_allclose(np.asarray(f(xj)), w2_hand(x), rtol=1e-3, atol=1e-4)
        seconds = median_time(lambda: f(xj).block_until_ready(), repeats)
        rows.append(_framework_row("JAX (jit)", jax.__version__, seconds, ours, hand))
    else:
        rows.append({"workload": "W2 JAX", "note": "not installed, skipped"})
    torch = optional_import("torch")
    if torch is not None:
        xt = torch.tensor(x, requires_grad=True)

        def run():
            v = xt
            loss = (torch.tanh(v * 1.5 + 0.5) * torch.sin(v) + torch.exp(-v * v) * 0.3
                    + torch.log1p(v * v)).sum()
            return torch.autograd.grad(loss, v)[0]
        np.testing.assert_allclose(run().numpy(), w2_hand(x), rtol=1e-3, atol=1e-4)
        seconds = median_time(run, repeats)
        rows.append(_framework_row("PyTorch (eager)", torch.__version__, seconds, ours, hand))
    else:
        rows.append({"workload": "W2 PyTorch", "note": "not installed, skipped"})
    for name in ("autograd", "pytensor"):
        if optional_import(name) is None:
            rows.append({"workload": f"W2 {name}", "note": "not installed, skipped"})
    return rows


# --- W2b --------------------------------------------------------------------------------------
def w2b(repeats, n):
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [n], "float64")
        b = sg.data("b", [n], "float64")
        y = sg.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0 + a * 3.0 + b
    fn = sg.compile(prog, [y], backend="numpy")

    def hand(a, b):
        return np.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0 + a * 3.0 + b

    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal(n), rng.standard_normal(n)
    np.testing.assert_allclose(fn(a=av, b=bv)[0], hand(av, bv), rtol=1e-12)
    ours, theirs = paired_median_times([lambda: fn(a=av, b=bv), lambda: hand(av, bv)], repeats)
    mem_ours = peak_bytes(lambda: fn(a=av, b=bv))
    mem_hand = peak_bytes(lambda: hand(av, bv))
    return [_row(f"W2b memory-bound chain, {n:,} float64", ours, theirs,
                 f"peak {mem_ours / 2**20:.0f} MiB vs {mem_hand / 2**20:.0f} MiB")]


# --- W3 ---------------------------------------------------------------------------------------
W3_OPS = [  # (symgrad op, straight-line forward, straight-line derivative of y w.r.t. its input)
    (lambda v: sg.sin(v), "np.sin({x})", "np.cos({x})"),
    (lambda v: v * 1.01, "{x} * 1.01", "1.01"),
    (lambda v: v + 0.1, "{x} + 0.1", None),
    (lambda v: sg.tanh(v), "np.tanh({x})", "1.0 - {y} * {y}"),
    (lambda v: v * v * 0.5, "{x} * {x} * 0.5", "{x}"),
]


def w3(repeats, n_ops=300):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [16], "float64")
        y = x
        for i in range(n_ops):
            y = W3_OPS[i % len(W3_OPS)][0](y)
        loss = sg.sum(y)
        gx, = ir_backward.grad(loss, [x])
    fn = sg.compile(prog, [loss, gx], backend="numpy")
    # straight-line NumPy: forward then backward, one statement per op
    lines = ["def straight(v0):"]
    for i in range(n_ops):
        lines.append(f"    v{i + 1} = " + W3_OPS[i % len(W3_OPS)][1].format(x=f"v{i}"))
    lines.append(f"    loss = np.sum(v{n_ops})")
    lines.append("    g = np.ones_like(v0)")
    for i in reversed(range(n_ops)):
        derivative = W3_OPS[i % len(W3_OPS)][2]
        if derivative is not None:
            lines.append("    g = g * (" + derivative.format(x=f"v{i}", y=f"v{i + 1}") + ")")
    lines.append("    return loss, g")
    namespace = {"np": np}
    exec("\n".join(lines), namespace)  # noqa: S102  (benchmark baseline built from a table)
    straight = namespace["straight"]
    xv = np.random.default_rng(0).uniform(-0.5, 0.5, 16)
    np.testing.assert_allclose(fn(x=xv)[1], straight(xv)[1], rtol=1e-9)
    ours, theirs = paired_median_times([lambda: fn(x=xv), lambda: straight(xv)], repeats * 20)
    return [_row(f"W3 {n_ops} small ops on float64[16], grad", ours, theirs,
                 "vs straight-line NumPy")]


# --- W4 ---------------------------------------------------------------------------------------
def _w4_time(n, scale):
    """(build seconds, grad + compile seconds, compiled) for the chain y = tanh(y * scale(i))."""
    gc.collect()   # the previous, larger programs are garbage: do not time their collection
    start = time.perf_counter()
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float64")
        y = x
        for i in range(n):
            y = sg.tanh(y) if i % 2 else y * scale(i)
        loss = sg.sum(y)
    built = time.perf_counter()
    gx, = ir_backward.grad(loss, [x])
    compiled = sg.compile(prog, [gx], backend="numpy")
    return built - start, time.perf_counter() - built, compiled


def w4(sizes):
    rows = []
    previous = None
    _w4_time(10, lambda i: 0.9)   # warm-up: imports and templates load once per process
    for n in sizes:
        build, total, compiled = _w4_time(n, lambda i: 0.9)
        growth = f"x{total / previous:.1f} per 10x ops" if previous else ""
        previous = total
        rows.append({"workload": f"W4 grad+compile, {n:,}-op chain",
                     "symgrad": format_seconds(total),
                     "note": f"(build {format_seconds(build)}; {compiled.stats['fused_groups']} "
                             f"groups, {compiled.stats['group_functions']} functions) {growth}"})
    # every multiply by its own constant: no two groups are the same code, none share a function
    n = sizes[1]
    build, total, compiled = _w4_time(n, lambda i: 0.9 + i * 1e-6)
    rows.append({"workload": f"W4b as W4, {n:,} ops, distinct constants",
                 "symgrad": format_seconds(total),
                 "note": f"(build {format_seconds(build)}; {compiled.stats['fused_groups']} "
                         f"groups, {compiled.stats['group_functions']} functions)"})
    return rows


# --- W5 ---------------------------------------------------------------------------------------
def w5(repeats, n):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [n], "float64")
        g = sg.sin(x)
        for _ in range(4):
            g, = ir_backward.grad(sg.sum(g), [x], create_graph=True)
    fn = sg.compile(prog, [g], backend="numpy")
    xv = np.random.default_rng(0).uniform(-3, 3, n)
    np.testing.assert_allclose(fn(x=xv)[0], np.sin(xv), rtol=1e-9, atol=1e-12)
    names = [o.name for op in fn.program.ops
             for o in (op.blocks[0].ops if op.blocks else [op])]
    duplicates = sum(names.count(k) - 1 for k in ("sin", "cos") if names.count(k) > 1)
    ours, theirs = paired_median_times([lambda: fn(x=xv), lambda: np.sin(xv)], repeats)
    return [_row(f"W5 4th derivative of sin, {n:,} points", ours, theirs,
                 f"vs closed form; ops after passes: {', '.join(names[1:]) or '-'}; "
                 f"duplicate sin/cos: {duplicates}")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    os.environ.setdefault("SYMGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="symgrad-bench-"))
    repeats = 3 if args.quick else 7
    rows = [w1(repeats)]
    rows += w2(repeats, 400_000 if args.quick else 4_000_000)
    rows += w2b(repeats, 1_600_000 if args.quick else 16_000_000)
    rows += w3(repeats)
    rows += w4([1000, 10000] if args.quick else [1000, 10000, 100000])
    rows += w5(repeats, 100_000 if args.quick else 1_000_000)
    print_table(rows, ["workload", "symgrad", "hand-written NumPy", "speedup", "note"],
                title=f"symgrad CPU benchmarks (NumPy {np.__version__}, medians; speedup = "
                      f"hand-written / symgrad)")


if __name__ == "__main__":
    main()
