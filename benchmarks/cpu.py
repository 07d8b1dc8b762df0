"""CPU benchmarks: symgrad's NumPy and C backends, JAX and PyTorch against hand-written NumPy.

Run: python benchmarks/cpu.py [--quick] [--only W2 ...]
Prints one table of median times and ratios (speedup = hand-written time / this time: above 1
means faster than the hand-written NumPy code). Each workload is timed for symgrad's
``numpy`` and ``c`` backends in alternation with the hand-written code
(``common.paired_median_times``), so a noisy spell hits all of them, with their grad + compile
time; then, when installed, JAX (``jit``) and PyTorch (``torch.compile``) each in a process of
its own against the same hand-written code (their first call, trace and compile, is noted),
so that no two thread pools compete. Compare contenders through their speedups. Every process
of a run (this one and each framework's) has glibc's malloc set as symgrad's NumPy modules set
it (``row_pool.keep_freed_memory``), so that the hand-written yardstick runs on the same
allocator in each: by default it faults in its arrays' pages anew at every step (W8's
hand-written step: 29.3 against 25.2 ms at 1 thread; PyTorch eager's step is the same under
both).

W1  MLP gradient: x (256, 784), dense 784-512-512-10 tanh, softmax cross-entropy, grads of
    all weights and biases (float32).
W2  grad w.r.t. x of sum(tanh(x*1.5+0.5)*sin(x) + exp(-x*x)*0.3 + log1p(x*x)), 4,000,000 float32.
W2b memory-bound chain of adds, multiplies and a where over 16,000,000 float64.
W3  a 16-element float64 vector through 300 small elementwise ops, gradient.
W4  compile time (grad + compile) of elementwise chains of 1,000 / 10,000 / 100,000 ops on
    numpy; W4b the 10,000-op chain with a distinct constant in every multiply (no shared
    functions); the chains on C, each in a fresh process with a cold cache, with the C
    compiler's CPU time and peak memory (its largest process); the 1,000-op chain on the C
    backend in two fresh processes (the second finds the library the first compiled).
W5  4th derivative of sin at 1,000,000 points vs the closed form (single-threaded np.sin).
W6  tanh RNN (batch 32, hidden 128, input 64) over T = 1,000 steps with ``sg.scan``, loss =
    mean of the final state squared, gradients of all weights: grad + compile time (T = 10 and
    1,000) and run time against hand-written NumPy backpropagation through time; on c also
    with ``flush_denormals=True`` (subnormals as zero, as JAX's CPU code computes them); the
    same program unrolled by a Python loop (T = 100 and 1,000).
W6m the tanh RNN over T = 10,000 steps (hidden 256, batch 32, input 64, float64) under each
    ``checkpoint=`` policy of ``sg.scan`` (None, 100, "sqrt", ("binomial", 8)): gradient time
    and peak memory of one call (tracemalloc, plus the planned peak ``fn.memory``) as ratios to
    storing every step; JAX (``jax.checkpoint`` on the scan body; nested sqrt scans) and
    PyTorch (``checkpoint_sequential``) when installed (see ``w6m.py``).
W7  one Adam training step of the W1 MLP (forward, backward, update: ``sg.optimizer.Adam``
    compiled with the parameters and Adam's moments as the program's state) against the same
    step in hand-written NumPy (W1's backward, then each parameter's moments and value updated
    in place); JAX (``jit`` of the step, parameters and moments donated) and PyTorch
    (``torch.optim.Adam``; eager, and ``torch.compile`` of the forward and of the optimizer
    step) when installed, each timed in a process of its own against the hand-written step.
W3c W3, W6c W6 and W7c W7 called from C: the program exported as a C library (``fn.export_c``,
    linking NumPy's OpenBLAS, as the C backend does) and called by a C driver built against it
    (``c_calls.py``; the median per call by its own clock) against the same compiled program
    called from Python on backend "c"; for W3 also the C backend's kernel time (its C entry
    calls replayed from Python, less ctypes' cost of a call). W6c's scan and its reverse run
    as C loops in the library, as Python loops calling C entries on backend "c". Targets: W3
    from C at most 1.2x the kernel time, W7 from C no slower than from Python. Timed in a
    process of its own on one CPU, with one-thread pools (OpenBLAS's too), as the driver runs.
    Skipped without a C compiler.
W8  one Adam training step of a small CNN (batch 32 of 3x32x32, conv3x3 16 -> relu -> maxpool2
    -> conv3x3 32 -> relu -> maxpool2 -> linear 2048->10 -> softmax cross-entropy, float32;
    ``benchmarks/workloads.py``) on symgrad's backends, PyTorch (eager and ``torch.compile``)
    and JAX (``jit`` of the whole step, Adam written out, the state donated), each against
    the hand-written NumPy step (im2col through a strided view and one matmul per
    convolution), each in a process of its own at 1 and at 2 threads (pinned to that many
    CPUs).
W9  per-example gradients (``sg.vmap`` of ``grad``) of a tanh MLP 784-128-10 with softmax
    cross-entropy, batch 256, float32: every example's gradient of every weight and bias, 103 MB
    in all. Against a hand-written NumPy per-example gradient (an einsum over the batch per
    weight); JAX (``jit(vmap(grad))``) and PyTorch (``torch.func.vmap(grad)``, eager and
    ``torch.compile``) each in a process of its own; the floor, the gradients' bytes over the
    copy bandwidth measured in the same run (the time to copy 103 MB with NumPy, one thread,
    timed in alternation with symgrad and the hand-written code); and the grad + compile
    time of the vmapped program against the plain one (the gradient of the batch's mean loss).
W10 a scan with a small body: ``h_t = tanh(h_{t-1} * w + x_t)`` over T = 10,000 rows of 16
    float64, loss = sum of the final state squared, gradients of ``w`` and ``h0`` (the loop's
    per-step cost, not its arithmetic: C runs the scan and its reverse as loops in C). Against
    the same recurrence and its backward written as NumPy loops, and JAX's ``lax.scan``.
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
import c_calls  # noqa: E402
import w6m as w6m_bench  # noqa: E402
from symgrad import ir_backward  # noqa: E402
from symgrad.backends.host import row_pool  # noqa: E402
from workloads import (ADAM, cnn_adam_program, cnn_by_hand, cnn_data, cnn_init,  # noqa: E402
                       mlp_adam_program, mlp_init, mlp_program, rnn_by_hand, rnn_init,
                       rnn_program, w2_program, w9_init, w9_program, w10_program)
from common import (format_seconds, optional_import, paired_median_times,  # noqa: E402
                    peak_bytes, print_table)


def _row(name, ours, hand, note=""):
    ratio = f"{hand / ours:.2f}x" if ours and hand else "-"
    return {"workload": name, "time": format_seconds(ours),
            "hand-written NumPy": format_seconds(hand), "speedup": ratio, "note": note}


# --- every contender on one workload ---------------------------------------------------------
BACKENDS = ("numpy", "c")          # symgrad's, timed in this process with the hand-written code
FRAMEWORKS = ("JAX", "PyTorch")    # each timed in a process of its own against it
FRAMEWORK_MODULES = {"JAX": "jax", "PyTorch": "torch",   # what a framework's worker imports
                     "symgrad": "symgrad"}
FRAMEWORK_TIMEOUT = 300            # seconds a framework may take (torch.compile can be slow)
# seconds each contender of W1, W7 and W8 (BLAS-bound, multithreaded) runs untimed at each of
# its turns before it is timed (common.paired_median_times), so that every one, the
# hand-written step included, is timed in its own steady state: after a threaded BLAS call,
# OpenBLAS's threads spin for about 0.1 s, taking a CPU from whichever contender runs next
SETTLE = 0.2


def contest(name, label, hand, build, frameworks, repeats, inputs, note="", number=1,
            settle=0.0):
    """Rows of workload ``name``: symgrad on each of :data:`BACKENDS` (``build(backend)`` ->
    ``(callable, grad + compile seconds, note)``) timed in alternation with ``hand``, then each
    framework of ``frameworks`` (``{name: make}``, ``make()`` -> ``(label, version, run)``) in
    a process of its own (:func:`framework_worker`), all as ratios to the hand-written time.
    ``inputs`` rebuild the workload in the worker process; each sample times ``number`` calls
    in a row (the workload's ``"number"`` in the worker), after ``settle`` seconds untimed (the
    workload's ``"settle"``; :func:`common.paired_median_times`)."""
    rows = []
    runs, compiles, notes = [], [], []
    for backend in BACKENDS:
        run, seconds, extra = build(backend)
        runs.append(run)
        compiles.append(seconds)
        notes.append(extra)
    times = paired_median_times([hand] + runs, repeats, number=number, settle=settle)
    hand_time = times[0]
    for backend, seconds, extra, time_ in zip(BACKENDS, compiles, notes, times[1:]):
        rows.append(_row(f"{name} symgrad {backend}: {label}", time_, hand_time,
                         "; ".join(t for t in (f"grad+compile {format_seconds(seconds)}",
                                               extra, note) if t)))
    for framework in FRAMEWORKS:
        if framework not in frameworks:
            continue
        result = _in_own_process(name, framework, inputs, repeats)
        if result is None:
            rows.append({"workload": f"{name} {framework}", "note": "not installed, skipped"})
            continue
        if "error" in result:
            rows.append({"workload": f"{name} {result['label']}", "note": result["error"]})
            continue
        row = _row(f"{name} {result['label']}", result["seconds"], result["hand"],
                   f"{result['version']}; first call (trace + compile) "
                   f"{format_seconds(result['first'])}")
        rows.append(row)
    return rows


def _in_own_process(name, framework, inputs, repeats, threads=None):
    """Run :func:`framework_worker` in a fresh Python; its result, or None when the framework
    is not installed. ``threads``: run it on the first ``threads`` CPUs only, with the thread
    pools of OpenBLAS, OpenMP and XLA sized to match (:func:`_thread_limits`)."""
    env, cpus = {**os.environ, **row_pool.heap_environment(os.environ)}, None
    if threads is not None:
        env.update(_thread_limits(threads))
        cpus = sorted(os.sched_getaffinity(0))[:threads]
    try:
        result = subprocess.run([sys.executable, os.path.abspath(__file__),
                                 "--framework-worker", name, framework, json.dumps(inputs),
                                 str(repeats)], capture_output=True, text=True,
                                timeout=FRAMEWORK_TIMEOUT, env=env,
                                preexec_fn=None if cpus is None else
                                lambda: os.sched_setaffinity(0, cpus))
    except subprocess.TimeoutExpired:
        return {"label": framework, "error": f"gave up after {FRAMEWORK_TIMEOUT} s (compiling)"}
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        return {"label": framework, "error": "failed: " + lines[-1][:120]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _thread_limits(threads) -> dict:
    """Environment variables that size the thread pools of a fresh process to ``threads``
    (symgrad's ``threads`` option defaults to the CPUs the process may use)."""
    limits = {name: str(threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS")}
    if threads == 1:
        limits["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    return limits


def framework_worker(name, framework, inputs, repeats):
    """Print (as JSON) the paired median times of ``framework`` and of the hand-written NumPy
    code of workload ``name`` (after checking the framework's result), and its first call;
    null when the framework is not installed."""
    if optional_import(FRAMEWORK_MODULES[framework]) is None:
        print("null")
        return
    if name in OWN_WORKERS:   # a workload that times its frameworks its own way (W7, W9)
        print(json.dumps(OWN_WORKERS[name](framework, inputs, repeats)))
        return
    workload = FRAMEWORK_WORKLOADS[name](**inputs)
    make = workload["frameworks"].get(framework)
    found = make() if make is not None else None
    if found is None:
        print("null")
        return
    label, version, run = found
    start = time.perf_counter()
    got = run()
    first = time.perf_counter() - start
    workload["check"](got, label)
    seconds, hand = paired_median_times([run, workload["hand"]], repeats,
                                        number=workload.get("number", 1),
                                        settle=workload.get("settle", 0.0))
    print(json.dumps({"label": label, "version": version, "seconds": seconds, "hand": hand,
                      "first": first}))


def _timed_compile(build):
    gc.collect()
    start = time.perf_counter()
    fn = build()
    return fn, time.perf_counter() - start


def _jax():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _torch():
    import torch

    return torch


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


def w1_workload():
    init = mlp_init()
    x, labels = mlp_data()

    def hand():
        return mlp_by_hand(init, x, labels)

    ref_loss, ref_grads = hand()
    assert all(g.dtype == np.float32 for g in ref_grads)  # a fair, all-float32 baseline

    def check(got, label):
        np.testing.assert_allclose(float(got[0]), ref_loss, rtol=1e-4, err_msg=label)

    def jax_run():
        jax, jnp = _jax()

        def loss(params, x, labels):
            h = x
            for i, (w, b) in enumerate(params):
                h = h @ w + b
                if i < len(params) - 1:
                    h = jnp.tanh(h)
            logp = jax.nn.log_softmax(h)
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
        f = jax.jit(jax.value_and_grad(loss))
        args = ([(jnp.asarray(w), jnp.asarray(b)) for w, b in init], jnp.asarray(x),
                jnp.asarray(labels))
        return "JAX jit(value_and_grad)", f"JAX {jax.__version__}", \
            lambda: jax.block_until_ready(f(*args))

    def torch_run():
        torch = _torch()
        params = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
                  for w, b in init]
        flat = [t for pair in params for t in pair]
        xt, lt = torch.tensor(x), torch.tensor(labels)

        @torch.compile
        def loss(x, labels):
            h = x
            for i, (w, b) in enumerate(params):
                h = h @ w + b
                if i < len(params) - 1:
                    h = torch.tanh(h)
            return torch.nn.functional.cross_entropy(h, labels)

        def run():
            value = loss(xt, lt)
            return value, torch.autograd.grad(value, flat)
        return "PyTorch torch.compile", f"PyTorch {torch.__version__}", run
    return {"hand": hand, "check": check, "init": init, "x": x, "labels": labels,
            "frameworks": {"JAX": jax_run, "PyTorch": torch_run}, "settle": SETTLE}


def w1(repeats):
    workload = w1_workload()
    init, x, labels = workload["init"], workload["x"], workload["labels"]

    def build(backend):
        fn, seconds = _timed_compile(lambda: sg.compile(*mlp_program(init), backend=backend))
        workload["check"](fn(x=x, labels=labels), backend)
        return (lambda: fn(x=x, labels=labels)), seconds, f"{fn.stats['fused_groups']} groups"
    return contest("W1", "MLP grad (256x784, 784-512-512-10)", workload["hand"], build,
                   workload["frameworks"], repeats * 5, {}, settle=workload["settle"])


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


def w2_workload(n):
    x = np.random.default_rng(0).uniform(-2, 2, n).astype("float32")
    expected = w2_hand(x)

    def check(got, label):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-3, atol=1e-4,
                                   err_msg=label)

    def jax_run():
        jax, jnp = _jax()
        f = jax.jit(jax.grad(lambda v: jnp.sum(jnp.tanh(v * 1.5 + 0.5) * jnp.sin(v)
                                               + jnp.exp(-v * v) * 0.3 + jnp.log1p(v * v))))
        xj = jnp.asarray(x)
        return "JAX jit(grad)", f"JAX {jax.__version__}", lambda: f(xj).block_until_ready()

    def torch_run():
        torch = _torch()
        xt = torch.tensor(x, requires_grad=True)

        @torch.compile
        def loss(v):
            return (torch.tanh(v * 1.5 + 0.5) * torch.sin(v) + torch.exp(-v * v) * 0.3
                    + torch.log1p(v * v)).sum()
        return "PyTorch torch.compile", f"PyTorch {torch.__version__}", \
            lambda: torch.autograd.grad(loss(xt), xt)[0]
    return {"x": x, "hand": lambda: w2_hand(x), "check": check,
            "frameworks": {"JAX": jax_run, "PyTorch": torch_run}}


def w2(repeats, n):
    workload = w2_workload(n)
    x = workload["x"]

    def build(backend):
        def grad_and_compile():
            prog, _, gx = w2_program(n)
            return sg.compile(prog, [gx], backend=backend)
        fn, seconds = _timed_compile(grad_and_compile)
        workload["check"](fn(x=x)[0], backend)
        peak = peak_bytes(lambda: fn(x=x))
        return (lambda: fn(x=x)), seconds, (f"peak {peak / 2**20:.0f} MiB (input and "
                                            f"gradient: {2 * x.nbytes / 2**20:.0f} MiB)")
    hand_peak = peak_bytes(workload["hand"])
    return contest("W2", f"grad, {n:,} float32", workload["hand"], build,
                   workload["frameworks"], repeats, {"n": n},
                   f"hand-written peak {hand_peak / 2**20:.0f} MiB")


# --- W2b --------------------------------------------------------------------------------------
def w2b_hand(a, b):
    return np.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0 + a * 3.0 + b


def w2b_workload(n):
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal(n), rng.standard_normal(n)
    expected = w2b_hand(av, bv)

    def check(got, label):
        # atol: XLA contracts a * b + 1.0 into one fused multiply-add (rounding once), which
        # moves results near a cancellation by a few ulps of the operands
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12,
                                   err_msg=label)

    def jax_run():
        jax, jnp = _jax()
        jax.config.update("jax_enable_x64", True)
        f = jax.jit(lambda a, b: jnp.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0 + a * 3.0 + b)
        aj, bj = jnp.asarray(av), jnp.asarray(bv)
        return "JAX jit", f"JAX {jax.__version__}", lambda: f(aj, bj).block_until_ready()

    def torch_run():
        torch = _torch()
        f = torch.compile(lambda a, b: torch.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0
                          + a * 3.0 + b)
        at, bt = torch.tensor(av), torch.tensor(bv)
        return "PyTorch torch.compile", f"PyTorch {torch.__version__}", lambda: f(at, bt)
    return {"a": av, "b": bv, "hand": lambda: w2b_hand(av, bv), "check": check,
            "frameworks": {"JAX": jax_run, "PyTorch": torch_run}}


def w2b(repeats, n):
    workload = w2b_workload(n)
    av, bv = workload["a"], workload["b"]

    def build(backend):
        prog = sg.Program()
        with sg.program_guard(prog):
            a = sg.data("a", [n], "float64")
            b = sg.data("b", [n], "float64")
            y = sg.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0 + a * 3.0 + b
        fn, seconds = _timed_compile(lambda: sg.compile(prog, [y], backend=backend))
        workload["check"](fn(a=av, b=bv)[0], backend)
        peak = peak_bytes(lambda: fn(a=av, b=bv))
        return (lambda: fn(a=av, b=bv)), seconds, f"peak {peak / 2**20:.0f} MiB"
    hand_peak = peak_bytes(workload["hand"])
    return contest("W2b", f"memory-bound chain, {n:,} float64", workload["hand"], build,
                   workload["frameworks"], repeats, {"n": n},
                   f"hand-written peak {hand_peak / 2**20:.0f} MiB")


# --- W3 ---------------------------------------------------------------------------------------
W3_OPS = [  # (symgrad op, straight-line forward, straight-line derivative of y w.r.t. its input)
    (lambda v: sg.sin(v), "np.sin({x})", "np.cos({x})"),
    (lambda v: v * 1.01, "{x} * 1.01", "1.01"),
    (lambda v: v + 0.1, "{x} + 0.1", None),
    (lambda v: sg.tanh(v), "np.tanh({x})", "1.0 - {y} * {y}"),
    (lambda v: v * v * 0.5, "{x} * {x} * 0.5", "{x}"),
]
# the same chain for the frameworks: (their module as m, x) -> next value
W3_CALLS = 50   # calls timed in a row per sample (one call of microseconds alone meets cold caches)
W3_FRAMEWORK_OPS = [lambda m, v: m.sin(v), lambda m, v: v * 1.01, lambda m, v: v + 0.1,
                    lambda m, v: m.tanh(v), lambda m, v: v * v * 0.5]


def w3_workload(n_ops=300):
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
    expected = straight(xv)[1]

    def check(got, label):
        np.testing.assert_allclose(np.asarray(got[1]), expected, rtol=1e-9, err_msg=label)

    def chain(m, v):
        for i in range(n_ops):
            v = W3_FRAMEWORK_OPS[i % len(W3_FRAMEWORK_OPS)](m, v)
        return v.sum()

    def jax_run():
        jax, jnp = _jax()
        jax.config.update("jax_enable_x64", True)
        f = jax.jit(jax.value_and_grad(lambda v: chain(jnp, v)))
        xj = jnp.asarray(xv)
        return "JAX jit(value_and_grad)", f"JAX {jax.__version__}", \
            lambda: jax.block_until_ready(f(xj))

    def torch_run():
        torch = _torch()
        xt = torch.tensor(xv, requires_grad=True)
        loss = torch.compile(lambda v: chain(torch, v))

        def run():
            value = loss(xt)
            return value, torch.autograd.grad(value, xt)[0]
        return "PyTorch torch.compile", f"PyTorch {torch.__version__}", run
    return {"x": xv, "hand": lambda: straight(xv), "check": check, "number": W3_CALLS,
            "frameworks": {"JAX": jax_run, "PyTorch": torch_run}}


def w3_program(n_ops=300):
    """W3's program and fetches: the chain of :data:`W3_OPS` over float64[16], its sum and
    the gradient."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [16], "float64")
        y = x
        for i in range(n_ops):
            y = W3_OPS[i % len(W3_OPS)][0](y)
        loss = sg.sum(y)
        gx, = ir_backward.grad(loss, [x])
    return prog, [loss, gx]


def w3(repeats, n_ops=300):
    workload = w3_workload(n_ops)
    xv = workload["x"]

    def build(backend):
        fn, seconds = _timed_compile(lambda: sg.compile(*w3_program(n_ops), backend=backend))
        workload["check"](fn(x=xv), backend)
        return (lambda: fn(x=xv)), seconds, ""
    return contest("W3", f"{n_ops} small ops on float64[16], grad", workload["hand"], build,
                   workload["frameworks"], repeats * 3, {},
                   f"vs straight-line NumPy; {W3_CALLS} calls in a row per sample",
                   number=workload["number"])


# --- W4 ---------------------------------------------------------------------------------------
def _w4_time(n, scale, backend="numpy"):
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
    compiled = sg.compile(prog, [gx], backend=backend)
    return built - start, time.perf_counter() - built, compiled


W4_PROCESS = """
import sys, time
sys.path.insert(0, {folder!r})
start = time.perf_counter()
import cpu
_, seconds, compiled = cpu._w4_time({n}, lambda i: 0.9, "c")
print(time.perf_counter() - start, seconds, compiled.stats["cache_hit"])
"""

# grad + compile of the n-op chain on C in a process of its own, with a cache directory of its
# own (cold: nothing of the program compiled before); the compiler's flag probe, once per cache
# directory and machine, runs before the clock starts, and so does a 10-op chain (imports,
# templates). Prints the seconds, the units and the CPU seconds of the compiler processes.
W4_COLD = """
import json, os, resource, sys, tempfile
sys.path.insert(0, {folder!r})
with tempfile.TemporaryDirectory(prefix="symgrad-w4-") as folder:
    os.environ["SYMGRAD_CACHE_DIR"] = folder
    import cpu
    from symgrad.backends.c_backend import compiler
    compiler.toolchain()
    cpu._w4_time(10, lambda i: 0.9, "c")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, seconds, compiled = cpu._w4_time({n}, lambda i: 0.9, "c")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    print(json.dumps({{"seconds": seconds, "units": compiled.stats["c_units"],
                      "compiler_cpu": cpu_seconds}}))
"""

# A compiler that records its peak memory: the C compiler's own peak resident set (its
# compiler proper, cc1, included), appended to $W4_PEAK_LOG in kB. (The compiling process's
# RUSAGE_CHILDREN cannot tell: a child forked from a large Python process counts the parent's
# pages until it runs the compiler.)
W4_PEAK_COMPILER = """#!{python}
import os, resource, subprocess, sys
done = subprocess.run([{compiler!r}, *sys.argv[1:]])
with open(os.environ["W4_PEAK_LOG"], "a") as log:
    log.write(f"{{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}}\\n")
sys.exit(done.returncode)
"""


def _w4_cold_c(n):
    """(seconds, units, compiler CPU seconds, compiler peak MB) of grad + compile of the n-op
    chain on C, cold (:data:`W4_COLD`); the peak from a second such run through a compiler
    that records it (:data:`W4_PEAK_COMPILER`), not timed."""
    from symgrad.backends.c_backend import compiler
    script = W4_COLD.format(folder=os.path.dirname(os.path.abspath(__file__)), n=n)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    timed = json.loads(done.stdout.splitlines()[-1])
    with tempfile.TemporaryDirectory(prefix="symgrad-w4-cc-") as folder:
        wrapper, log = os.path.join(folder, "cc"), os.path.join(folder, "peaks")
        with open(wrapper, "w", encoding="utf-8") as handle:
            handle.write(W4_PEAK_COMPILER.format(python=sys.executable,
                                                 compiler=compiler.find_compiler()))
        os.chmod(wrapper, 0o755)
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       check=True, env={**os.environ, "CC": wrapper, "W4_PEAK_LOG": log})
        with open(log, encoding="utf-8") as handle:
            peak = max(int(line) for line in handle) / 1024
    return timed["seconds"], timed["units"], timed["compiler_cpu"], peak


def w4(sizes):
    rows = []
    previous = None
    _w4_time(10, lambda i: 0.9)   # warm-up: imports and templates load once per process
    for n in sizes:
        build, total, compiled = _w4_time(n, lambda i: 0.9)
        growth = f"x{total / previous:.1f} per 10x ops" if previous else ""
        previous = total
        rows.append({"workload": f"W4 numpy grad+compile, {n:,}-op chain",
                     "time": format_seconds(total),
                     "note": f"(build {format_seconds(build)}; {compiled.stats['fused_groups']} "
                             f"groups, {compiled.stats['group_functions']} functions) {growth}"})
    # every multiply by its own constant: no two groups are the same code, none share a function
    n = sizes[1]
    build, total, compiled = _w4_time(n, lambda i: 0.9 + i * 1e-6)
    rows.append({"workload": f"W4b as W4, {n:,} ops, distinct constants",
                 "time": format_seconds(total),
                 "note": f"(build {format_seconds(build)}; {compiled.stats['fused_groups']} "
                         f"groups, {compiled.stats['group_functions']} functions)"})
    # the C backend, cold: each size in a process and a cache directory of its own
    for n in sizes:
        seconds, units, compiler_cpu, peak = _w4_cold_c(n)
        rows.append({"workload": f"W4 c grad+compile, {n:,}-op chain, cold cache",
                     "time": format_seconds(seconds),
                     "note": f"{units} translation units; compiler peak {peak:.0f} MB, "
                             f"{compiler_cpu:.1f} s CPU"})
    # the C backend in two fresh processes: the first compiles the library, the second loads it
    script = W4_PROCESS.format(folder=os.path.dirname(os.path.abspath(__file__)), n=sizes[0])
    for attempt in ("compiles its library", "a second process: the library is cached"):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True)
        whole, seconds, hit = done.stdout.split()
        rows.append({"workload": f"W4 c grad+compile, {sizes[0]:,}-op chain",
                     "time": format_seconds(float(seconds)),
                     "note": f"{attempt} (cache hit: {hit}); with imports "
                             f"{format_seconds(float(whole))}"})
    return rows


# --- W5 ---------------------------------------------------------------------------------------
def w5_workload(n):
    xv = np.random.default_rng(0).uniform(-3, 3, n)

    def check(got, label):
        np.testing.assert_allclose(np.asarray(got), np.sin(xv), rtol=1e-9, atol=1e-12,
                                   err_msg=label)

    def jax_run():
        jax, jnp = _jax()
        jax.config.update("jax_enable_x64", True)
        d4 = jax.grad(jax.grad(jax.grad(jax.grad(jnp.sin))))
        f = jax.jit(jax.vmap(d4))
        xj = jnp.asarray(xv)
        return "JAX jit(vmap(grad^4))", f"JAX {jax.__version__}", \
            lambda: f(xj).block_until_ready()

    def torch_run():
        torch = _torch()
        from torch.func import grad, vmap

        f = torch.compile(vmap(grad(grad(grad(grad(torch.sin))))))
        xt = torch.tensor(xv)
        return "PyTorch torch.compile(vmap(grad^4))", f"PyTorch {torch.__version__}", \
            lambda: f(xt)
    return {"x": xv, "hand": lambda: np.sin(xv), "check": check,
            "frameworks": {"JAX": jax_run, "PyTorch": torch_run}}


def w5(repeats, n):
    workload = w5_workload(n)
    xv = workload["x"]

    def build(backend):
        def compile_d4():
            prog = sg.Program()
            with sg.program_guard(prog):
                x = sg.data("x", [n], "float64")
                g = sg.sin(x)
                for _ in range(4):
                    g, = ir_backward.grad(sg.sum(g), [x], create_graph=True)
            return sg.compile(prog, [g], backend=backend)
        fn, seconds = _timed_compile(compile_d4)
        workload["check"](fn(x=xv)[0], backend)
        names = [o.name for op in fn.program.ops
                 for o in (op.blocks[0].ops if op.blocks else [op])]
        return (lambda: fn(x=xv)), seconds, f"ops after passes: {', '.join(names[1:]) or '-'}"
    return contest("W5", f"4th derivative of sin, {n:,} points", workload["hand"], build,
                   workload["frameworks"], repeats, {"n": n},
                   "vs single-threaded np.sin (the closed form)")


# --- W6 ---------------------------------------------------------------------------------------
def _w6_compile(steps, init, unrolled=False, backend="numpy", **options):
    """(compiled function, grad + compile seconds) of the W6 program over ``steps``."""
    return _timed_compile(lambda: sg.compile(*rnn_program(steps, init, unrolled),
                                             backend=backend,
                                             options=sg.CompileOptions(**options)))


def w6_workload(steps):
    init = rnn_init()
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((steps, 32, 64)).astype("float32")
    h0 = np.zeros((32, 128), "float32")
    want = rnn_by_hand(xs, h0, *init)

    def check(got, label):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=2e-3, atol=1e-6, err_msg=label)

    def jax_run():
        jax, jnp = _jax()

        def loss(params, xs, h0):
            W, U, b = params
            h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h @ W + x @ U + b), None), h0, xs)
            return jnp.mean(h * h)
        f = jax.jit(jax.value_and_grad(loss))
        args = (tuple(map(jnp.asarray, init)), jnp.asarray(xs), jnp.asarray(h0))

        def run():
            value, grads = jax.block_until_ready(f(*args))
            return [value, *grads]
        return "JAX jit(value_and_grad(lax.scan))", f"JAX {jax.__version__}", run

    def torch_run():
        torch = _torch()
        W, U, b = (torch.tensor(a, requires_grad=True) for a in init)
        xt, ht = torch.tensor(xs), torch.tensor(h0)
        cell = torch.compile(lambda h, x: torch.tanh(h @ W + x @ U + b))

        def run():
            h = ht
            for t in range(steps):
                h = cell(h, xt[t])
            value = torch.mean(h * h)
            return [value.detach(), *torch.autograd.grad(value, [W, U, b])]
        return "PyTorch torch.compile (cell) + autograd", f"PyTorch {torch.__version__}", run
    return {"init": init, "xs": xs, "h0": h0, "hand": lambda: rnn_by_hand(xs, h0, *init),
            "check": check, "frameworks": {"JAX": jax_run, "PyTorch": torch_run}}


def w6(repeats, steps=1000, unrolled_steps=(100, 1000), unrolled_budget=60.0):
    workload = w6_workload(steps)
    init, xs, h0 = workload["init"], workload["xs"], workload["h0"]
    _w6_compile(2, init)    # warm-up: imports and templates load once per process

    def build(backend):
        _, compile_short = _w6_compile(10, init, backend=backend)
        fn, seconds = _w6_compile(steps, init, backend=backend)
        workload["check"](fn(xs=xs, h0=h0), backend)
        peak = peak_bytes(lambda: fn(xs=xs, h0=h0))
        residual = 32 * 128 * 4 * steps
        return (lambda: fn(xs=xs, h0=h0)), seconds, (
            f"T=10: grad+compile {format_seconds(compile_short)}; peak {peak / 2**20:.0f} MiB, "
            f"T x batch x hidden = {residual / 2**20:.0f} MiB")
    rows = contest("W6", f"tanh RNN scan, T={steps:,}, grad", workload["hand"], build,
                   workload["frameworks"], repeats, {"steps": steps})
    if "c" in BACKENDS:
        # like for like with JAX, whose CPU code flushes subnormals (docs/codegen.md)
        fn, seconds = _w6_compile(steps, init, backend="c", flush_denormals=True)
        workload["check"](fn(xs=xs, h0=h0), "c, flush_denormals=True")
        run, hand = paired_median_times([lambda: fn(xs=xs, h0=h0), workload["hand"]], repeats)
        rows.append(_row(f"W6 symgrad c, flush_denormals=True: tanh RNN scan, T={steps:,}, "
                         f"grad", run, hand, f"grad+compile {format_seconds(seconds)}"))
    for n in unrolled_steps:
        unrolled, seconds = _w6_compile(n, init, unrolled=True)
        xs_n = xs[:n]
        run, hand = paired_median_times([lambda: unrolled(xs=xs_n, h0=h0),
                                         lambda: rnn_by_hand(xs_n, h0, *init)], repeats)
        note = (f"grad+compile {format_seconds(seconds)}; "
                f"{unrolled.stats['ops_before']:,} ops")
        rows.append(_row(f"W6 unrolled (numpy), T={n:,}", run, hand, note))
        if seconds > unrolled_budget:
            break
    return rows


# --- W6m --------------------------------------------------------------------------------------
def w6m(repeats, steps=10_000, backends=BACKENDS):
    """Rows of W6m (see ``w6m.py``): each policy on each backend; the first call of each
    (peak memory under tracemalloc, result checked) warms it up, then ``repeats`` rounds time
    the policies in alternation (``w6m.alternate``: wall and CPU time, which a loaded machine
    disturbs less); ratios to the store-all policy of the same backend. Each row is also
    printed as soon as it is measured (a full run takes many minutes)."""
    data = w6m_bench.init(steps)
    rows, reference = [], None
    for backend in backends:
        built, expected = [], None
        for policy in w6m_bench.POLICIES:
            fn, seconds = _timed_compile(lambda: sg.compile(*w6m_bench.program(steps, policy),
                                                            backend=backend))
            got = []
            peak = peak_bytes(lambda: got.extend(fn(**data)))
            expected = expected or got
            reference = reference or got
            for a, b, c in zip(got, expected, reference):
                assert np.array_equal(a, b), (backend, policy)     # bit for bit
                np.testing.assert_allclose(a, c, rtol=1e-9, atol=0)
            built.append((policy, fn, seconds, peak, fn.memory()))
            print(f"W6m {backend} {w6m_bench.policy_name(policy)}: peak {peak / 2**20:.1f} MiB",
                  flush=True)
        times = w6m_bench.alternate([lambda fn=fn: fn(**data) for _, fn, *_ in built], repeats)
        (_, _, _, base_peak, base_planned), (base_wall, base_cpu) = built[0], times[0]
        for (policy, fn, seconds, peak, planned), (wall, cpu) in zip(built, times):
            rows.append({
                "workload": f"W6m symgrad {backend}: checkpoint="
                            f"{w6m_bench.policy_name(policy)}",
                "time": format_seconds(wall),
                "note": f"{wall / base_wall:.2f}x store-all time (CPU time {cpu / base_cpu:.2f}x); "
                        f"peak {peak / 2**20:.1f} MiB (1/{base_peak / peak:.0f} of store-all); "
                        f"planned {planned / 2**20:.1f} MiB (1/{base_planned / planned:.0f}); "
                        f"grad+compile {format_seconds(seconds)}"})
            print(rows[-1], flush=True)
    expected = reference
    for framework, policies in w6m_bench.FRAMEWORK_POLICIES.items():
        results = []
        for policy in policies:
            result = _in_own_process("W6m", framework, {"steps": steps, "policy": policy},
                                     repeats)
            if result is None:
                rows.append({"workload": f"W6m {framework}", "note": "not installed, skipped"})
                break
            if "error" in result:
                rows.append({"workload": f"W6m {framework} {policy}", "note": result["error"]})
                continue
            np.testing.assert_allclose(result["loss"], float(expected[0]), rtol=1e-9)
            for g, want in zip(result["grads"], expected[1:]):
                np.testing.assert_allclose(g, want.ravel()[:8], rtol=1e-7, atol=1e-12)
            results.append((policy, result))
            print(framework, policy, result, flush=True)
        for policy, result in results:
            base = results[0][1]
            rows.append({
                "workload": f"W6m {framework}: {policy}", "time": format_seconds(
                    result["seconds"]),
                "note": f"{result['seconds'] / base['seconds']:.2f}x its store-all time (CPU "
                        f"time {result['cpu'] / base['cpu']:.2f}x); peak "
                        f"resident growth {result['peak_growth'] / 2**20:.1f} MiB; "
                        f"{result['version']}; first call {format_seconds(result['first'])}"})
    return rows


# --- W10 --------------------------------------------------------------------------------------
def w10_workload(steps, width=16):
    rng = np.random.default_rng(3)
    feeds = {"xs": rng.standard_normal((steps, width)), "h0": rng.standard_normal(width),
             "w": rng.standard_normal(width) * 0.5}
    xs, h0, w = feeds["xs"], feeds["h0"], feeds["w"]

    def hand():
        hs = np.empty((steps + 1, width))
        hs[0] = h0
        for t in range(steps):
            hs[t + 1] = np.tanh(hs[t] * w + xs[t])
        g, gw = 2 * hs[-1], np.zeros(width)
        for t in range(steps - 1, -1, -1):
            gz = g * (1 - hs[t + 1] ** 2)
            gw += gz * hs[t]
            g = gz * w
        return np.sum(hs[-1] ** 2), gw, g

    want = hand()

    def check(got, label):
        for g, e in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-9, atol=1e-12, err_msg=label)

    def jax_run():
        jax, jnp = _jax()
        jax.config.update("jax_enable_x64", True)

        def loss(w, h0, xs):
            h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h * w + x), None), h0, xs)
            return jnp.sum(h * h)
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        args = [jnp.asarray(a) for a in (w, h0, xs)]

        def run():
            (value, (gw, gh)) = f(*args)
            return value.block_until_ready(), gw, gh
        return "JAX jit(value_and_grad(lax.scan))", f"JAX {jax.__version__}", run
    return {"feeds": feeds, "hand": hand, "check": check, "frameworks": {"JAX": jax_run}}


def w10(repeats, steps):
    workload = w10_workload(steps)
    feeds = workload["feeds"]

    def build(backend):
        fn, seconds = _timed_compile(lambda: sg.compile(*w10_program(), backend=backend))
        workload["check"](fn(**feeds), backend)
        return (lambda: fn(**feeds)), seconds, ""
    return contest("W10", f"small-body scan, T={steps:,}, grad", workload["hand"], build,
                   workload["frameworks"], repeats, {"steps": steps})


FRAMEWORK_WORKLOADS = {"W1": w1_workload, "W2": w2_workload, "W2b": w2b_workload,
                       "W3": w3_workload, "W5": w5_workload, "W6": w6_workload,
                       "W10": w10_workload}


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


def _check_w7(losses, params, hand_losses, hand_params, label, mean=1e-6):
    """Steps from the same init give the same losses and parameters (Adam's update of an
    element whose gradient is about 0 is about +-lr either way in float32: the parameters
    agree on average, within ``mean``, and each within the steps' reach)."""
    np.testing.assert_allclose(losses, hand_losses, rtol=1e-4, err_msg=label)
    reach = 2 * ADAM["learning_rate"] * len(losses)
    for got, want in zip(params, hand_params):
        difference = np.abs(np.asarray(got, np.float64) - want)
        assert difference.max() <= reach and difference.mean() < mean, label


def w7(repeats):
    """symgrad (each of :data:`BACKENDS`) against hand-written NumPy, timed in alternation;
    then PyTorch (eager, and compiled) against hand-written NumPy in a process of its own."""
    init = mlp_init()
    x, labels = mlp_data()
    names = [f"{kind}{i}" for i in range(len(init)) for kind in "wb"]
    steps, notes = [], []
    for backend in BACKENDS:
        fn, seconds = _timed_compile(lambda: sg.compile(*mlp_adam_program(init),
                                                        backend=backend))
        hand, hand_params = w7_by_hand(init)
        losses = [float(fn(x=x, labels=labels)[0]) for _ in range(3)]
        _check_w7(losses, [fn.state[name] for name in names],
                  [hand(x, labels) for _ in range(3)], hand_params, f"symgrad {backend}")
        steps.append(lambda fn=fn: fn(x=x, labels=labels))
        notes.append(f"grad+compile {format_seconds(seconds)}; {fn.stats['fused_groups']} "
                     f"fused groups; the update in the program")
    hand, _ = w7_by_hand(init)
    times = paired_median_times([lambda: hand(x, labels)] + steps, repeats * 5,
                                settle=SETTLE)
    rows = [_row(f"W7 symgrad {backend}: Adam training step of W1", ours, times[0], note)
            for backend, ours, note in zip(BACKENDS, times[1:], notes)]
    for framework in FRAMEWORKS:
        results = _in_own_process("W7", framework, {}, repeats)
        if results is None:
            rows.append({"workload": f"W7 {framework}", "note": "not installed, skipped"})
        elif "error" in results:    # the worker failed or timed out: one dict, not a list
            rows.append({"workload": f"W7 {framework}", "note": results["error"]})
            results = ()
        for result in results or ():
            row = _row(f"W7 {result['label']}", result["seconds"], result["hand"])
            relative = ", ".join(
                f"symgrad {backend}'s time is "
                f"{(ours / times[0]) / (result['seconds'] / result['hand']):.2f}x this"
                for backend, ours in zip(BACKENDS, times[1:]))
            row["note"] = f"{result['version']}; {relative}"
            rows.append(row)
    return rows


def w7_framework_worker(framework, inputs, repeats):
    """W7 on ``framework`` (``framework_worker`` runs it only where it is installed): each
    variant checked against and timed in alternation with the hand-written step."""
    return W7_FRAMEWORKS[framework](repeats)


def w7_jax(repeats):
    """JAX's W7 step: ``jit`` of the forward, ``value_and_grad`` and Adam with PyTorch's
    formulas (as :class:`AdamByHand`), the parameters and moments donated to the call so
    that XLA updates their buffers in place."""
    jax, jnp = _jax()
    init = mlp_init()
    x, labels = mlp_data()
    lr, beta1, beta2, eps = (ADAM[k] for k in ("learning_rate", "beta1", "beta2", "epsilon"))

    def loss_of(params, x, labels):
        h = x
        for i in range(len(init)):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < len(init) - 1:
                h = jnp.tanh(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def step(params, m, v, t, x, labels):
        loss, grads = jax.value_and_grad(loss_of)(params, x, labels)
        t = t + 1
        step_size = lr / (1 - beta1 ** t)
        root = jnp.sqrt(1 - beta2 ** t)
        m = [a + (g - a) * (1 - beta1) for a, g in zip(m, grads)]
        v = [a * beta2 + g * g * (1 - beta2) for a, g in zip(v, grads)]
        params = [p - step_size * (a / (jnp.sqrt(b) / root + eps))
                  for p, a, b in zip(params, m, v)]
        return loss, params, m, v, t

    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    xj, yj = jnp.asarray(x), jnp.asarray(labels)
    state = [[jnp.asarray(a) for pair in init for a in pair],
             [jnp.zeros_like(jnp.asarray(a)) for pair in init for a in pair],
             [jnp.zeros_like(jnp.asarray(a)) for pair in init for a in pair],
             jnp.asarray(0, jnp.float32)]

    def run():
        loss, *state[:] = jitted(*state, xj, yj)
        return jax.block_until_ready(loss)

    hand, hand_params = w7_by_hand(init)
    losses = [float(run()) for _ in range(3)]
    _check_w7(losses, [np.asarray(a) for a in state[0]], [hand(x, labels) for _ in range(3)],
              hand_params, "JAX")
    seconds, hand_seconds = paired_median_times([run, lambda: hand(x, labels)], repeats * 5,
                                                settle=SETTLE)
    return [{"label": "JAX jit (donated state)", "version": f"JAX {jax.__version__}",
             "seconds": seconds, "hand": hand_seconds}]


def w7_torch(repeats):
    """PyTorch's W7 step (``torch.optim.Adam``), eager and compiled (``torch.compile`` of the
    forward and of the optimizer step)."""
    torch = _torch()
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
                                                    repeats * 5, settle=SETTLE)
        rows.append({"label": label, "version": f"PyTorch {torch.__version__}",
                     "seconds": seconds, "hand": hand_seconds})
    return rows


# --- W8 ---------------------------------------------------------------------------------------
W8_THREADS = (1, 2)
W8_CONTENDERS = ("symgrad", "PyTorch", "JAX")   # each in a process of its own per thread count
# the mean parameter difference allowed after three steps: a convolution's sums round in another
# order on each contender, and the few weights whose gradient is about 0 then move by +-lr
W8_MEAN = 1e-4


def w8_by_hand(init):
    """W8's training step in hand-written NumPy over copies of ``init``: ``(step(x, labels)
    -> loss, the parameters in ``init``'s order)``."""
    names = list(init)
    params = [init[k].copy() for k in names]
    adam = AdamByHand(params, **ADAM)

    def step(x, labels):
        loss, grads = cnn_by_hand(dict(zip(names, params)), x, labels)
        adam.step(params, [grads[k] for k in names])
        return loss
    return step, params


def w8(repeats):
    """Each contender of :data:`W8_CONTENDERS` at each of :data:`W8_THREADS` in a process of
    its own (its CPUs and thread pools limited to that many), timed in alternation with the
    hand-written step there, each in its steady state (:data:`SETTLE`); the table gives each time and its speedup over the hand-written
    step divided by PyTorch eager's at the same thread count (each process times its own
    hand-written step: compare through speedups)."""
    rows = []
    for threads in W8_THREADS:
        found = []
        for contender in W8_CONTENDERS:
            result = _in_own_process("W8", contender, {}, repeats, threads=threads)
            if result is None:
                rows.append({"workload": f"W8 {contender}, {threads} thread(s)",
                             "note": "not installed, skipped"})
            elif "error" in result:
                rows.append({"workload": f"W8 {result['label']}, {threads} thread(s)",
                             "note": result["error"]})
            else:
                found += result
        eager = next((r["hand"] / r["seconds"] for r in found
                      if r["label"] == "PyTorch (eager)"), None)
        for result in found:
            row = _row(f"W8 {result['label']}, {threads} thread(s)", result["seconds"],
                       result["hand"])
            speedup = result["hand"] / result["seconds"]
            versus = f"; {speedup / eager:.2f}x PyTorch eager's speedup" if eager else ""
            row["note"] = f"{result['version']}{versus}{result.get('note', '')}"
            rows.append(row)
    return rows


def _w8_symgrad(init, x, labels, repeats):
    rows = []
    steps, notes = [], []
    for backend in BACKENDS:
        fn, seconds = _timed_compile(lambda: sg.compile(*cnn_adam_program(init),
                                                        backend=backend))
        hand, hand_params = w8_by_hand(init)
        losses = [float(fn(x=x, labels=labels)[0]) for _ in range(3)]
        _check_w7(losses, [fn.state[name] for name in init],
                  [hand(x, labels) for _ in range(3)], hand_params, f"symgrad {backend}",
                  mean=W8_MEAN)
        steps.append(lambda fn=fn: fn(x=x, labels=labels))
        notes.append(f"; grad+compile {format_seconds(seconds)}")
    hand, _ = w8_by_hand(init)
    times = paired_median_times([lambda: hand(x, labels)] + steps, repeats * 5,
                                settle=SETTLE)
    for backend, seconds, note in zip(BACKENDS, times[1:], notes):
        rows.append({"label": f"symgrad {backend}", "version": f"symgrad {sg.__version__}",
                     "seconds": seconds, "hand": times[0], "note": note})
    return rows


def _w8_torch(init, x, labels, repeats):
    torch = _torch()
    functional = torch.nn.functional
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
    rows = []
    for label, compiled in (("PyTorch (eager)", False), ("PyTorch (torch.compile)", True)):
        p = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
        optimizer = torch.optim.Adam(list(p.values()), lr=ADAM["learning_rate"],
                                     betas=(ADAM["beta1"], ADAM["beta2"]), eps=ADAM["epsilon"])

        def loss_of():
            h = functional.max_pool2d(functional.relu(
                functional.conv2d(xt, p["w1"], p["b1"], padding=1)), 2)
            h = functional.max_pool2d(functional.relu(
                functional.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
            return functional.cross_entropy(h.reshape(-1, 2048) @ p["wd"] + p["bd"], yt)

        forward = torch.compile(loss_of) if compiled else loss_of
        update = torch.compile(optimizer.step) if compiled else optimizer.step

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = forward()
            loss.backward()
            update()
            return loss

        hand, hand_params = w8_by_hand(init)
        losses = [float(step()) for _ in range(3)]
        _check_w7(losses, [t.detach().numpy() for t in p.values()],
                  [hand(x, labels) for _ in range(3)], hand_params, label,
                  mean=W8_MEAN)
        seconds, hand_seconds = paired_median_times([step, lambda: hand(x, labels)],
                                                    repeats * 5, settle=SETTLE)
        rows.append({"label": label, "version": f"PyTorch {torch.__version__}",
                     "seconds": seconds, "hand": hand_seconds})
    return rows


def _w8_jax(init, x, labels, repeats):
    jax, jnp = _jax()
    lax = jax.lax
    names = list(init)

    def conv(h, w, b):
        out = lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)),
                                       dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return out + b[None, :, None, None]

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_of(p, x, labels):
        h = pool(jax.nn.relu(conv(x, p["w1"], p["b1"])))
        h = pool(jax.nn.relu(conv(h, p["w2"], p["b2"])))
        logp = jax.nn.log_softmax(h.reshape(-1, 2048) @ p["wd"] + p["bd"])
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    beta1, beta2, lr, eps = ADAM["beta1"], ADAM["beta2"], ADAM["learning_rate"], ADAM["epsilon"]

    def step(state, x, labels):   # Adam with PyTorch's formulas
        p, m, v, t = state
        loss, g = jax.value_and_grad(loss_of)(p, x, labels)
        t = t + 1
        m = {k: m[k] + (g[k] - m[k]) * (1 - beta1) for k in names}
        v = {k: v[k] * beta2 + g[k] * g[k] * (1 - beta2) for k in names}
        size = lr / (1 - beta1 ** t)
        root = jnp.sqrt(1 - beta2 ** t)
        p = {k: p[k] - size * (m[k] / (jnp.sqrt(v[k]) / root + eps)) for k in names}
        return loss, (p, m, v, t)

    jitted = jax.jit(step, donate_argnums=0)
    def zeros():
        return {k: jnp.zeros(a.shape, a.dtype) for k, a in init.items()}

    state = [({k: jnp.asarray(a) for k, a in init.items()}, zeros(), zeros(),
              jnp.asarray(0.0, jnp.float32))]
    xj, yj = jnp.asarray(x), jnp.asarray(labels)

    def run():
        loss, state[0] = jitted(state[0], xj, yj)
        return jax.block_until_ready(loss)

    hand, hand_params = w8_by_hand(init)
    losses = [float(run()) for _ in range(3)]
    _check_w7(losses, [np.asarray(state[0][0][k]) for k in names],
              [hand(x, labels) for _ in range(3)], hand_params, "JAX",
              mean=W8_MEAN)
    seconds, hand_seconds = paired_median_times([run, lambda: hand(x, labels)], repeats * 5,
                                                settle=SETTLE)
    return [{"label": "JAX jit", "version": f"JAX {jax.__version__}", "seconds": seconds,
             "hand": hand_seconds}]


def w8_framework_worker(framework, inputs, repeats):
    """One W8 contender's rows (``framework`` is ``"symgrad"``, ``"PyTorch"`` or ``"JAX"``),
    each checked over three steps against and timed in alternation with the hand-written
    step."""
    init = cnn_init()
    x, labels = cnn_data()
    run = {"symgrad": _w8_symgrad, "PyTorch": _w8_torch, "JAX": _w8_jax}[framework]
    return run(init, x, labels, repeats)




# --- W9 ---------------------------------------------------------------------------------------
W9_BATCH = 256


def w9_by_hand(init, x, labels):
    """Per-example gradients of W9's loss in hand-written NumPy: the backward of the whole
    batch, each weight's gradient an outer product per example (an einsum over the batch).
    Returns ``[gw0, gb0, gw1, gb1]``, each with a leading batch axis."""
    (w0, b0), (w1, b1) = init
    h = np.tanh(x @ w0 + b0)
    z = h @ w1 + b1
    e = np.exp(z - z.max(axis=1, keepdims=True))
    g = e / e.sum(axis=1, keepdims=True)
    g[np.arange(len(labels)), labels] -= 1
    dh = (g @ w1.T) * (1 - h * h)
    return [np.einsum("bi,bj->bij", x, dh), dh, np.einsum("bi,bj->bij", h, g), g]


def w9_data():
    rng = np.random.default_rng(9)
    return (rng.standard_normal((W9_BATCH, 784)).astype("float32"),
            rng.integers(0, 10, W9_BATCH))


def _check_w9(got, want, label):
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-5, err_msg=label)


def w9_compile_seconds(init, backend, repeats=5):
    """Median seconds of W9's plain program and of its vmapped one, built and compiled in
    alternation, each compiled into an empty cache directory (C: gcc runs every time), after a
    warm-up (imports and templates load once per process): ``{per_example: (build with grad
    and vmap, compile)}``."""
    for per_example in (False, True):
        sg.compile(*w9_program(init, 8, per_example), backend=backend)
    seconds = {False: [], True: []}
    for _ in range(repeats):
        for per_example in (False, True):
            gc.collect()
            start = time.perf_counter()
            built = w9_program(init, W9_BATCH, per_example)
            middle = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="symgrad-w9-") as cache:
                sg.compile(*built, backend=backend, cache_dir=cache)
                seconds[per_example].append((middle - start, time.perf_counter() - middle))
    return {key: tuple(np.median(np.array(value), axis=0)) for key, value in seconds.items()}


def w9(repeats):
    """symgrad (each of :data:`BACKENDS`) against hand-written NumPy, timed in alternation, with
    its compile time against the plain program's; JAX and PyTorch in processes of their own;
    then the floor."""
    init = w9_init()
    x, labels = w9_data()
    want = w9_by_hand(init, x, labels)
    nbytes = sum(g.nbytes for g in want)
    runs, notes = [], []
    for backend in BACKENDS:
        seconds = w9_compile_seconds(init, backend)
        (plain_build, plain_compile), (build, compile_) = seconds[False], seconds[True]
        fn = sg.compile(*w9_program(init, W9_BATCH), backend=backend)
        _check_w9(fn(x=x, labels=labels), want, f"symgrad {backend}")
        runs.append(lambda fn=fn: fn(x=x, labels=labels))
        notes.append(f"compile {format_seconds(compile_)}, {compile_ / plain_compile:.2f}x the "
                     f"plain program's; build (grad, vmap) + compile "
                     f"{format_seconds(build + compile_)}, "
                     f"{(build + compile_) / (plain_build + plain_compile):.2f}x; "
                     f"{fn.stats['ops_before']} ops")
    src = np.ones(nbytes // 4, "float32")      # the floor: a copy of the gradients' bytes,
    dst = np.empty_like(src)                    # timed in alternation with the others
    times = paired_median_times([lambda: w9_by_hand(init, x, labels)] + runs +
                                [lambda: np.copyto(dst, src)], repeats * 3)
    hand, floor = times[0], times[-1]
    times = times[:-1]
    rows = [_row(f"W9 symgrad {backend}: per-example grads, MLP 784-128-10, batch 256", ours,
                 hand, note) for backend, ours, note in zip(BACKENDS, times[1:], notes)]
    for framework in FRAMEWORKS:
        results = _in_own_process("W9", framework, {}, repeats)
        if results is None:
            rows.append({"workload": f"W9 {framework}", "note": "not installed, skipped"})
            continue
        if "error" in results:    # the worker failed or timed out: one dict, not a list
            rows.append({"workload": f"W9 {framework}", "note": results["error"]})
            continue
        for result in results:
            row = _row(f"W9 {result['label']}", result["seconds"], result["hand"])
            relative = ", ".join(
                f"symgrad {backend} {(result['seconds'] / result['hand']) / (ours / hand):.2f}x "
                f"faster" for backend, ours in zip(BACKENDS, times[1:]))
            row["note"] = f"{result['version']}; first call {format_seconds(result['first'])}; " \
                          f"{relative}"
            rows.append(row)
    rows.append(_row("W9 floor: gradients' bytes / copy bandwidth", floor, hand,
                     f"{nbytes / 1e6:.0f} MB at {nbytes / floor / 1e9:.1f} GB/s; " + ", ".join(
                         f"symgrad {backend} {ours / floor:.2f}x the floor"
                         for backend, ours in zip(BACKENDS, times[1:]))))
    return rows


def w9_framework_worker(framework, inputs, repeats):
    """JAX's ``jit(vmap(grad))``, or PyTorch's ``torch.func.vmap(grad)`` eager and under
    ``torch.compile``, each checked against and timed in alternation with the hand-written
    per-example gradients."""
    init = w9_init()
    x, labels = w9_data()
    want = w9_by_hand(init, x, labels)
    contenders = []
    if framework == "JAX":
        jax, jnp = _jax()

        def jax_loss(params, xi, li):
            h = jnp.tanh(xi @ params[0] + params[1])
            z = h @ params[2] + params[3]
            return -jax.nn.log_softmax(z)[li]
        f = jax.jit(jax.vmap(jax.grad(jax_loss), in_axes=(None, 0, 0)))
        args = ([jnp.asarray(a) for pair in init for a in pair], jnp.asarray(x),
                jnp.asarray(labels))
        contenders.append(("JAX jit(vmap(grad))", f"JAX {jax.__version__}",
                           lambda: jax.block_until_ready(f(*args))))
    else:
        torch = _torch()
        from torch.func import grad, vmap

        def torch_loss(params, xi, li):
            h = torch.tanh(xi @ params[0] + params[1])
            z = h @ params[2] + params[3]
            return torch.nn.functional.cross_entropy(z[None], li[None])
        params = [torch.from_numpy(a) for pair in init for a in pair]
        xt, lt = torch.from_numpy(x), torch.from_numpy(labels)
        per_example = vmap(grad(torch_loss), in_dims=(None, 0, 0))
        compiled = torch.compile(per_example)
        version = f"PyTorch {torch.__version__}"
        contenders.append(("PyTorch torch.func.vmap(grad) (eager)", version,
                           lambda: per_example(params, xt, lt)))
        contenders.append(("PyTorch torch.func.vmap(grad) (torch.compile)", version,
                           lambda: compiled(params, xt, lt)))
    rows = []
    for label, version, run in contenders:
        start = time.perf_counter()
        got = run()
        first = time.perf_counter() - start
        _check_w9([np.asarray(g) for g in got], want, label)
        seconds, hand = paired_median_times([run, lambda: w9_by_hand(init, x, labels)],
                                            repeats * 3)
        rows.append({"label": label, "version": version, "seconds": seconds, "hand": hand,
                     "first": first})
    return rows


# --- W3c, W7c: the program called from C --------------------------------------------------------
C_ROUNDS = 3    # runs of the C driver, each after a round of the Python timings
C_THREADS = 1   # CPUs (and thread pools) of the process timing W3c and W7c, and of its driver


def from_c_rows(name, repeats, inputs=None):
    """The rows of W3c, W6c or W7c (``OWN_WORKERS``; ``inputs``: its arguments), timed in a
    process of its own on
    :data:`C_THREADS` CPU with thread pools to match, as its C driver is: a GEMM split
    between two threads on a loaded 2-core machine took 10x longer at times, in Python and in
    C alike, which says nothing of the calls."""
    rows = _in_own_process(name, "symgrad", inputs or {}, repeats, threads=C_THREADS)
    if isinstance(rows, dict):   # the worker failed
        return [{"workload": name, "note": rows["error"]}]
    return rows


def from_c(name, fn, feeds, check, contenders, repeats, number, samples):
    """The medians of ``contenders`` (``[(label, callable)]``, timed in this process in
    alternation, ``number`` calls per sample) and of ``fn`` exported as a C library and called
    from a C driver (``c_calls.export_driver``: ``samples`` of ``number`` calls, its own clock),
    over :data:`C_ROUNDS` rounds (each contender's median and the driver's median, then the
    median over the rounds): ``{label: seconds, "C": seconds}``, or ``{"skipped": why}``
    without a C compiler or where the export is refused. ``check(outputs, label)`` checks the
    driver's first call's outputs."""
    with tempfile.TemporaryDirectory(prefix=f"symgrad-{name}-") as folder:
        try:
            driver = c_calls.export_driver(fn, folder, name, feeds)
        except sg.SymgradError as exc:   # the export refused, or no CBLAS to link
            return {"skipped": f"skipped: {type(exc).__name__}: {exc}"}
        rounds = []
        for round_ in range(C_ROUNDS):
            times = paired_median_times([run for _, run in contenders], repeats,
                                        number=number)
            seconds, outputs = driver.run(samples, number)
            if round_ == 0:
                check(outputs, f"{name} from C")
            rounds.append(times + [seconds])
    medians = [float(np.median(column)) for column in zip(*rounds)]
    return dict(zip([label for label, _ in contenders] + ["C"], medians))


def _skipped_row(name, times):
    return [{"workload": name, "note": times["skipped"]}] if "skipped" in times else None


def _no_c_compiler(name):
    """A row saying why ``name`` is skipped when there is no C compiler, else None."""
    from symgrad.backends.c_backend.compiler import CCompilerNotFoundError, toolchain
    try:
        toolchain()
    except CCompilerNotFoundError as exc:
        return [{"workload": name, "note": f"skipped: {exc}"}]
    return None


def w3c_rows(repeats, n_ops=300):
    """W3 on backend "c" called from Python (``fn(x=x)``), its C entry calls replayed from
    Python less ctypes' cost of a call (the C backend's kernel time), and the program exported
    as a C library called from C."""
    missing = _no_c_compiler("W3c")
    if missing:
        return missing
    workload = w3_workload(n_ops)
    xv = workload["x"]
    fn = sg.compile(*w3_program(n_ops), backend="c")
    want = fn(x=xv)
    workload["check"](want, "c")

    def check(got, label):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=label)   # the same C code, the same x
    calls = c_calls.entry_calls(fn, {"x": xv})
    contenders = [("hand", workload["hand"]), ("python", lambda: fn(x=xv)),
                  ("entries", c_calls.replay(calls)), ("null", c_calls.null_call())]
    times = from_c("w3", fn, {"x": xv}, check, contenders, repeats * 3, W3_CALLS * 4, 21)
    skipped = _skipped_row("W3c from C", times)
    kernel = times["entries"] - len(calls) * times["null"]
    label = f"{n_ops} small ops on float64[16], grad"
    rows = [_row(f"W3c symgrad c, from Python: {label}", times["python"], times["hand"],
                 f"fn(x=x); {times['python'] / times['C']:.2f}x the call from C"
                 if not skipped else ""),
            _row("W3c symgrad c, its C kernels", kernel, times["hand"],
                 f"its {len(calls)} C entry call(s) replayed from Python "
                 f"({format_seconds(times['entries'])}) less ctypes' call "
                 f"({format_seconds(times['null'])} each)")]
    if skipped:
        return rows + skipped
    return rows + [_row("W3c symgrad c, from C: the exported library", times["C"], times["hand"],
                        f"{times['C'] / kernel:.2f}x the C kernels' time (target <= 1.2x); "
                        f"a C driver's median of {W3_CALLS * 4} calls in a row")]


def w7c_rows(repeats):
    """W7 on backend "c" called from Python (``fn(x=x, labels=labels)``) and exported as a C
    library called from C, each from the same initial state, one step per call."""
    missing = _no_c_compiler("W7c")
    if missing:
        return missing
    init = mlp_init()
    x, labels = mlp_data()
    fn = sg.compile(*mlp_adam_program(init), backend="c")
    hand, _ = w7_by_hand(init)
    reference = sg.compile(*mlp_adam_program(init), backend="c")
    want = reference(x=x, labels=labels)

    def check(got, label):   # the first step's loss (float32: the GEMM's threads may round)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, err_msg=label)
    contenders = [("hand", lambda: hand(x, labels)), ("python", lambda: fn(x=x, labels=labels))]
    times = from_c("w7", fn, {"x": x, "labels": labels}, check, contenders, repeats, 1,
                   repeats * 3)
    return _python_and_c_rows("W7c", "Adam training step of W1", times, "fn(x=x, labels=labels)",
                              f" (target <= 1x); a C driver's median of {repeats * 3} steps")


def w6c_rows(repeats, steps):
    """W6 (the tanh RNN scan over ``steps`` steps and its gradient) on backend "c" called from
    Python (``fn(xs=xs, h0=h0)``) and exported as a C library called from C."""
    missing = _no_c_compiler("W6c")
    if missing:
        return missing
    workload = w6_workload(steps)
    xs, h0 = workload["xs"], workload["h0"]
    fn = sg.compile(*rnn_program(steps, workload["init"]), backend="c")
    want = fn(xs=xs, h0=h0)
    workload["check"](want, "c")

    def check(got, label):   # float32: the same code, one thread
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=label)
    contenders = [("hand", workload["hand"]), ("python", lambda: fn(xs=xs, h0=h0))]
    times = from_c("w6", fn, {"xs": xs, "h0": h0}, check, contenders, repeats, 1, repeats * 3)
    return _python_and_c_rows("W6c", f"tanh RNN scan, T={steps:,}, grad", times,
                              "fn(xs=xs, h0=h0)",
                              f"; the scans as C loops; a C driver's median of {repeats * 3} "
                              f"calls")


