"""A gradient penalty (double backward) on a small conv net, checked by finite differences.

    logits = linear(flatten(max_pool2d(relu(conv2d(x, w1, b1)), 2)), w2, b2)
    ce     = softmax_cross_entropy(logits, labels)
    total  = ce + lam * sum_p |d ce / d p|^2        (the gradients built with create_graph=True)

``grad(total, params)`` differentiates through the backward of ``ce``; it is compared with
central differences of ``total`` over every parameter entry.
Run: python examples/gradient_penalty.py   (exits non-zero if the check fails)
"""
import sys

import numpy as np

import symgrad as sg
from symgrad import ir_backward

LAM = 0.1
EPS = 1e-6


def build(rng):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 1, 6, 6], "float64")
        labels = sg.data("labels", [None], "int64")
        params = [
            sg.parameter("w1", [3, 1, 3, 3], "float64", init=rng.normal(0, 0.5, (3, 1, 3, 3))),
            sg.parameter("b1", [3], "float64", init=rng.normal(0, 0.1, 3)),
            sg.parameter("w2", [12, 4], "float64", init=rng.normal(0, 0.5, (12, 4))),
            sg.parameter("b2", [4], "float64", init=rng.normal(0, 0.1, 4)),
        ]
        w1, b1, w2, b2 = params
        h = sg.nn.max_pool2d(sg.nn.relu(sg.nn.conv2d(x, w1, b1)), 2)    # [N, 3, 2, 2]
        logits = sg.nn.linear(sg.reshape(h, [-1, 12]), w2, b2)
        ce = sg.nn.softmax_cross_entropy(logits, labels)
        grads = ir_backward.grad(ce, params, create_graph=True)
        penalty = (grads[0] * grads[0]).sum()
        for g in grads[1:]:
            penalty = penalty + (g * g).sum()
        total = ce + LAM * penalty
        total_grads = ir_backward.grad(total, params)
    return prog, params, total, total_grads


def main():
    rng = np.random.default_rng(0)
    prog, params, total, total_grads = build(rng)
    feeds = {"x": rng.normal(size=(2, 1, 6, 6)), "labels": np.array([1, 3])}
    values = {p.name: np.array(p.op.attrs["init"]) for p in params}
    loss_fn = sg.compile(prog, [total], backend="numpy")
    grad_fn = sg.compile(prog, total_grads, backend="numpy")
    analytic = grad_fn(**feeds, **values)

    worst = 0.0
    for p, a in zip(params, analytic):
        numeric = np.zeros_like(a)
        for index in np.ndindex(a.shape):
            plus, minus = values[p.name].copy(), values[p.name].copy()
            plus[index] += EPS
            minus[index] -= EPS
            f_plus = loss_fn(**feeds, **{**values, p.name: plus})[0]
            f_minus = loss_fn(**feeds, **{**values, p.name: minus})[0]
            numeric[index] = (f_plus - f_minus) / (2 * EPS)
        error = float(np.max(np.abs(a - numeric)) / max(1.0, np.max(np.abs(numeric))))
        worst = max(worst, error)
        print(f"d total / d {p.name:<3} {str(list(a.shape)):<14} max relative error {error:.2e}")
    print(f"program: {prog.num_ops} ops ({sum(op.forward_op is not None for op in prog.ops)} "
          f"backward); total = {loss_fn(**feeds, **values)[0]:.6f}")
    passed = worst < 1e-6
    print("gradient penalty check:", "ok" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
