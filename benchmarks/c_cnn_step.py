"""The CNN training step of issue 23 on the NumPy and C backends, against hand-written NumPy.

Run: python benchmarks/c_cnn_step.py [runs]   (pin it for stable numbers, e.g.
``OPENBLAS_NUM_THREADS=1 taskset -c 0 python benchmarks/c_cnn_step.py``)

Batch 32 of 3x32x32, conv3x3 16 -> relu -> maxpool2 -> conv3x3 32 -> relu -> maxpool2 ->
linear 2048->10 -> softmax cross-entropy, float32 (``workloads.py``; ``cpu.py``'s W8 times it
with Adam against the frameworks): the loss, the gradients and an SGD update. Prints the
median time of a step for hand-written NumPy (``workloads.cnn_by_hand``), symgrad's NumPy
backend, its C backend with conv, pooling and matmul on NumPy (as before the native ops:
``blas.available`` patched to False) and its C backend with its native ops, and each
backend's largest difference from the interpreter.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from symgrad import ir_backward  # noqa: E402
from symgrad.backends.c_backend import native_ops  # noqa: E402
from workloads import cnn_by_hand, cnn_data, cnn_init, cnn_loss  # noqa: E402

LR = 0.01
PARAMS = cnn_init()
X, LABELS = cnn_data()
FEEDS = {"x": X, "labels": LABELS, **PARAMS}


def build():
    """The step as a symgrad program: the loss and the updated parameters."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 32, 32], "float32")
        labels = sg.data("labels", [None], "int64")
        p = {k: sg.data(k, list(v.shape), "float32") for k, v in PARAMS.items()}
        loss = cnn_loss(x, labels, p)
        grads = ir_backward.grad(loss, list(p.values()))
        updated = [value - LR * grad for value, grad in zip(p.values(), grads)]
    return prog, [loss] + updated


def numpy_step(x, labels, params):
    """The step written by hand in NumPy (``workloads.cnn_by_hand``), then SGD."""
    loss, grads = cnn_by_hand(params, x, labels)
    return [loss] + [value - LR * grads[k] for k, value in params.items()]


def median_ms(step, runs):
    step()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def compile_step(prog, fetches, backend, native):
    """``backend``'s program; without ``native``, conv, pooling and matmul on NumPy."""
    if native:
        return sg.compile(prog, fetches, backend=backend)
    saved = native_ops.blas.available
    native_ops.blas.available = lambda: False
    try:
        return sg.compile(prog, fetches, backend=backend)
    finally:
        native_ops.blas.available = saved


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    prog, fetches = build()
    reference = sg.compile(prog, fetches, backend="interpreter")(**FEEDS)
    rows = [("hand-written NumPy", numpy_step(X, LABELS, PARAMS),
             median_ms(lambda: numpy_step(X, LABELS, PARAMS), runs))]
    for label, backend, native in [("symgrad numpy", "numpy", False),
                                   ("symgrad c, heavy ops on NumPy", "c", False),
                                   ("symgrad c, native heavy ops", "c", True)]:
        step = compile_step(prog, fetches, backend, native)
        rows.append((label, step(**FEEDS), median_ms(lambda: step(**FEEDS), runs)))
    print(f"{'':32s} {'median':>10s} {'max diff from the interpreter':>30s}")
    for label, got, ms in rows:
        diff = max(float(np.abs(np.asarray(a) - b).max()) for a, b in zip(got, reference))
        print(f"{label:32s} {ms:7.2f} ms {diff:30.1e}")


if __name__ == "__main__":
    main()