def _python_and_c_rows(name, label, times, python_call, c_note):
    """The rows of workload ``name`` called from Python (``python_call``) and from C through
    its exported library (``c_note`` after the ratio), or the row saying why C was skipped."""
    skipped = _skipped_row(f"{name} from C", times)
    rows = [_row(f"{name} symgrad c, from Python: {label}", times["python"], times["hand"],
                 python_call + ("" if skipped else
                                f"; {times['python'] / times['C']:.2f}x the call from C"))]
    if skipped:
        return rows + skipped
    return rows + [_row(f"{name} symgrad c, from C: the exported library", times["C"],
                        times["hand"], f"{times['C'] / times['python']:.2f}x the call from "
                                       f"Python{c_note}")]


W7_FRAMEWORKS = {"JAX": w7_jax, "PyTorch": w7_torch}


# workloads that time their frameworks their own way: (framework, inputs, repeats) -> results
OWN_WORKERS = {"W6m": w6m_bench.framework_worker, "W7": w7_framework_worker,
               "W8": w8_framework_worker, "W9": w9_framework_worker,
               "W3c": lambda framework, inputs, repeats: w3c_rows(repeats),
               "W6c": lambda framework, inputs, repeats: w6c_rows(repeats, **inputs),
               "W7c": lambda framework, inputs, repeats: w7c_rows(repeats)}


