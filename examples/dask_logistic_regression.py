"""Data-parallel training on Dask: logistic regression with Adam over 2,000,000 rows.

The loss, its gradient and an accuracy count form one compiled symgrad program.
``symgrad.distributed.map_reduce`` runs it on every 250,000-row chunk of a Dask array on a
cluster of worker processes and reduces the chunks' results: the loss and the gradients
averaged by rows, the correct predictions summed. The workers run the program's NumPy-only
artifact, which is sent to each of them once. The Adam update is a second, small program on the
driver (``sg.optimizer.Adam(...).apply_gradients`` on the averaged gradients, fed as inputs);
the two programs share their state (the parameters), so ``map_reduce`` sends the parameters'
current values to the workers with every step. Dask's progress bar shows each step's tasks
when the output is a terminal (piped into a file, only the lines of the steps are written).

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


def build_programs():
    """``(gradients, update)``: the first fetches the mean loss, its gradients and the
    correct count; the second applies Adam to gradients fed as inputs. They share their state,
    the parameters ``w`` and ``b``."""
    import symgrad as sg
    from symgrad import ir_backward, nn

    def parameters():
        return (sg.parameter("w", [FEATURES], "float32", init=0.0),
                sg.parameter("b", [], "float32", init=0.0))

    prog = sg.Program()
    with sg.program_guard(prog):
        w, b = parameters()
        grad_w = sg.data("grad_w", [FEATURES], "float32")
        grad_b = sg.data("grad_b", [], "float32")
        sg.optimizer.Adam(learning_rate=0.1).apply_gradients([(w, grad_w), (b, grad_b)])
    update = sg.compile(prog, [])

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, FEATURES], "float32")
        y = sg.data("y", [None], "float32")                  # labels 0 or 1
        w, b = parameters()
        z = x @ w + b
        loss = sg.mean(nn.softplus(z) - y * z)               # binary cross-entropy on logits
        grad_w, grad_b = ir_backward.grad(loss, [w, b])
        correct = sg.sum(sg.cast(sg.equal(sg.cast(z > 0, "float32"), y), "int64"))
    # One thread per program: each Dask worker is one core's worth of work.
    gradients = sg.compile(prog, [loss, grad_w, grad_b, correct], threads=1, state=update.state)
    return gradients, update


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


def progress_bar(*futures):
    """Dask's progress bar over ``futures`` until they are done, on a terminal only: it redraws
    itself with carriage returns and escape sequences, kilobytes of them in a file or a pipe."""
    if sys.stdout.isatty():
        from distributed import progress

        progress(*futures)


def train(client, gradients, update):
    from distributed import wait

    from symgrad.distributed import map_reduce

    x, y, true_w, true_b = make_data()
    print(f"making {ROWS:,} rows x {FEATURES} features in {x.numblocks[0]} chunks on "
          f"{len(client.scheduler_info()['workers'])} workers")
    x, y = client.persist([x, y])
    progress_bar(x, y)
    wait([x, y])

    history = []
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        lazy = map_reduce(gradients, {"x": x, "y": y},   # with the current w and b
                          reduce=["mean", "mean", "mean", "sum"], compute=False)
        futures = client.compute(lazy)
        progress_bar(futures)
        loss, grad_w, grad_b, correct = client.gather(futures)
        update(grad_w=grad_w, grad_b=grad_b)
        history.append((float(loss), int(correct) / ROWS))
        print(f"  step {step:2d}/{STEPS}  loss {loss:.4f}  accuracy {history[-1][1]:.2%}")
    elapsed = time.perf_counter() - start
    print(f"{STEPS} full-batch steps over {ROWS:,} rows in {elapsed:.1f} s")

    # The model that generated the labels, for comparison.
    best_loss, _, _, best_correct = map_reduce(
        gradients, {"x": x, "y": y}, replicated={"w": true_w, "b": true_b},
        reduce=["mean", "mean", "mean", "sum"])
    return history, np.array(update.state["w"]), true_w, float(best_loss), \
        int(best_correct) / ROWS


def main(argv):
    from distributed import Client, LocalCluster

    programs = build_programs()
    if len(argv) > 1:                                    # a scheduler address
        with Client(argv[1]) as client:
            result = train(client, *programs)
    else:
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            result = train(client, *programs)
    history, w, true_w, best_loss, best_accuracy = result

    cosine = float(w @ true_w / np.linalg.norm(w) / np.linalg.norm(true_w))
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
