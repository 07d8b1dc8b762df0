"""CPU benchmarks: symgrad's generated NumPy against hand-written NumPy, measured in one run.

Run: python benchmarks/cpu.py [--quick] [--only W2 ...]
Prints one table of median times and ratios (hand-written time / symgrad time: above 1 means
symgrad is faster), plus peak memory of W2/W2b. symgrad and its hand-written counterpart are
timed in alternation (``common.paired_median_times``), so a noisy spell hits both. JAX (jit)
and PyTorch (eager) rows are added for W2 when those packages are installed, each timed in a
process of its own against hand-written NumPy (autograd and PyTensor are listed as skipped
when absent).

W1  MLP gradient: x (256, 784), dense 784-512-512-10 tanh, softmax cross-entropy, grads of
    all weights and biases (float32).
W2  grad w.r.t. x of sum(tanh(x*1.5+0.5)*sin(x) + exp(-x*x)*0.3 + log1p(x*x)), 4,000,000 float32.
W2b memory-bound chain of adds, multiplies and a where over 16,000,000 float64.
W3  a 16-element float64 vector through 300 small elementwise ops, gradient.
W4  compile time (grad + compile) of elementwise chains of 1,000 / 10,000 / 100,000 ops;
    W4b the 10,000-op chain with a distinct constant in every multiply (no shared functions).
W5  4th derivative of sin at 1,000,000 points vs the closed form.
W6  tanh RNN (batch 32, hidden 128, input 64) over T = 1,000 steps with ``sg.scan``, loss =
    mean of the final state squared, gradients of all weights: grad + compile time (T = 10 and
    1,000) and run time against hand-written NumPy backpropagation through time; the same
    program unrolled by a Python loop (T = 100 and 1,000); JAX ``lax.scan`` when installed.
W7  one Adam training step of the W1 MLP (forward, backward, update: ``sg.optimizer.Adam``
    compiled with the parameters and Adam's moments as the program's state) against the same
    step in hand-written NumPy (W1's backward, then each parameter's moments and value updated
    in place); PyTorch (``torch.optim.Adam``; eager, and ``torch.compile`` of the forward and
    of the optimizer step) when installed, each timed in a process of its own against the
    hand-written step.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from symgrad import ir_backward  # noqa: E402
from workloads import (ADAM, mlp_adam_program, mlp_init, mlp_program, rnn_by_hand,  # noqa: E402
                       rnn_init, rnn_program, w2_program)
from common import (format_seconds, median_time, optional_import, paired_median_times,  # noqa: E402
                    peak_bytes, print_table)


def _row(name, ours, hand, note=""):
    ratio = f"{hand / ours:.2f}x" if ours and hand else "-"
    return {"workload": name, "symgrad": format_seconds(ours),
            "hand-written NumPy": format_seconds(hand), "speedup": ratio, "note": note}


# --- W1 ---------------------------------------------------------------------------------------
def mlp_by_hand(layers, x, labels):
    """Hand-written NumPy forward and backward of the W1 MLP (``layers``: [(w, b), ...]);
    returns ``(loss, [gw0, gb0, gw1, gb1, ...])``."""
    acts = [x]
    for i, (w, b) in enumerate(layers):
        z = acts[-1] @ w + b
        acts.append(np.tanh(z) if i < len(layers) - 1 else z)
    logits = acts[-1]
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    p = e / e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.mean(np.log(p[np.arange(n), labels]))
    g = p
    g[np.arange(n), labels] -= 1
    g /= n
    grads = [None] * (2 * len(layers))
    for i in reversed(range(len(layers))):
        w, _ = layers[i]
        grads[2 * i + 1] = g.sum(axis=0)
        grads[2 * i] = acts[i].T @ g
        if i:
            g = (g @ w.T) * (1 - acts[i] * acts[i])
    return loss, grads


def mlp_data(rows=256, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 784)).astype("float32"), rng.integers(0, 10, rows)


def w1(repeats):
    init = mlp_init()
    x, labels = mlp_data()
    prog, fetches = mlp_program(init)
    fn = sg.compile(prog, fetches, backend="numpy")
    got = fn(x=x, labels=labels)
    ref_loss, ref_grads = mlp_by_hand(init, x, labels)
    assert np.allclose(got[0], ref_loss, rtol=1e-4)
    assert all(g.dtype == np.float32 for g in ref_grads)  # a fair, all-float32 baseline
    ours, theirs = paired_median_times([lambda: fn(x=x, labels=labels),
                                        lambda: mlp_by_hand(init, x, labels)], repeats * 5)
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
    """symgrad against hand-written NumPy, timed in alternation; then each installed framework
    (JAX jit, PyTorch eager) against hand-written NumPy in a process of its own, so that no
    two thread pools compete, and compared with symgrad through the hand-written time."""
    prog, _, gx = w2_program(n)
    fn = sg.compile(prog, [gx], backend="numpy")
    x = w2_input(n)
    np.testing.assert_allclose(fn(x=x)[0], w2_hand(x), rtol=1e-3, atol=1e-4)
    ours, hand = paired_median_times([lambda: fn(x=x), lambda: w2_hand(x)], repeats)
    mem_ours, mem_hand = peak_bytes(lambda: fn(x=x)), peak_bytes(lambda: w2_hand(x))
    rows = [_row(f"W2 grad, {n:,} float32", ours, hand,
                 f"peak {mem_ours / 2**20:.0f} MiB vs {mem_hand / 2**20:.0f} MiB; "
                 f"{fn.stats['fused_groups']} fused group(s)")]
    for name in W2_FRAMEWORKS:
        result = _in_own_process("W2", name, n, repeats)
        if result is None:
            rows.append({"workload": f"W2 {name}", "note": "not installed, skipped"})
            continue
        row = _row(f"W2 {result['label']}", result["seconds"], result["hand"])
        relative = (ours / hand) / (result["seconds"] / result["hand"])
        row["note"] = f"{result['version']}; symgrad's time is {relative:.2f}x this"
        rows.append(row)
    return rows


def w2_input(n):
    return np.random.default_rng(0).uniform(-2, 2, n).astype("float32")


def _w2_jax(x):
    jax = optional_import("jax")
    if jax is None:
        return None
    import jax.numpy as jnp

    f = jax.jit(jax.grad(lambda v: jnp.sum(jnp.tanh(v * 1.5 + 0.5) * jnp.sin(v)
                                           + jnp.exp(-v * v) * 0.3 + jnp.log1p(v * v))))
    xj = jnp.asarray(x)
    return "JAX (jit)", f"JAX {jax.__version__}", lambda: f(xj).block_until_ready()


def _w2_torch(x):
    torch = optional_import("torch")
    if torch is None:
        return None
    xt = torch.tensor(x, requires_grad=True)

    def run():
        loss = (torch.tanh(xt * 1.5 + 0.5) * torch.sin(xt) + torch.exp(-xt * xt) * 0.3
                + torch.log1p(xt * xt)).sum()
        return torch.autograd.grad(loss, xt)[0]
    return "PyTorch (eager)", f"PyTorch {torch.__version__}", run


W2_FRAMEWORKS = {"JAX": _w2_jax, "PyTorch": _w2_torch, "autograd": lambda x: None,
                 "pytensor": lambda x: None}   # the last two: listed when absent


def _in_own_process(workload, name, n, repeats):
    """Run the framework worker of ``workload`` (:data:`FRAMEWORK_WORKERS`) for ``name`` in a
    fresh Python; its result, or None when the framework is not installed."""
    if name in ("autograd", "pytensor") and optional_import(name) is not None:
        return None
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--framework-worker",
                             workload, name, str(n), str(repeats)], capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def w2_framework_worker(name, n, repeats):
    """The paired median times of framework ``name`` and of hand-written NumPy on W2, after
    checking the framework's gradient (None when it is not installed)."""
    x = w2_input(n)
    found = W2_FRAMEWORKS[name](x)
    if found is None:
        return None
    label, version, run = found
    np.testing.assert_allclose(np.asarray(run()), w2_hand(x), rtol=1e-3, atol=1e-4,
                               err_msg=label)
    seconds, hand = paired_median_times([run, lambda: w2_hand(x)], repeats)
    return {"label": label, "version": version, "seconds": seconds, "hand": hand}


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


