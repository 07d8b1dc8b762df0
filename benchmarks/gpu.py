"""GPU benchmarks: symgrad's CUDA backend against hand-written CuPy, measured in one run.

Run: python benchmarks/gpu.py [--quick] [--json FILE]
Needs CuPy and a CUDA device. Prints one table of median times (CUDA events) and ratios
(other time / symgrad time: above 1 means symgrad is faster). JAX / PyTorch rows are added
when those packages are installed with GPU support, and skipped otherwise.

W2  grad w.r.t. x of sum(tanh(x*1.5+0.5)*sin(x) + exp(-x*x)*0.3 + log1p(x*x)), 64,000,000
    float32 (forward value and gradient in one call). Its bandwidth is reported against a
    device-to-device copy of the same array measured in the same run: "useful" counts the
    bytes a perfect fused kernel must move (read x, write the gradient), "moved" counts the
    bytes the generated kernels actually read and write.
W1  MLP gradient: x (4096, 784), dense 784-512-512-10 tanh, softmax cross-entropy, grads of
    all weights and biases (float32), against hand-written CuPy forward/backward on cuBLAS.

Targets (not asserted): fused W2 gradient >= 70% of copy bandwidth and >= 3x faster than
unfused CuPy; W1 within 1.15x of hand-written CuPy. On an H100 (docs/performance.md) W2's one
kernel is compute-bound (Nsight Compute: 84% SM, 35% DRAM throughput) at about 45% of copy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from common import format_seconds, optional_import, print_table  # noqa: E402
from workloads import mlp_init, mlp_program, w2_program  # noqa: E402

cupy = optional_import("cupy")


def gpu_time(fn, repeats, warmup=2) -> float:
    """Median seconds of ``fn()`` on the current stream, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def wall_time(fn, sync, repeats, warmup=2) -> float:
    """Median seconds of ``fn(); sync()`` (for frameworks with their own streams)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(workload, impl, seconds, ours, note=""):
    ratio = f"{seconds / ours:.2f}x" if seconds and ours else "-"
    return {"workload": workload, "implementation": impl, "time": format_seconds(seconds),
            "vs symgrad": ratio, "note": note, "seconds": seconds}


def moved_bytes(compiled, feeds) -> int:
    """Bytes the kernels of one call read and write (broadcast arrays count their storage). A
    reduction's ``_merge`` launch reads only its partial results (its last argument): the other
    arrays it is handed are the main launch's, counted there."""
    module = compiled._executable.module
    total = [0]
    originals = dict(module.KERNELS)

    def counting(name, kernel):
        def launch(grid, block, args):
            for arg in args[-1:] if "_merge" in name else args:
                if isinstance(arg, cupy.ndarray):
                    broadcast = 0 in arg.strides and arg.base is not None
                    total[0] += arg.base.nbytes if broadcast else arg.nbytes
            return kernel(grid, block, args)
        return launch

    module.KERNELS.update({name: counting(name, k) for name, k in originals.items()})
    try:
        compiled(**feeds)
    finally:
        module.KERNELS.update(originals)
    return total[0]


# --- W2 ---------------------------------------------------------------------------------------
def w2_cupy(x):
    """Hand-written CuPy, one library call per op: the value and its analytic gradient."""
    t = cupy.tanh(x * 1.5 + 0.5)
    s = cupy.sin(x)
    e = cupy.exp(-x * x)
    y = cupy.sum(t * s + e * 0.3 + cupy.log1p(x * x))
    gx = (1 - t * t) * 1.5 * s + t * cupy.cos(x) + e * 0.3 * (-2 * x) + 2 * x / (1 + x * x)
    return y, gx


def w2(n, repeats):
    rows = []
    x = cupy.asarray(np.random.default_rng(0).uniform(-3, 3, n).astype("float32"))
    prog, loss, gx = w2_program()
    fetches = [loss, gx]
    fused = sg.compile(prog, fetches, backend="cuda")
    unfused = sg.compile(prog, fetches, backend="cuda", fusion=False)
    ours = gpu_time(lambda: fused(x=x), repeats)
    copy_out = cupy.empty_like(x)
    copy = gpu_time(lambda: cupy.copyto(copy_out, x), repeats)
    copy_bw = 2 * x.nbytes / copy
    useful_bw = 2 * x.nbytes / ours
    moved_bw = moved_bytes(fused, {"x": x}) / ours
    name = f"W2 ({n:,} float32)"
    rows.append(row(name, "symgrad cuda (fused)", ours, ours,
                    f"useful {useful_bw / 1e9:.0f} GB/s = {useful_bw / copy_bw:.0%} of copy; "
                    f"moved {moved_bw / 1e9:.0f} GB/s = {moved_bw / copy_bw:.0%} of copy"))
    rows.append(row(name, "device-to-device copy", copy, ours, f"{copy_bw / 1e9:.0f} GB/s"))
    rows.append(row(name, "symgrad cuda (fusion off)", gpu_time(lambda: unfused(x=x), repeats),
                    ours))
    rows.append(row(name, "hand-written CuPy (unfused)", gpu_time(lambda: w2_cupy(x), repeats),
                    ours, "target: >= 3x"))
    rows += w2_frameworks(name, cupy.asnumpy(x), ours, repeats)
    return rows


