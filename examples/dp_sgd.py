"""Differentially private SGD (DP-SGD) on scikit-learn's digits, with per-example gradients
from ``sg.vmap``.

DP-SGD (Abadi et al., 2016) bounds how much any one training example can move the model: each
example's gradient is clipped to an L2 norm of at most ``CLIP``, the clipped gradients are
summed, Gaussian noise of standard deviation ``NOISE * CLIP`` is added, and the sum divided by
the batch size is the update's gradient. That needs the gradient of every example on its own,
which is what ``sg.vmap`` of a function calling ``ir_backward.grad`` builds: one batched
backward, not one backward per example (the program does not grow with the batch, and no
per-example loop appears in the generated code). The noise comes from ``sg.random.normal``,
drawn afresh by every step; Adam applies the noisy gradients (``apply_gradients``).

Asserts a test accuracy of at least 90% (about 94%; no privacy accounting is done here), that
the per-example gradients equal those of the examples' own programs, and that the program has
the same number of ops for a batch of 64 and a batch of 1,000.

Run: python examples/dp_sgd.py          (SYMGRAD_EXAMPLE_QUICK=1: fewer epochs)
"""
import os
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import symgrad as sg
from symgrad import ir_backward, nn

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
EPOCHS = 12 if QUICK else 20
BATCH = 64
HIDDEN = 64
CLIP = 1.0       # the bound on each example's gradient norm
NOISE = 0.5      # the noise's standard deviation, in units of CLIP
TARGET = 0.90


def build(rng, batch=BATCH):
    """``(program, parameters, per-example gradients, logits)``: the training step (clipped
    per-example gradients, noise, Adam) for batches of ``batch`` examples, and the logits of
    the data ``x_eval`` for evaluation."""
    sizes = [64, HIDDEN, 10]
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 64])
        y = sg.data("y", [batch], "int64")
        x_eval = sg.data("x_eval", [None, 64])
        params = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            he = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)
            params += [sg.parameter(f"w{i}", [fan_in, fan_out], init=he.astype("float32")),
                       sg.parameter(f"b{i}", [fan_out], init=0.0)]

        def forward(h):
            w1, b1, w2, b2 = params
            return nn.linear(nn.relu(nn.linear(h, w1, b1)), w2, b2)

        def clipped_gradients(image, label):
            """One example's gradients, scaled down together to a norm of at most CLIP."""
            loss = nn.softmax_cross_entropy(forward(image[None]), label[None])
            grads = ir_backward.grad(loss, params)
            norm = sg.sqrt(sum(sg.sum(g * g) for g in grads))
            scale = sg.minimum(1.0, CLIP / (norm + 1e-12))
            return [g * scale for g in grads]

        per_example = sg.vmap(clipped_gradients)(x, y)     # each [batch, *param.shape]
        noisy = [(sg.sum(g, axis=0) + sg.random.normal(list(p.shape), std=NOISE * CLIP,
                                                       seed=17 + i)) / batch
                 for i, (g, p) in enumerate(zip(per_example, params))]
        sg.optimizer.Adam(learning_rate=3e-3).apply_gradients(list(zip(params, noisy)))
        logits = forward(x_eval)
    return prog, params, per_example, logits


def check_per_example_gradients(rng, x, y):
    """The vmapped gradients of a few examples equal each example's own (unclipped ones
    are compared where the clip leaves them alone; the scale is checked otherwise)."""
    prog, params, per_example, _ = build(rng, batch=len(x))
    fn = sg.compile(prog, per_example, backend="numpy", updates=False)
    batched = fn(x=x, y=y)
    with sg.program_guard(sg.Program()) as single:
        image, label = sg.data("image", [64]), sg.data("label", [], "int64")
        weights = [sg.data(f"p{i}", list(p.shape)) for i, p in enumerate(params)]
        h = nn.relu(nn.linear(image[None], weights[0], weights[1]))
        loss = nn.softmax_cross_entropy(nn.linear(h, weights[2], weights[3]), label[None])
        grads = ir_backward.grad(loss, weights)
    own = sg.compile(single, grads, backend="numpy")
    values = {f"p{i}": fn.state[p.name] for i, p in enumerate(params)}
    for k in range(len(x)):
        expected = own(image=x[k], label=y[k], **values)
        norm = np.sqrt(sum(float(np.sum(g.astype("float64") ** 2)) for g in expected))
        scale = min(1.0, CLIP / (norm + 1e-12))
        for got, want in zip(batched, expected):
            np.testing.assert_allclose(got[k], want * scale, rtol=2e-4, atol=1e-6)


def main():
    digits = load_digits()
    x_all = (digits.data / 16.0).astype("float32")
    y_all = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(
        x_all, y_all, test_size=0.25, random_state=0, stratify=y_all)

    rng = np.random.default_rng(0)
    check_per_example_gradients(np.random.default_rng(1), x_train[:8], y_train[:8])
    prog, _, _, logits = build(rng)
    sizes = {batch: build(np.random.default_rng(0), batch)[0].num_ops for batch in (64, 1000)}
    assert sizes[64] == sizes[1000], sizes
    train = sg.compile(prog, [], backend="numpy")
    predict = sg.compile(prog, [logits], backend="numpy", updates=False, state=train.state)
    assert "scan" not in train.source      # every op of the batched backward has a rule
    print(f"program: {prog.num_ops} ops for a batch of {BATCH} ({sizes[1000]} ops for a "
          f"batch of 1000): per-example gradients, clipping, noise and Adam")

    steps = len(x_train) // BATCH
    start = time.perf_counter()
    for epoch in range(1, EPOCHS + 1):
        order = rng.permutation(len(x_train))
        for step in range(steps):
            batch = order[step * BATCH:(step + 1) * BATCH]
            train(x=x_train[batch], y=y_train[batch])
    elapsed = time.perf_counter() - start

    def accuracy(x, y):
        (scores,) = predict(x_eval=x)
        return float(np.mean(scores.argmax(axis=1) == y))

    test_accuracy = accuracy(x_test, y_test)
    print(f"trained {EPOCHS} epochs ({EPOCHS * steps} steps, clip {CLIP}, noise {NOISE}) in "
          f"{elapsed:.1f} s: train accuracy {accuracy(x_train, y_train):.2%}, test accuracy "
          f"{test_accuracy:.2%}")
    assert test_accuracy >= TARGET, test_accuracy


if __name__ == "__main__":
    main()
