"""Data-parallel training on Dask: logistic regression with Adam over 2,000,000 rows.

The loss, its gradient and an accuracy count form one compiled symgrad program.
``symgrad.distributed.map_reduce`` runs it on every 250,000-row chunk of a Dask array on a
cluster of worker processes and reduces the chunks' results: the loss and the gradients
averaged by rows, the correct predictions summed. The workers run the program's NumPy-only
artifact, which is sent to each of them once. The parameters' current values go to the
workers as replicated inputs with every step, and the Adam update runs here, on the driver, in
NumPy (``sg.optimizer`` will later run it inside the program). Dask's progress bar shows
each step's tasks.

The data is made on the workers: 20 standard normal features and labels drawn from a
logistic model with known weights. Asserts that the loss falls, that the learned weights
point the way of the true ones and that the accuracy approaches the true model's.

Run: python examples/dask_logistic_regression.py                 (a LocalCluster, 2 workers)
     python examples/dask_logistic_regression.py tcp://host:8786  (an existing cluster)
SYMGRAD_EXAMPLE_QUICK=1 (the test suite's switch) trains on 40,000 rows for fewer steps.
"""
import os
import sys
import time

import numpy as np

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
ROWS = 40_000 if QUICK else 2_000_000
CHUNK = 10_000 if QUICK else 250_000
FEATURES = 20
STEPS = 15 if QUICK else 40


def build_program():
    """The training program: fetches the mean loss, its gradients and the correct count."""
    import symgrad as sg
    from symgrad import ir_backward, nn

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, FEATURES], "float32")
        y = sg.data("y", [None], "float32")                  # labels 0 or 1
        w = sg.parameter("w", [FEATURES], "float32", init=np.zeros(FEATURES, "float32"))
        b = sg.parameter("b", [], "float32", init=np.zeros((), "float32"))
        z = x @ w + b
        loss = sg.mean(nn.softplus(z) - y * z)               # binary cross-entropy on logits
        grad_w, grad_b = ir_backward.grad(loss, [w, b])
        correct = sg.sum(sg.cast(sg.equal(sg.cast(z > 0, "float32"), y), "int64"))
    # One thread per program: each Dask worker is one core's worth of work.
    return sg.compile(prog, [loss, grad_w, grad_b, correct], threads=1)


def make_data(seed=0):
    """Lazy Dask arrays: features and labels of a logistic model, and its true parameters."""
    import dask.array as da

    rng = np.random.default_rng(seed)
    true_w = rng.standard_normal(FEATURES).astype("float32")
    true_b = np.float32(0.5)
    draw = da.random.default_rng(seed)
    x = draw.standard_normal((ROWS, FEATURES), chunks=(CHUNK, FEATURES), dtype=np.float32)
    p = 1 / (1 + np.exp(-(x @ true_w + true_b)))
    y = (draw.random(ROWS, chunks=CHUNK, dtype=np.float32) < p).astype(np.float32)
    return x, y, true_w, true_b


class Adam:
    """Adam in NumPy on the driver (PyTorch's formula) over a dict of parameter arrays."""

    def __init__(self, params, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lr, self.beta1, self.beta2, self.eps, self.t = lr, beta1, beta2, eps, 0
        self.m = {name: np.zeros_like(value) for name, value in params.items()}
        self.v = {name: np.zeros_like(value) for name, value in params.items()}

    def step(self, params, grads):
        self.t += 1
        for name, g in grads.items():
            self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * g
            self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * g * g
            m_hat = self.m[name] / (1 - self.beta1 ** self.t)
            v_hat = self.v[name] / (1 - self.beta2 ** self.t)
            update = self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
            params[name] = (params[name] - update).astype(params[name].dtype)


def train(client, fn):
    from distributed import progress, wait

    from symgrad.distributed import map_reduce

    x, y, true_w, true_b = make_data()
    print(f"making {ROWS:,} rows x {FEATURES} features in {x.numblocks[0]} chunks on "
          f"{len(client.scheduler_info()['workers'])} workers")
    x, y = client.persist([x, y])
    progress(x, y)
    wait([x, y])
    print()

    params = {"w": np.zeros(FEATURES, "float32"), "b": np.zeros((), "float32")}
    optimizer = Adam(params)
    history = []
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        lazy = map_reduce(fn, {"x": x, "y": y}, replicated=params,
                          reduce=["mean", "mean", "mean", "sum"], compute=False)
        futures = client.compute(lazy)
        progress(futures)
        loss, grad_w, grad_b, correct = client.gather(futures)
        optimizer.step(params, {"w": grad_w, "b": grad_b})
        history.append((float(loss), int(correct) / ROWS))
        print(f"  step {step:2d}/{STEPS}  loss {loss:.4f}  accuracy {history[-1][1]:.2%}")
    elapsed = time.perf_counter() - start
    print(f"{STEPS} full-batch steps over {ROWS:,} rows in {elapsed:.1f} s")

    # The model that generated the labels, for comparison.
    best_loss, _, _, best_correct = map_reduce(
        fn, {"x": x, "y": y}, replicated={"w": true_w, "b": true_b},
        reduce=["mean", "mean", "mean", "sum"])
    return history, params, true_w, float(best_loss), int(best_correct) / ROWS


def main(argv):
    from distributed import Client, LocalCluster

    fn = build_program()
    if len(argv) > 1:                                    # a scheduler address
        with Client(argv[1]) as client:
            result = train(client, fn)
    else:
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            result = train(client, fn)
    history, params, true_w, best_loss, best_accuracy = result

    cosine = float(params["w"] @ true_w / np.linalg.norm(params["w"]) / np.linalg.norm(true_w))
    print(f"final loss {history[-1][0]:.4f} (true model {best_loss:.4f}), accuracy "
          f"{history[-1][1]:.2%} (true model {best_accuracy:.2%}), cosine(w, true w) "
          f"{cosine:.3f}")
    assert history[-1][0] < history[0][0] * 0.8, "the loss did not fall"
    assert cosine > 0.95, f"the learned weights point elsewhere (cosine {cosine:.3f})"
    assert history[-1][1] > best_accuracy - 0.05, "accuracy far below the true model's"
    print("loss falls, weights found, accuracy near the true model's: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