# --- W6 ---------------------------------------------------------------------------------------
def _w6_compile(steps, init, unrolled=False):
    """(grad + compile seconds, compiled function) of the W6 program over ``steps``."""
    gc.collect()
    start = time.perf_counter()
    prog, fetches = rnn_program(steps, init, unrolled)
    fn = sg.compile(prog, fetches, backend="numpy")
    return time.perf_counter() - start, fn


def w6(repeats, steps=1000, unrolled_steps=(100, 1000), unrolled_budget=60.0):
    init = rnn_init()
    rng = np.random.default_rng(2)
    rows = []
    _w6_compile(2, init)    # warm-up: imports and templates load once per process
    compile_short, _ = _w6_compile(10, init)
    compile_long, fn = _w6_compile(steps, init)
    xs = rng.standard_normal((steps, 32, 64)).astype("float32")
    h0 = np.zeros((32, 128), "float32")
    got, want = fn(xs=xs, h0=h0), rnn_by_hand(xs, h0, *init)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=1e-6)
    ours, hand = paired_median_times([lambda: fn(xs=xs, h0=h0),
                                      lambda: rnn_by_hand(xs, h0, *init)], repeats)
    residual = 32 * 128 * 4 * steps
    peak = peak_bytes(lambda: fn(xs=xs, h0=h0))
    rows.append(_row(f"W6 tanh RNN scan, T={steps:,}, grad", ours, hand,
                     f"grad+compile {format_seconds(compile_short)} (T=10), "
                     f"{format_seconds(compile_long)} (T={steps:,}); peak "
                     f"{peak / 2**20:.0f} MiB, T x batch x hidden = {residual / 2**20:.0f} MiB"))
    for n in unrolled_steps:
        seconds, unrolled = _w6_compile(n, init, unrolled=True)
        xs_n = xs[:n]
        run = median_time(lambda: unrolled(xs=xs_n, h0=h0), repeats)
        note = (f"grad+compile {format_seconds(seconds)}; "
                f"{unrolled.stats['ops_before']:,} ops")
        rows.append(_row(f"W6 unrolled, T={n:,}", run,
                         median_time(lambda: rnn_by_hand(xs_n, h0, *init), repeats), note))
        if seconds > unrolled_budget:
            break
    jax = optional_import("jax")
    if jax is None:
        rows.append({"workload": "W6 JAX lax.scan", "note": "not installed, skipped"})
        return rows
    import jax.numpy as jnp

    def loss(params, xs, h0):
        W, U, b = params
        h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h @ W + x @ U + b), None), h0, xs)
        return jnp.mean(h * h)

    grad = jax.jit(jax.value_and_grad(loss))
    args = (tuple(map(jnp.asarray, init)), jnp.asarray(xs), jnp.asarray(h0))
    start = time.perf_counter()
    jax.block_until_ready(grad(*args))
    first = time.perf_counter() - start
    run = median_time(lambda: jax.block_until_ready(grad(*args)), repeats)
    rows.append(_row(f"W6 JAX lax.scan (jit), T={steps:,}", run, hand,
                     f"first call (trace + compile) {format_seconds(first)}"))
    return rows