WORKLOADS = {   # name -> run(repeats, quick) -> rows
    "W1": lambda repeats, quick: w1(repeats),
    "W2": lambda repeats, quick: w2(repeats, 400_000 if quick else 4_000_000),
    "W2b": lambda repeats, quick: w2b(repeats, 1_600_000 if quick else 16_000_000),
    "W3": lambda repeats, quick: w3(repeats),
    "W4": lambda repeats, quick: w4([1000, 10000] if quick else [1000, 10000, 100000]),
    "W5": lambda repeats, quick: w5(repeats, 100_000 if quick else 1_000_000),
    "W6": lambda repeats, quick: w6(repeats, 200 if quick else 1000,
                                    (100,) if quick else (100, 1000)),
    "W6m": lambda repeats, quick: w6m(3, 1_000 if quick else 10_000),
    "W7": lambda repeats, quick: w7(repeats),
    "W3c": lambda repeats, quick: from_c_rows("W3c", repeats),
    "W6c": lambda repeats, quick: from_c_rows("W6c", repeats,
                                              {"steps": 100 if quick else 1000}),
    "W7c": lambda repeats, quick: from_c_rows("W7c", repeats),
    "W8": lambda repeats, quick: w8(repeats),
    "W9": lambda repeats, quick: w9(repeats),
    "W10": lambda repeats, quick: w10(repeats, 1_000 if quick else 10_000),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), metavar="W",
                        help=f"run only these workloads ({', '.join(WORKLOADS)})")
    parser.add_argument("--framework-worker", nargs=4,
                        metavar=("WORKLOAD", "FRAMEWORK", "INPUTS", "REPEATS"),
                        help=argparse.SUPPRESS)   # one framework on one workload (see contest)
    args = parser.parse_args(argv)
    if args.framework_worker:
        name, framework, inputs, repeats = args.framework_worker
        framework_worker(name, framework, json.loads(inputs), int(repeats))
        return
    os.environ.setdefault("SYMGRAD_CACHE_DIR", tempfile.mkdtemp(prefix="symgrad-bench-"))
    row_pool.keep_freed_memory()   # before any timing (the framework workers: heap_environment)
    repeats = 3 if args.quick else 7
    rows = []
    for name, run in WORKLOADS.items():
        if args.only is None or name in args.only:
            rows += run(repeats, args.quick)
    print_table(rows, ["workload", "time", "hand-written NumPy", "speedup", "note"],
                title=f"symgrad CPU benchmarks (NumPy {np.__version__}, medians; speedup = "
                      f"hand-written time / time)")


if __name__ == "__main__":
    main()
