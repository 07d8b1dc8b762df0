"""Train a small MLP on scikit-learn's digits with the whole training step in one program.

The program holds the forward pass (with dropout), the loss and -- appended by
``sg.optimizer.Adam(...).minimize(loss)`` -- the backward pass and Adam's update of every
parameter. Compiled once, each call is one training step: it feeds a batch of images and
labels, nothing else. The parameters, Adam's moments and step count and the dropout's step
counter are the compiled program's state (``train.state``), which the generated code updates
in place; no parameter travels through Python between steps. A second program compiled from
the same Program fetches the logits without dropout and reads the same state (``updates=False``,
``state=train.state``) to measure the accuracy.

The digits data (1,797 8x8 images) ships inside scikit-learn: nothing is downloaded.
Asserts a test accuracy of at least 97%.

Run: python examples/train_mlp_digits.py          (SYMGRAD_EXAMPLE_QUICK=1: fewer epochs)
"""
import os
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import symgrad as sg
from symgrad import nn

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
EPOCHS = 10 if QUICK else 30
BATCH = 64
HIDDEN = 128
DROPOUT = 0.2
TARGET = 0.97


def build(rng):
    """The program: ``(program, loss, logits)``. ``loss`` is computed with dropout, and
    ``minimize`` has appended the backward and the updates; ``logits`` (no dropout) are for
    evaluation. Weights start He-initialized, biases at zero."""
    sizes = [64, HIDDEN, HIDDEN, 10]
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape=[None, 64], dtype="float32")
        y = sg.data("y", shape=[None], dtype="int64")
        layers = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            he = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)
            layers.append((sg.parameter(f"w{i}", [fan_in, fan_out], init=he.astype("float32")),
                           sg.parameter(f"b{i}", [fan_out], init=0.0)))

        def forward(training):
            h = x
            for w, b in layers[:-1]:
                h = nn.dropout(nn.relu(nn.linear(h, w, b)), DROPOUT, training=training)
            return nn.linear(h, *layers[-1])

        loss = nn.softmax_cross_entropy(forward(training=True), y)
        logits = forward(training=False)
        sg.optimizer.Adam(learning_rate=3e-3).minimize(loss)
    return prog, loss, logits


def progress(epoch, step, steps, loss, width=30):
    """One plain-text progress bar line, redrawn in place on a terminal; in a file or a pipe
    only the epoch's finished line is written (no carriage returns)."""
    terminal = sys.stdout.isatty()
    if not terminal and step < steps:
        return
    done = width * step // steps
    bar = "#" * done + "." * (width - done)
    start, end = "\r" if terminal else "", "\n" if step == steps else ""
    print(f"{start}epoch {epoch:2d}/{EPOCHS} [{bar}] {step:3d}/{steps} loss {loss:.4f}", end=end,
          flush=True)


def main():
    digits = load_digits()
    x_all = (digits.data / 16.0).astype("float32")        # pixels 0..16 -> 0..1
    y_all = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(
        x_all, y_all, test_size=0.25, random_state=0, stratify=y_all)

    rng = np.random.default_rng(0)
    prog, loss, logits = build(rng)
    train = sg.compile(prog, [loss], backend="numpy")
    predict = sg.compile(prog, [logits], backend="numpy", updates=False, state=train.state)
    print(f"program: {prog.num_ops} ops (forward with dropout, backward, Adam); "
          f"train step: {train.stats['fused_groups']} fused groups, "
          f"{train.stats['source_lines']} lines of generated NumPy; state: "
          f"{', '.join(train.state)}")

    steps = (len(x_train) + BATCH - 1) // BATCH
    start = time.perf_counter()
    for epoch in range(1, EPOCHS + 1):
        order = rng.permutation(len(x_train))
        for step in range(1, steps + 1):
            batch = order[(step - 1) * BATCH: step * BATCH]
            (loss_v,) = train(x=x_train[batch], y=y_train[batch])
            if step % 4 == 0 or step == steps:
                progress(epoch, step, steps, float(loss_v))
    elapsed = time.perf_counter() - start

    def accuracy(x, y):
        (scores,) = predict(x=x)
        return float(np.mean(scores.argmax(axis=1) == y))

    test_accuracy = accuracy(x_test, y_test)
    print(f"trained {EPOCHS} epochs ({EPOCHS * steps} steps, Adam step "
          f"{int(train.state['w1@adam_t'])}) in {elapsed:.1f} s: train accuracy "
          f"{accuracy(x_train, y_train):.2%}, test accuracy {test_accuracy:.2%}")

    # One more step on the reference interpreter from a copy of the state gives the same
    # loss and the same updated parameters (the same dropout masks included).
    check = sg.compile(prog, [loss], backend="interpreter")
    check.state.update(train.state)
    batch = {"x": x_test[:BATCH], "y": y_test[:BATCH]}
    np.testing.assert_allclose(train(**batch)[0], check(**batch)[0], rtol=1e-4)
    for name in train.state:
        np.testing.assert_allclose(train.state[name], check.state[name], rtol=1e-3, atol=1e-6)

    assert test_accuracy >= TARGET, f"test accuracy {test_accuracy:.2%} is below {TARGET:.0%}"
    print(f"test accuracy at least {TARGET:.0%}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