def w2_frameworks(name, x_host, ours, repeats):
    rows = []
    torch = optional_import("torch")
    if torch is not None and torch.cuda.is_available():
        xt = torch.from_numpy(x_host).cuda().requires_grad_(True)

        def step():
            y = (torch.tanh(xt * 1.5 + 0.5) * torch.sin(xt) + torch.exp(-xt * xt) * 0.3
                 + torch.log1p(xt * xt)).sum()
            return torch.autograd.grad(y, [xt])

        rows.append(row(name, "PyTorch (eager)", wall_time(step, torch.cuda.synchronize,
                                                           repeats), ours))
    jax = optional_import("jax")
    if jax is not None and any(d.platform == "gpu" for d in jax.devices()):
        import jax.numpy as jnp

        f = jax.jit(jax.value_and_grad(lambda v: jnp.sum(
            jnp.tanh(v * 1.5 + 0.5) * jnp.sin(v) + jnp.exp(-v * v) * 0.3 + jnp.log1p(v * v))))
        xj = jax.device_put(x_host)
        rows.append(row(name, "JAX (jit)", wall_time(lambda: jax.block_until_ready(f(xj)),
                                                     lambda: None, repeats), ours))
    return rows


# --- W1 ---------------------------------------------------------------------------------------
def mlp_cupy(x, labels, params):
    """Hand-written CuPy forward and backward (matmuls on cuBLAS)."""
    hs, h = [x], x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i < len(params) - 2:
            h = cupy.tanh(h)
        hs.append(h)
    logits = hs[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = cupy.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    rows = cupy.arange(n)
    loss = cupy.mean(cupy.log(total[:, 0]) - shifted[rows, labels])
    g = e / total
    g[rows, labels] -= 1
    g /= n
    grads = []
    for i in range(len(params) - 2, -1, -2):
        inp = hs[i // 2]
        grads = [inp.T @ g, g.sum(axis=0)] + grads
        if i:
            g = (g @ params[i].T) * (1 - inp * inp)
    return loss, grads


def w1(batch, repeats):
    init = mlp_init()
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.standard_normal((batch, 784)).astype("float32"))
    labels = cupy.asarray(rng.integers(0, 10, batch))
    params = [cupy.asarray(a) for pair in init for a in pair]
    names = [f"{kind}{i}" for i in range(len(init)) for kind in ("w", "b")]
    feeds = dict(zip(names, params), x=x, labels=labels)
    compiled = sg.compile(*mlp_program(init), backend="cuda")
    ours = gpu_time(lambda: compiled(**feeds), repeats)
    hand = gpu_time(lambda: mlp_cupy(x, labels, params), repeats)
    name = f"W1 MLP grad (batch {batch})"
    return [row(name, "symgrad cuda", ours, ours, f"{compiled.stats.get('kernels')} kernels"),
            row(name, "hand-written CuPy + cuBLAS", hand, ours, "target: symgrad <= 1.15x")] \
        + w1_frameworks(name, cupy.asnumpy(x), cupy.asnumpy(labels), init, ours, repeats)


def w1_frameworks(name, x_host, labels_host, init, ours, repeats):
    """W1 (loss and every parameter's gradient) in PyTorch eager and JAX ``jit``, where those
    are installed with GPU support."""
    rows = []
    torch = optional_import("torch")
    if torch is not None and torch.cuda.is_available():
        params = [torch.from_numpy(a).cuda().requires_grad_(True) for pair in init for a in pair]
        xt, lt = torch.from_numpy(x_host).cuda(), torch.from_numpy(labels_host).cuda()

        def step():
            h = xt
            for i in range(0, len(params), 2):
                h = h @ params[i] + params[i + 1]
                if i < len(params) - 2:
                    h = torch.tanh(h)
            loss = torch.nn.functional.cross_entropy(h, lt)
            return torch.autograd.grad(loss, params)

        rows.append(row(name, "PyTorch (eager)", wall_time(step, torch.cuda.synchronize,
                                                           repeats), ours))
    jax = optional_import("jax")
    if jax is not None and any(d.platform == "gpu" for d in jax.devices()):
        import jax.numpy as jnp

        def loss(params, x, labels):
            h = x
            for i in range(0, len(params), 2):
                h = h @ params[i] + params[i + 1]
                if i < len(params) - 2:
                    h = jnp.tanh(h)
            logp = jax.nn.log_softmax(h)
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

        args = ([jax.device_put(a) for pair in init for a in pair], jax.device_put(x_host),
                jax.device_put(labels_host))
        # JAX's default precision multiplies float32 matrices in TF32 on Ampere and later
        # GPUs; "highest" is full float32, as symgrad, CuPy and PyTorch here
        for precision, label in ((None, "JAX (jit), default precision"),
                                 ("highest", "JAX (jit), float32 matmuls")):
            with jax.default_matmul_precision(precision):
                f = jax.jit(jax.value_and_grad(loss))
                rows.append(row(name, label, wall_time(
                    lambda: jax.block_until_ready(f(*args)), lambda: None, repeats), ours))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if cupy is None or cupy.cuda.runtime.getDeviceCount() == 0:
        sys.exit("benchmarks/gpu.py needs CuPy and a CUDA device (pip install symgrad[cuda])")
    repeats = 5 if args.quick else 20
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = w2(1_000_000 if args.quick else 64_000_000, repeats)
    rows += w1(256 if args.quick else 4096, repeats)
    print_table(rows, ["workload", "implementation", "time", "vs symgrad", "note"],
                title=f"symgrad CUDA backend on {device} (median of {repeats}; CUDA events)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": device, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