# --- W7 ---------------------------------------------------------------------------------------
class AdamByHand:
    """Hand-written NumPy Adam with PyTorch's formulas over float32 arrays: the moments and
    the parameters are updated in place."""

    def __init__(self, params, learning_rate, beta1, beta2, epsilon):
        self.lr, self.beta1, self.beta2, self.eps, self.t = (learning_rate, beta1, beta2,
                                                             epsilon, 0)
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, params, grads):
        self.t += 1
        step_size = np.float32(self.lr / (1 - self.beta1 ** self.t))
        root = np.float32(np.sqrt(1 - self.beta2 ** self.t))
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m += (g - m) * np.float32(1 - self.beta1)
            v *= np.float32(self.beta2)
            v += g * g * np.float32(1 - self.beta2)
            p -= step_size * (m / (np.sqrt(v) / root + np.float32(self.eps)))


def w7_by_hand(init):
    """W7's training step in hand-written NumPy over copies of ``init``: ``(step(x, labels)
    -> loss, the parameters [w0, b0, w1, ...])``."""
    params = [a.copy() for pair in init for a in pair]
    adam = AdamByHand(params, **ADAM)

    def step(x, labels):
        loss, grads = mlp_by_hand(list(zip(params[::2], params[1::2])), x, labels)
        adam.step(params, grads)
        return loss
    return step, params


def _check_w7(losses, params, hand_losses, hand_params, label):
    """Steps from the same init give the same losses and parameters (Adam's update of an
    element whose gradient is about 0 is about +-lr either way in float32: the parameters
    agree on average, and each within the steps' reach)."""
    np.testing.assert_allclose(losses, hand_losses, rtol=1e-4, err_msg=label)
    reach = 2 * ADAM["learning_rate"] * len(losses)
    for got, want in zip(params, hand_params):
        difference = np.abs(np.asarray(got, np.float64) - want)
        assert difference.max() <= reach and difference.mean() < 1e-6, label


