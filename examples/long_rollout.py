"""Reverse mode through a million simulation steps in bounded memory (``checkpoint=``).

256 damped pendulums (``x'' = -stiffness * sin(x) - damping * x'``) are integrated by
semi-implicit Euler for 1,000,000 steps of 1 ms with ``sg.scan``; the loss is the mean squared
angle at the end. ``ir_backward.grad`` differentiates it with respect to the initial angular
velocities and the damping. Storing every step's residuals would take gigabytes (the planned
peak of the same program without checkpoint is printed); with
``checkpoint=("binomial", 32)`` the backward keeps at most 32 states and recomputes the rest
by Griewank & Walther's optimal schedule.

Asserts: the gradient call's peak memory (tracemalloc, and the planned ``fn.memory()``) is
under 100 MB; the gradient matches central finite differences of the compiled loss along a
random direction.

Run: python examples/long_rollout.py   (SYMGRAD_EXAMPLE_QUICK=1: 3,000 steps; minutes
at full size on one core)
"""
import os
import time
import tracemalloc

import numpy as np

import symgrad as sg
from symgrad import ir_backward

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
STEPS = 3_000 if QUICK else 1_000_000
PENDULUMS = 256
DT = 1e-3
POLICY = ("binomial", 32)
LIMIT = 100 * 2**20          # bytes


def build(policy, with_grad=True):
    """The rollout as a scan; fetches the loss (and its gradients w.r.t. v0 and damping)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x0 = sg.data("x0", [PENDULUMS], "float64")
        v0 = sg.data("v0", [PENDULUMS], "float64")
        stiffness = sg.data("stiffness", [PENDULUMS], "float64")
        damping = sg.data("damping", [], "float64")

        def step(state, _):
            x, v = state
            v = v + DT * (-stiffness * sg.sin(x) - damping * v)
            return (x + DT * v, v), None

        (x, _), _ = sg.scan(step, (x0, v0), length=STEPS, checkpoint=policy)
        loss = sg.mean(x * x)
        fetches = [loss] + (ir_backward.grad(loss, [v0, damping]) if with_grad else [])
    return sg.compile(prog, fetches, backend="numpy")


def main():
    rng = np.random.default_rng(0)
    feeds = {"x0": rng.uniform(-1.0, 1.0, PENDULUMS), "v0": rng.uniform(-0.5, 0.5, PENDULUMS),
             "stiffness": rng.uniform(1.0, 4.0, PENDULUMS), "damping": np.float64(2e-4)}
    grad_fn = build(POLICY)
    store_all = build(None).memory()
    planned = grad_fn.memory()
    print(f"{STEPS:,} steps of {PENDULUMS} pendulums; planned peak of the gradient call: "
          f"{planned / 2**20:.2f} MiB with checkpoint={POLICY}, {store_all / 2**20:,.0f} MiB "
          f"storing every step")

    tracemalloc.start()
    start = time.perf_counter()
    loss, d_v0, d_damping = grad_fn(**feeds)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"loss {float(loss):.6f}; gradient in {seconds:.1f} s, peak {peak / 2**20:.2f} MiB "
          f"(tracemalloc)")
    assert peak < LIMIT and planned < LIMIT, (peak, planned)

    loss_fn = build(None, with_grad=False)
    direction_v0 = rng.standard_normal(PENDULUMS)
    direction_damping = 1e-4
    eps = 1e-6

    def loss_at(sign):
        moved = dict(feeds, v0=feeds["v0"] + sign * eps * direction_v0,
                     damping=feeds["damping"] + sign * eps * direction_damping)
        return float(loss_fn(**moved)[0])

    numeric = (loss_at(1) - loss_at(-1)) / (2 * eps)
    analytic = float(d_v0 @ direction_v0 + d_damping * direction_damping)
    print(f"directional derivative: {analytic:.8e} (grad), {numeric:.8e} (finite differences)")
    assert abs(analytic - numeric) <= 1e-5 * abs(analytic) + 1e-9, (analytic, numeric)


if __name__ == "__main__":
    main()
