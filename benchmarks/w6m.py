"""W6m: reverse mode through a long loop in bounded memory (issue 25), for ``benchmarks/cpu.py``.

A tanh RNN ``h_t = tanh(h_{t-1} W + x_t U + b)`` over T = 10,000 steps (hidden 256, batch 32,
input 64, float64), loss = mean of the final state squared, gradients of W, U and b. For each
``checkpoint=`` policy of ``sg.scan`` (None: store every step; ``k`` = 100; ``"sqrt"``;
``("binomial", 8)``) and each of symgrad's CPU backends: the median time of one gradient call,
its peak memory (tracemalloc, which sees every NumPy allocation: the C backend's arrays are
NumPy's too) and the planned peak (``fn.memory``), as ratios to storing every step. JAX
(``lax.scan`` with ``jax.checkpoint`` on the body; Flax-style nested scans of about sqrt(T)
steps, a divisor of T, with ``jax.checkpoint`` on the inner scan) and PyTorch (eager autograd storing every step;
``checkpoint_sequential`` in sqrt(T) segments) run each policy in a process of its own; their
memory is the growth of the process's peak resident size during one call (their allocators
are not NumPy's), so compare ratios within a framework.
"""
from __future__ import annotations

import math
import resource
import time

import numpy as np

import symgrad as sg
from symgrad import ir_backward

HIDDEN, BATCH, INPUT = 256, 32, 64
POLICIES = [None, 100, "sqrt", ("binomial", 8)]
FRAMEWORK_POLICIES = {"JAX": ["store all", "checkpoint(body)", "nested sqrt"],
                      "PyTorch": ["store all", "checkpoint_sequential sqrt"]}


def init(steps, seed=0):
    rng = np.random.default_rng(seed)
    return {"W": rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN),
            "U": rng.standard_normal((INPUT, HIDDEN)) / np.sqrt(INPUT),
            "b": np.zeros(HIDDEN), "h0": np.zeros((BATCH, HIDDEN)),
            "xs": rng.standard_normal((steps, BATCH, INPUT))}


def program(steps, policy):
    """The W6m program with ``checkpoint=policy``; fetches the loss and the gradients."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [steps, BATCH, INPUT], "float64")
        h0 = sg.data("h0", [BATCH, HIDDEN], "float64")
        W = sg.data("W", [HIDDEN, HIDDEN], "float64")
        U = sg.data("U", [INPUT, HIDDEN], "float64")
        b = sg.data("b", [HIDDEN], "float64")
        h, _ = sg.scan(lambda h, x: (sg.tanh(h @ W + x @ U + b), None), h0, xs,
                       checkpoint=policy)
        loss = sg.mean(h * h)
        grads = ir_backward.grad(loss, [W, U, b])
    return prog, [loss] + list(grads)


def policy_name(policy) -> str:
    return "None (store all)" if policy is None else repr(policy)


def alternate(fns, repeats) -> list:
    """``[(median wall seconds, median CPU seconds of this process)]`` of each of ``fns``
    over ``repeats`` rounds, each round calling every function once, the order rotating."""
    samples = [[] for _ in fns]
    for round_ in range(repeats):
        for k in range(len(fns)):
            index = (k + round_) % len(fns)
            wall, cpu = time.perf_counter(), time.process_time()
            fns[index]()
            samples[index].append((time.perf_counter() - wall, time.process_time() - cpu))
    return [tuple(float(np.median(column)) for column in zip(*rows)) for rows in samples]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_growth(run) -> tuple:
    """(result, growth of the process's peak resident bytes over its resident bytes before)."""
    before = _rss_bytes()
    result = run()
    return result, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before


def framework_worker(framework, inputs, repeats):
    """One framework and one policy (``inputs``: ``steps``, ``policy``) in this process: the
    first call's peak memory growth, then the median time of ``repeats`` calls and the
    gradients (checked by the caller against symgrad's)."""
    steps, policy = inputs["steps"], inputs["policy"]
    data = init(steps)
    if framework == "JAX":
        run, version = _jax_run(data, policy)
    else:
        run, version = _torch_run(data, policy)
    start = time.perf_counter()
    got, growth = _peak_growth(run)
    first = time.perf_counter() - start
    ((seconds, cpu),) = alternate([run], repeats)
    return {"version": version, "seconds": seconds, "cpu": cpu, "first": first,
            "peak_growth": int(growth), "loss": float(got[0]),
            "grads": [np.asarray(g).ravel()[:8].tolist() for g in got[1:]]}


def _jax_run(data, policy):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    steps = data["xs"].shape[0]

    def cell(params, h, x):
        W, U, b = params
        return jnp.tanh(h @ W + x @ U + b)

    def loss(params, xs, h0):
        if policy == "nested sqrt":
            k = max(d for d in range(1, math.isqrt(steps - 1) + 2) if steps % d == 0)

            @jax.checkpoint
            def segment(h, chunk):
                h, _ = jax.lax.scan(lambda h, x: (cell(params, h, x), None), h, chunk)
                return h, None
            h, _ = jax.lax.scan(segment, h0, xs.reshape((steps // k, k) + xs.shape[1:]))
        else:
            body = lambda h, x: (cell(params, h, x), None)  # noqa: E731
            if policy == "checkpoint(body)":
                body = jax.checkpoint(body)
            h, _ = jax.lax.scan(body, h0, xs)
        return jnp.mean(h * h)

    f = jax.jit(jax.value_and_grad(loss))
    args = (tuple(jnp.asarray(data[n]) for n in "WUb"), jnp.asarray(data["xs"]),
            jnp.asarray(data["h0"]))

    def run():
        value, grads = jax.block_until_ready(f(*args))
        return [value, *grads]
    return run, f"JAX {jax.__version__}"


def _torch_run(data, policy):
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    steps = data["xs"].shape[0]
    W, U, b = (torch.tensor(data[n], requires_grad=True) for n in "WUb")
    xs, h0 = torch.tensor(data["xs"]), torch.tensor(data["h0"])

    class Step(torch.nn.Module):
        def __init__(self, t):
            super().__init__()
            self.t = t

        def forward(self, h):
            return torch.tanh(h @ W + xs[self.t] @ U + b)

    chain = torch.nn.Sequential(*[Step(t) for t in range(steps)])

    def run():
        if policy == "store all":
            h = chain(h0)
        else:
            h = checkpoint_sequential(chain, math.isqrt(steps - 1) + 1, h0, use_reentrant=False)
        value = torch.mean(h * h)
        return [value.detach(), *torch.autograd.grad(value, [W, U, b])]
    return run, f"PyTorch {torch.__version__}"
