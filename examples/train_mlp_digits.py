"""Train a small MLP on scikit-learn's digits with compiled gradients (NumPy backend).

The program holds the forward pass, the loss and -- appended by ``ir_backward.grad`` -- the
backward pass. It is compiled once; each training step feeds a batch and the current
parameters, fetches the loss and the gradients, and applies an Adam update in NumPy.

The digits data (1,797 8x8 images) ships inside scikit-learn: nothing is downloaded.
Asserts a test accuracy above 95%.

Run: python examples/train_mlp_digits.py          (SYMGRAD_EXAMPLE_QUICK=1: fewer epochs)
"""
import os
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import symgrad as sg
from symgrad import ir_backward, nn

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
EPOCHS = 15 if QUICK else 40
BATCH = 64
HIDDEN = 64


def init_params(rng, sizes):
    """He-initialised weights [in, out] and zero biases, as a dict name -> array."""
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype("float32")
        params[f"b{i}"] = np.zeros(fan_out, "float32")
    return params


def build(params):
    """The training program: returns (program, logits, loss, {name: gradient Value})."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape=[None, 64], dtype="float32")
        y = sg.data("y", shape=[None], dtype="int64")
        p = {name: sg.parameter(name, shape=list(a.shape), dtype="float32", init=a)
             for name, a in params.items()}
        h = nn.relu(nn.linear(x, p["w1"], p["b1"]))
        h = nn.relu(nn.linear(h, p["w2"], p["b2"]))
        logits = nn.linear(h, p["w3"], p["b3"])
        loss = nn.softmax_cross_entropy(logits, y)
        grads = ir_backward.grad(loss, list(p.values()))
    return prog, logits, loss, dict(zip(p, grads))


class Adam:
    """Plain NumPy Adam over a dict of arrays."""

    def __init__(self, params, lr=3e-3, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params, grads):
        self.t += 1
        for k, g in grads.items():
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            m_hat = self.m[k] / (1 - self.b1 ** self.t)
            v_hat = self.v[k] / (1 - self.b2 ** self.t)
            params[k] -= (self.lr * m_hat / (np.sqrt(v_hat) + self.eps)).astype(params[k].dtype)


def progress(epoch, step, steps, loss, width=30):
    """One plain-text progress bar line, redrawn in place."""
    done = width * step // steps
    bar = "#" * done + "." * (width - done)
    end = "\n" if step == steps else ""
    print(f"\repoch {epoch:2d}/{EPOCHS} [{bar}] {step:3d}/{steps} loss {loss:.4f}", end=end,
          flush=True)


def main():
    digits = load_digits()
    x_all = (digits.data / 16.0).astype("float32")        # pixels 0..16 -> 0..1
    y_all = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(
        x_all, y_all, test_size=0.25, random_state=0, stratify=y_all)

    rng = np.random.default_rng(0)
    params = init_params(rng, [64, HIDDEN, HIDDEN, 10])
    prog, logits, loss, grads = build(params)
    names = list(grads)
    train_step = sg.compile(prog, fetch_list=[loss] + [grads[n] for n in names], backend="numpy")
    predict = sg.compile(prog, fetch_list=[logits], backend="numpy")
    print(f"program: {prog.num_ops} ops (forward + backward); "
          f"train step: {train_step.stats['fused_groups']} fused groups, "
          f"{train_step.stats['source_lines']} lines of generated NumPy")

    optimizer = Adam(params)
    steps = (len(x_train) + BATCH - 1) // BATCH
    start = time.perf_counter()
    for epoch in range(1, EPOCHS + 1):
        order = rng.permutation(len(x_train))
        for step in range(1, steps + 1):
            batch = order[(step - 1) * BATCH: step * BATCH]
            loss_v, *grad_vs = train_step(x=x_train[batch], y=y_train[batch], **params)
            optimizer.step(params, dict(zip(names, grad_vs)))
            if step % 4 == 0 or step == steps:
                progress(epoch, step, steps, float(loss_v))
    elapsed = time.perf_counter() - start

    (test_logits,) = predict(x=x_test, **params)
    accuracy = float(np.mean(test_logits.argmax(axis=1) == y_test))
    (train_logits,) = predict(x=x_train, **params)
    train_accuracy = float(np.mean(train_logits.argmax(axis=1) == y_train))
    print(f"trained {EPOCHS} epochs in {elapsed:.1f} s: "
          f"train accuracy {train_accuracy:.2%}, test accuracy {accuracy:.2%}")

    # The compiled gradients agree with the reference interpreter on the trained parameters.
    check = sg.compile(prog, fetch_list=[loss] + [grads[n] for n in names], backend="interpreter")
    for got, want in zip(train_step(x=x_test, y=y_test, **params), check(x=x_test, y=y_test, **params)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    assert accuracy > 0.95, f"test accuracy {accuracy:.2%} is not above 95%"
    print("test accuracy above 95%: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
