"""Programs the distributed tests run: a linear model (float64) and the W1 MLP (float32)."""
import importlib.util
from pathlib import Path

import numpy as np

import symgrad as sg
from symgrad import ir_backward

ROOT = Path(__file__).resolve().parents[2]


def linear_model(features=3, dtype="float64", backend="numpy"):
    """Least squares ``mean((x @ w + b - y) ** 2)``; fetches the loss, the gradients of ``w``
    and ``b``, the per-row predictions and the number of rows with a positive prediction."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, features], dtype)
        y = sg.data("y", [None], dtype)
        w = sg.parameter("w", [features], dtype,
                         init=np.linspace(-1.0, 1.0, features).astype(dtype))
        b = sg.parameter("b", [], dtype, init=np.asarray(0.25, dtype))
        pred = x @ w + b
        loss = sg.mean((pred - y) ** 2)
        gw, gb = ir_backward.grad(loss, [w, b])
        positive = sg.sum(sg.cast(pred > 0, "int64"))
    return sg.compile(prog, [loss, gw, gb, pred, positive], backend=backend, threads=1)


def trained_linear_model(steps=3, rows=200):
    """The least-squares model trained ``steps`` SGD steps with its state in the program:
    ``(train, evaluate)``, compiled programs fetching the loss and the predictions;
    ``evaluate`` shares ``train``'s state and leaves it alone."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        y = sg.data("y", [None], "float64")
        w = sg.parameter("w", [3], "float64", init=np.zeros(3))
        b = sg.parameter("b", [], "float64", init=np.asarray(0.0))
        pred = x @ w + b
        loss = sg.mean((pred - y) ** 2)
        sg.optimizer.SGD(0.1, momentum=0.5).minimize(loss)
    train = sg.compile(prog, [loss, pred], threads=1)
    evaluate = sg.compile(prog, [loss, pred], threads=1, updates=False, state=train.state)
    x_train, y_train = linear_data(rows, seed=5)
    for _ in range(steps):
        train(x=x_train, y=y_train)
    return train, evaluate


# How map_reduce reduces each fetch of linear_model (the last two: per-row, a count).
LINEAR_REDUCE = ["mean", "mean", "mean", "concat", "sum"]


def linear_data(rows, features=3, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, features)).astype(dtype),
            rng.standard_normal(rows).astype(dtype))


def w1_mlp():
    """The benchmarks' W1 MLP (784-512-512-10, tanh, softmax cross-entropy), compiled with
    one thread; fetches the loss and the gradient of every weight and bias."""
    spec = importlib.util.spec_from_file_location("symgrad_bench_workloads",
                                                  ROOT / "benchmarks" / "workloads.py")
    workloads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workloads)
    prog, fetches = workloads.mlp_program(workloads.mlp_init(seed=0))
    return sg.compile(prog, fetches, threads=1)


def mlp_data(rows, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 784)).astype("float32"),
            rng.integers(0, 10, rows).astype("int64"))
