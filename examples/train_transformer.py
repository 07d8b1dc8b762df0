"""Train a small transformer block to reverse sequences of digits, the training step compiled.

The model is one pre-norm transformer block (Vaswani et al. 2017, as in GPT-2): token and
position embeddings (``nn.embedding``), ``nn.layer_norm``, single-head self-attention written
with ``sg.einsum`` and ``nn.softmax``, and an MLP (``nn.gelu``), then a linear read-out of a
digit per position. The task: given 8 random digits, output them in reverse order, which the
attention has to learn to route (position i reads position 7 - i). Each call of the compiled
program is one Adam step on a fresh batch; the parameters and Adam's state live in the
program.

Asserts that the mean cross-entropy of the last 20 steps falls below LOSS_TARGET (0.05 nats per
digit: the model then reverses over 99% of the digits) within 300 steps, a few seconds on 2
cores; the quick mode (SYMGRAD_EXAMPLE_QUICK=1) trains 60 steps to a target of 0.5.

Run: python examples/train_transformer.py          (SYMGRAD_EXAMPLE_QUICK=1: fewer steps)
"""
import os
import sys
import time

import numpy as np

import symgrad as sg
from symgrad import nn

QUICK = os.environ.get("SYMGRAD_EXAMPLE_QUICK") == "1"
STEPS = 60 if QUICK else 300
LOSS_TARGET = 0.5 if QUICK else 0.05   # nats per digit, mean of the last 20 steps
VOCAB, LENGTH, WIDTH, HIDDEN, BATCH = 10, 8, 32, 64, 64


def build(rng):
    """The training program: ``(program, loss, predictions)``; ``minimize`` has appended the
    backward and Adam's updates."""
    def weight(name, shape, scale=None):
        scale = 1 / np.sqrt(shape[0]) if scale is None else scale
        return sg.parameter(name, list(shape),
                            init=(rng.standard_normal(shape) * scale).astype("float32"))

    prog = sg.Program()
    with sg.program_guard(prog):
        digits = sg.data("digits", [None, LENGTH], "int64")
        targets = sg.data("targets", [None, LENGTH], "int64")
        tokens = weight("tokens", (VOCAB, WIDTH), 0.5)
        positions = weight("positions", (LENGTH, WIDTH), 0.5)
        wq, wk, wv, wo = (weight(name, (WIDTH, WIDTH)) for name in ("wq", "wk", "wv", "wo"))
        w1, w2 = weight("w1", (WIDTH, HIDDEN)), weight("w2", (HIDDEN, WIDTH))
        b1 = sg.parameter("b1", [HIDDEN], init=0.0)
        read_out = weight("read_out", (WIDTH, VOCAB))
        norms = [(sg.parameter(f"norm{i}_scale", [WIDTH], init=1.0),
                  sg.parameter(f"norm{i}_shift", [WIDTH], init=0.0)) for i in range(3)]

        h = nn.embedding(digits, tokens) + positions                  # [batch, 8, width]
        a = nn.layer_norm(h, *norms[0])
        q, k, v = a @ wq, a @ wk, a @ wv
        scores = sg.einsum("bqd,bkd->bqk", q, k) * float(1 / np.sqrt(WIDTH))
        attended = sg.einsum("bqk,bkd->bqd", nn.softmax(scores, axis=-1), v)
        h = h + attended @ wo
        h = h + nn.linear(nn.gelu(nn.linear(nn.layer_norm(h, *norms[1]), w1, b1)), w2)
        logits = nn.layer_norm(h, *norms[2]) @ read_out                # [batch, 8, vocab]
        loss = nn.softmax_cross_entropy(logits, targets)
        predictions = sg.argmax(logits, axis=-1)
        sg.optimizer.Adam(learning_rate=1e-2).minimize(loss)
    return prog, loss, predictions


def batch(rng, size=BATCH):
    digits = rng.integers(0, VOCAB, (size, LENGTH))
    return {"digits": digits, "targets": digits[:, ::-1].copy()}


def main():
    rng = np.random.default_rng(0)
    prog, loss, predictions = build(rng)
    train = sg.compile(prog, [loss])
    predict = sg.compile(prog, [predictions], updates=False, state=train.state)
    print(f"program: {prog.num_ops} ops; train step: {train.stats['fused_groups']} fused groups; "
          f"{sum(np.size(a) for a in train.state.values())} numbers of state")
    losses = []
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        (value,) = train(**batch(rng))
        losses.append(float(value))
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}: loss {np.mean(losses[-20:]):.4f}")
    elapsed = time.perf_counter() - start
    final = float(np.mean(losses[-20:]))
    test = batch(np.random.default_rng(1), 1000)
    (guessed,) = predict(digits=test["digits"])
    accuracy = float(np.mean(guessed == test["targets"]))
    print(f"{STEPS} steps in {elapsed:.1f} s: loss {losses[0]:.3f} -> {final:.4f}; "
          f"reverses {accuracy:.2%} of the digits of 1,000 new sequences")
    assert final < LOSS_TARGET, f"loss {final:.4f} is not below {LOSS_TARGET}"
    print(f"loss below {LOSS_TARGET}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
