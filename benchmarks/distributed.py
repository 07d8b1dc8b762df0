"""Data-parallel gradients on Dask: the full-batch gradient of the W1 MLP over many rows.

Run: python benchmarks/distributed.py [--rows 1000000] [--chunk 100000] [--repeats 3]

W1 is the 784-512-512-10 tanh MLP with softmax cross-entropy (benchmarks/workloads.py); one
run computes the mean loss and the gradient of every weight and bias over all rows, the
parameters' current values sent as replicated inputs (as a training step would). Rows are
float32 standard normals and random labels, made chunk by chunk by Dask's generator, so the
three setups see the same data:

single process  the compiled program called on each chunk in turn, the parts averaged by rows
                in float64 (the work map_reduce splits, without Dask)
1 worker        symgrad.distributed.map_reduce on a LocalCluster of one worker process
2 workers       the same on two worker processes

Every worker has one thread; the generated code (compile option threads=1) and BLAS
(OMP/OPENBLAS/MKL_NUM_THREADS=1, set below before NumPy loads) run one thread too, in the
driver as in the workers. On a cluster the data is generated and kept in the workers' memory
before timing. Reported per setup: median wall time, speedup over 1 worker and over the
single process, the share of the run the workers spent outside computing tasks (1 - busy
time / (workers x wall time), from Dask's task stream: scheduling, transfers, driver-side
graph building and idle time), and bytes shipped: the artifact (once per worker), the
replicated parameters (once per worker per run), the pickled spec of one chunk's task, and the
bytes the workers sent during a run (to each other, and the results to the client) divided
by its chunk tasks.
"""
from __future__ import annotations

import os
import sys

# This folder is sys.path[0] when the script runs, and this file's name would hide the
# dask.distributed package: move the folder to the end of the path (common, workloads stay
# importable).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_HERE]
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import pickle  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402
import numpy as np  # noqa: E402

import symgrad as sg  # noqa: E402
from symgrad.distributed import map_reduce  # noqa: E402
from symgrad.distributed.shipping import artifact_payload  # noqa: E402

from common import format_seconds, print_table  # noqa: E402
from workloads import mlp_init, mlp_program  # noqa: E402


def build(rows, chunk):
    """``(compiled W1, parameters by name, x, labels)``; x and labels are lazy Dask arrays."""
    init = mlp_init()
    prog, fetches = mlp_program(init)
    fn = sg.compile(prog, fetches, threads=1)
    params = {}
    for i, (w, b) in enumerate(init):
        params[f"w{i}"], params[f"b{i}"] = w, b
    rng = da.random.default_rng(0)
    x = rng.standard_normal((rows, 784), chunks=(chunk, 784), dtype=np.float32)
    labels = rng.integers(0, 10, size=rows, chunks=chunk)
    return fn, params, x, labels


def single_process(fn, params, x, labels, repeats):
    """Median seconds of the chunk loop, and its result."""
    chunks = [(x.blocks[i].compute(scheduler="sync"), labels.blocks[i].compute(scheduler="sync"))
              for i in range(x.numblocks[0])]

    def run():
        total = None
        for xs, ls in chunks:
            parts = [np.asarray(out, np.float64) * len(xs)
                     for out in fn(x=xs, labels=ls, **params)]
            total = parts if total is None else [t + p for t, p in zip(total, parts)]
        return [(t / x.shape[0]).astype(np.float32) for t in total]

    result, times = None, []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _outgoing_bytes(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


def on_cluster(workers, fn, params, x, labels, repeats):
    """Median seconds of map_reduce on a LocalCluster of ``workers`` single-thread worker
    processes, the share outside tasks, bytes the workers sent per chunk task, and the
    result."""
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        x, labels = client.persist([x, labels])
        distributed.wait([x, labels])
        sharded = {"x": x, "labels": labels}
        rows = workers * x.chunks[0][0]     # warm-up, a chunk per worker: ships the artifact
        map_reduce(fn, {"x": x[:rows], "labels": labels[:rows]}, replicated=params)
        times, busy, moved = [], [], []
        for _ in range(repeats):
            before = sum(client.run(_outgoing_bytes).values())
            with distributed.get_task_stream(client) as stream:
                start = time.perf_counter()
                result = map_reduce(fn, sharded, replicated=params)
                wall = time.perf_counter() - start
            times.append(wall)
            computing = sum(part["stop"] - part["start"] for task in stream.data
                            for part in task["startstops"] if part["action"] == "compute")
            busy.append(computing / (workers * wall))
            moved.append(sum(client.run(_outgoing_bytes).values()) - before)
    return (statistics.median(times), 1 - statistics.median(busy),
            statistics.median(moved) / x.numblocks[0], result)


def task_spec_bytes(fn, params, x, labels):
    """Pickled bytes of one chunk's task (what the scheduler sends to run it)."""
    lazy = map_reduce(fn, {"x": x, "labels": labels}, replicated=params, compute=False)
    graph = dict(lazy[0].__dask_graph__())
    return max(len(pickle.dumps(task)) for key, task in graph.items()
               if str(key).startswith("symgrad-run-chunk"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    fn, params, x, labels = build(args.rows, args.chunk)
    with dask.config.set(scheduler="sync"):
        spec_bytes = task_spec_bytes(fn, params, x, labels)
    artifact_bytes = artifact_payload(fn).nbytes
    param_bytes = sum(v.nbytes for v in params.values())

    single, want = single_process(fn, params, x, labels, args.repeats)
    rows, results = [], {}
    for workers in (1, 2):
        results[workers] = on_cluster(workers, fn, params, x, labels, args.repeats)
    one = results[1][0]
    rows.append({"setup": "single process", "time": format_seconds(single),
                 "vs 1 worker": f"{one / single:.2f}x"})
    for workers, (seconds, outside, moved, got) in results.items():
        error = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) or 1))
                    for g, w in zip(got, want))
        rows.append({"setup": f"{workers} worker{'s' * (workers > 1)}",
                     "time": format_seconds(seconds), "vs 1 worker": f"{one / seconds:.2f}x",
                     "vs single": f"{single / seconds:.2f}x",
                     "outside tasks": f"{outside:.1%}",
                     "sent/task": f"{moved / 1e6:.2f} MB",
                     "max rel. diff": f"{error:.1e}"})
    print_table(rows, ["setup", "time", "vs 1 worker", "vs single", "outside tasks",
                       "sent/task", "max rel. diff"],
                title=f"W1 full-batch gradient, {args.rows:,} rows in chunks of {args.chunk:,} "
                      f"(median of {args.repeats})")
    print(f"\nshipped: artifact {artifact_bytes / 1e6:.2f} MB once per worker; replicated "
          f"parameters {param_bytes / 1e6:.2f} MB once per worker per run; one chunk's task "
          f"spec {spec_bytes / 1e3:.1f} kB")


if __name__ == "__main__":
    main()