def w7(repeats):
    """symgrad against hand-written NumPy, timed in alternation; then PyTorch (eager, and
    compiled) against hand-written NumPy in a process of its own."""
    init = mlp_init()
    x, labels = mlp_data()
    prog, fetches = mlp_adam_program(init)
    fn = sg.compile(prog, fetches, backend="numpy")
    hand, hand_params = w7_by_hand(init)
    losses = [float(fn(x=x, labels=labels)[0]) for _ in range(3)]
    names = [f"{kind}{i}" for i in range(len(init)) for kind in "wb"]
    _check_w7(losses, [fn.state[name] for name in names], [hand(x, labels) for _ in range(3)],
              hand_params, "symgrad")
    ours, theirs = paired_median_times([lambda: fn(x=x, labels=labels), lambda: hand(x, labels)],
                                       repeats * 5)
    rows = [_row("W7 Adam training step of W1", ours, theirs,
                 f"{fn.stats['fused_groups']} fused groups; the update in place in the program")]
    results = _in_own_process("W7", "PyTorch", 0, repeats)
    if results is None:
        rows.append({"workload": "W7 PyTorch", "note": "not installed, skipped"})
    for result in results or ():
        row = _row(f"W7 {result['label']}", result["seconds"], result["hand"])
        relative = (ours / theirs) / (result["seconds"] / result["hand"])
        row["note"] = f"{result['version']}; symgrad's time is {relative:.2f}x this"
        rows.append(row)
    return rows


def w7_framework_worker(name, n, repeats):
    """PyTorch's W7 step (``torch.optim.Adam``), eager and compiled (``torch.compile`` of the
    forward and of the optimizer step), each checked against and timed in alternation with
    the hand-written step; None when PyTorch is not installed."""
    torch = optional_import("torch")
    if torch is None:
        return None
    init = mlp_init()
    x, labels = mlp_data()
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
    rows = []
    for label, compiled in (("PyTorch (eager)", False), ("PyTorch (torch.compile)", True)):
        tensors = [torch.tensor(a, requires_grad=True) for pair in init for a in pair]
        optimizer = torch.optim.Adam(tensors, lr=ADAM["learning_rate"],
                                     betas=(ADAM["beta1"], ADAM["beta2"]), eps=ADAM["epsilon"])

        def loss_of():
            h = xt
            for i in range(len(init)):
                h = h @ tensors[2 * i] + tensors[2 * i + 1]
                if i < len(init) - 1:
                    h = torch.tanh(h)
            return torch.nn.functional.cross_entropy(h, yt)

        forward = torch.compile(loss_of) if compiled else loss_of
        update = torch.compile(optimizer.step) if compiled else optimizer.step

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = forward()
            loss.backward()
            update()
            return loss

        hand, hand_params = w7_by_hand(init)
        losses = [float(step()) for _ in range(3)]
        _check_w7(losses, [t.detach().numpy() for t in tensors],
                  [hand(x, labels) for _ in range(3)], hand_params, label)
        seconds, hand_seconds = paired_median_times([step, lambda: hand(x, labels)],
                                                    repeats * 5)
        rows.append({"label": label, "version": f"PyTorch {torch.__version__}",
                     "seconds": seconds, "hand": hand_seconds})
    return rows


FRAMEWORK_WORKERS = {"W2": w2_framework_worker, "W7": w7_framework_worker}


WORKLOADS = {   # name -> run(repeats, quick) -> rows
    "W1": lambda repeats, quick: [w1(repeats)],
    "W2": lambda repeats, quick: w2(repeats, 400_000 if quick else 4_000_000),
    "W2b": lambda repeats, quick: w2b(repeats, 1_600_000 if quick else 16_000_000),
    "W3": lambda repeats, quick: w3(repeats),
    "W4": lambda repeats, quick: w4([1000, 10000] if quick else [1000, 10000, 100000]),
    "W5": lambda repeats, quick: w5(repeats, 100_000 if quick else 1_000_000),
    "W6": lambda repeats, quick: w6(repeats, 200 if quick else 1000,
                                    (100,) if quick else (100, 1000)),
    "W7": lambda repeats, quick: w7(repeats),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), metavar="W",
                        help=f"run only these workloads ({', '.join(WORKLOADS)})")
    parser.add_argument("--framework-worker", nargs=4,
                        metavar=("WORKLOAD", "NAME", "N", "REPEATS"),
                        help=argparse.SUPPRESS)   # one framework's W2 or W7 (see w2, w7)
    args = parser.parse_args(argv)
    if args.framework_worker:
        workload, name, n, repeats = args.framework_worker
        print(json.dumps(FRAMEWORK_WORKERS[workload](name, int(n), int(repeats))))
        return
    os.environ.setdefault("SYMGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="symgrad-bench-"))
    repeats = 3 if args.quick else 7
    rows = []
    for name, run in WORKLOADS.items():
        if args.only is None or name in args.only:
            rows += run(repeats, args.quick)
    print_table(rows, ["workload", "symgrad", "hand-written NumPy", "speedup", "note"],
                title=f"symgrad CPU benchmarks (NumPy {np.__version__}, medians; speedup = "
                      f"hand-written / symgrad)")


if __name__ == "__main__":
    main()
