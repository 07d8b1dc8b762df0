"""The CNN training step of issue 23 on the NumPy and C backends, against hand-written NumPy.

Run: python benchmarks/c_cnn_step.py [runs]   (pin it for stable numbers, e.g.
``OPENBLAS_NUM_THREADS=1 taskset -c 0 python benchmarks/c_cnn_step.py``)

Batch 32 of 3x32x32, conv3x3 16 -> relu -> maxpool2 -> conv3x3 32 -> relu -> maxpool2 ->
linear 2048->10 -> softmax cross-entropy, float32: the loss, the gradients and an SGD update.
Prints the median time of a step for hand-written NumPy (im2col through
``sliding_window_view`` and ``@``), symgrad's NumPy backend, its C backend with conv, pooling
and matmul on NumPy (as before the native ops: ``blas.available`` patched to False) and its C
backend with its native ops, and each backend's largest difference from the interpreter.
"""

import sys
import time

import numpy as np

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends.c_backend import native_ops

BATCH, LR = 32, 0.01
RNG = np.random.default_rng(0)
PARAMS = {"w1": RNG.standard_normal((16, 3, 3, 3)).astype("float32") * 0.2,
          "b1": np.zeros(16, "float32"),
          "w2": RNG.standard_normal((32, 16, 3, 3)).astype("float32") * 0.1,
          "b2": np.zeros(32, "float32"),
          "wd": RNG.standard_normal((2048, 10)).astype("float32") * 0.02,
          "bd": np.zeros(10, "float32")}
FEEDS = {"x": RNG.standard_normal((BATCH, 3, 32, 32)).astype("float32"),
         "y": RNG.integers(0, 10, BATCH), **PARAMS}


def build():
    """The step as a symgrad program: the loss and the updated parameters."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 32, 32], "float32")
        y = sg.data("y", [None], "int64")
        p = {k: sg.data(k, list(v.shape), "float32") for k, v in PARAMS.items()}
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, p["w1"], p["b1"], padding=1)), 2, 2, 0)
        h = nn.max_pool2d(nn.relu(nn.conv2d(h, p["w2"], p["b2"], padding=1)), 2, 2, 0)
        logits = sg.reshape(h, [-1, 2048]) @ p["wd"] + p["bd"]
        loss = sg.mean(nn.softmax_cross_entropy(logits, y))
        grads = ir_backward.grad(loss, list(p.values()))
        updated = [value - LR * grad for value, grad in zip(p.values(), grads)]
    return prog, [loss] + updated


def _conv(x, w, b):
    """3x3 convolution with padding 1 through im2col; returns the output and the columns."""
    n, c, h, width = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * width, c * 9)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, width, -1).transpose(0, 3, 1, 2), cols


def _conv_back(g, cols, w, x_shape):
    n, c, h, width = x_shape
    rows = g.transpose(0, 2, 3, 1).reshape(n * h * width, -1)
    dw = (rows.T @ cols).reshape(w.shape)
    dcols = (rows @ w.reshape(w.shape[0], -1)).reshape(n, h, width, c, 3, 3)
    dpadded = np.zeros((n, c, h + 2, width + 2), g.dtype)
    for i in range(3):
        for j in range(3):
            dpadded[:, :, i:i + h, j:j + width] += dcols[..., i, j].transpose(0, 3, 1, 2)
    return dpadded[:, :, 1:-1, 1:-1], dw, rows.sum(0)


def _pool(x):
    """2x2 max pooling; returns the maxima and the mask of where they are."""
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2)
    top = windows.max(axis=(3, 5))
    return top, windows == top[:, :, :, None, :, None]


def _pool_back(g, mask):
    n, c, h, _, w, _ = mask.shape
    return (mask * g[:, :, :, None, :, None]).reshape(n, c, h * 2, w * 2)


def numpy_step(x, y, w1, b1, w2, b2, wd, bd):
    """The step written by hand in NumPy."""
    a1, cols1 = _conv(x, w1, b1)
    p1, mask1 = _pool(np.maximum(a1, 0))
    a2, cols2 = _conv(p1, w2, b2)
    p2, mask2 = _pool(np.maximum(a2, 0))
    features = p2.reshape(len(x), -1)
    z = features @ wd + bd
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    total = e.sum(1, keepdims=True)
    rows = np.arange(len(x))
    loss = np.mean(np.log(total[:, 0]) - z[rows, y])
    dz = e / total
    dz[rows, y] -= 1
    dz /= len(x)
    dp2 = (dz @ wd.T).reshape(p2.shape)
    dp1, dw2, db2 = _conv_back(_pool_back(dp2, mask2) * (a2 > 0), cols2, w2, p1.shape)
    _, dw1, db1 = _conv_back(_pool_back(dp1, mask1) * (a1 > 0), cols1, w1, x.shape)
    grads = (dw1, db1, dw2, db2, features.T @ dz, dz.sum(0))
    return [loss] + [p - LR * g for p, g in zip((w1, b1, w2, b2, wd, bd), grads)]


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
    hand = list(PARAMS.values())
    rows = [("hand-written NumPy", numpy_step(FEEDS["x"], FEEDS["y"], *hand),
             median_ms(lambda: numpy_step(FEEDS["x"], FEEDS["y"], *hand), runs))]
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
