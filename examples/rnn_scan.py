"""Train a tanh RNN with ``sg.scan``: predict the next value of noisy sine waves.

The recurrence ``h_t = tanh(h_{t-1} W + x_t U + b)`` is the body of one ``sg.scan`` over the
sequence; each step also emits a prediction ``h_t V + c`` of the next input, which the scan
stacks into ``[T, batch, 1]``. ``ir_backward.grad`` appends backpropagation through time as a
reverse scan, so the program stays the same size whatever the sequence length, and the
generated NumPy runs both loops as plain Python ``for`` loops (printed below).
``sg.optimizer.Adam(...).minimize(loss)`` appends that backward and Adam's update, so each
call of the compiled training step updates the weights kept in the program's state.

Asserts: the gradient matches central finite differences; the NumPy backend matches the
interpreter; training cuts the prediction error at least fourfold.

Run: python examples/rnn_scan.py          (SYMGRAD_EXAMPLE_QUICK=1: fewer steps)
"""
import os
import sys
import time

import numpy as np

import symgrad as sg

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
STEPS = 150 if QUICK else 600
T, BATCH, HIDDEN = 40, 16, 24


def waves(rng, batch):
    """``[T + 1, batch, 1]`` sine waves of random frequency and phase, with a little noise."""
    t = np.arange(T + 1)[:, None]
    freq = rng.uniform(0.1, 0.4, size=(1, batch))
    phase = rng.uniform(0, 2 * np.pi, size=(1, batch))
    series = np.sin(freq * t + phase) + 0.02 * rng.standard_normal((T + 1, batch))
    return series[..., None]


def init_params(rng):
    scale = 1 / np.sqrt(HIDDEN)
    return {"W": rng.standard_normal((HIDDEN, HIDDEN)) * scale * 0.9,
            "U": rng.standard_normal((1, HIDDEN)),
            "b": np.zeros(HIDDEN),
            "V": rng.standard_normal((HIDDEN, 1)) * scale,
            "c": np.zeros(1)}


def build(params):
    """The training program: returns (program, loss, {name: gradient Value}); Adam's update
    of every weight is part of it."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [T, None, 1], "float64")         # inputs x_0 .. x_{T-1}
        targets = sg.data("targets", [T, None, 1], "float64")   # x_1 .. x_T
        p = {name: sg.parameter(name, list(a.shape), "float64", init=a)
             for name, a in params.items()}
        h0 = sg.zeros_like(xs[0] @ p["U"])                 # [batch, HIDDEN] of zeros

        def cell(h, x):
            h = sg.tanh(h @ p["W"] + x @ p["U"] + p["b"])
            return h, h @ p["V"] + p["c"]                     # carry, prediction

        _, predictions = sg.scan(cell, h0, xs)
        loss = sg.mean((predictions - targets) ** 2)
        grads = dict(sg.optimizer.Adam(learning_rate=1e-2).minimize(loss))
    return prog, loss, {name: grads[value] for name, value in p.items()}


def forward_loop(source) -> str:
    """The lines of the generated ``run`` from the first scan's comment to the end of its
    ``for`` loop."""
    lines = source[source.index("def run("):].splitlines()
    start = next(i for i, line in enumerate(lines) if "= scan(" in line)
    loop = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("for "))
    indent = len(lines[loop]) - len(lines[loop].lstrip())
    end = next(i for i in range(loop + 1, len(lines))
               if len(lines[i]) - len(lines[i].lstrip()) <= indent)
    return "\n".join(lines[start:end])


def main():
    rng = np.random.default_rng(0)
    params = init_params(rng)
    prog, loss, grads = build(params)
    names = list(grads)
    start = time.perf_counter()
    train = sg.compile(prog, [loss], backend="numpy")
    print(f"grad + compile: {time.perf_counter() - start:.2f} s; the forward loop it runs:")
    print(forward_loop(train.source))

    series = waves(rng, BATCH)
    feeds = {"xs": series[:-1], "targets": series[1:]}
    # the gradient agrees with central differences of the loss, and with the interpreter
    # (programs that leave the training state alone: updates=False)
    gradients = sg.compile(prog, [loss] + [grads[n] for n in names], updates=False)
    loss_fn = sg.compile(prog, [loss], updates=False, state=train.state)
    _, g_w, *_ = gradients(**feeds)
    numeric = np.zeros_like(params["W"])
    eps = 1e-6
    for index in [(0, 0), (3, 5), (HIDDEN - 1, 2)]:
        bump = np.zeros_like(params["W"])
        bump[index] = eps
        up = loss_fn(**feeds, W=params["W"] + bump)[0]       # a fed W: for this call only
        down = loss_fn(**feeds, W=params["W"] - bump)[0]
        numeric[index] = (up - down) / (2 * eps)
        np.testing.assert_allclose(g_w[index], numeric[index], rtol=1e-5, atol=1e-9)
    reference = sg.compile(prog, [loss] + [grads[n] for n in names], backend="interpreter",
                           updates=False)
    for got, want in zip(gradients(**feeds), reference(**feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    print("gradient matches finite differences and the interpreter")

    first = None
    start = time.perf_counter()
    for it in range(1, STEPS + 1):
        series = waves(rng, BATCH)
        (value,) = train(xs=series[:-1], targets=series[1:])
        first = float(value) if first is None else first
        if it % 50 == 0 or it == 1:
            print(f"step {it:4d}: mean squared error {float(value):.4f}")
    elapsed = time.perf_counter() - start
    series = waves(np.random.default_rng(1), 256)
    final = float(loss_fn(xs=series[:-1], targets=series[1:])[0])
    print(f"{STEPS} steps in {elapsed:.1f} s; error on new waves: {first:.4f} -> {final:.4f}")
    assert final < first / 4, "training did not cut the error fourfold"
    print("prediction error cut at least fourfold: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
