"""A user-defined op with its own backward, through ``sg.custom_op``.

``hypot(a, b) = sqrt(a**2 + b**2)`` is registered with a NumPy forward (``np.hypot``, which
does not overflow for large inputs the way the naive formula does), a shape rule, and a
backward written with symgrad ops::

    d hypot / d a = a / hypot,   d hypot / d b = b / hypot

Because the backward is built from symgrad ops, it is itself differentiable: second
derivatives come for free. The op then goes through the same machinery as a built-in op: it
is listed by ``sg.show_registry()``, printed in the IR, fused around, and called by name from
the generated NumPy module.

Asserts: first and second derivatives match central finite differences (float64), and the
compiled NumPy backend agrees with the reference interpreter.

Run: python examples/custom_op.py
"""
import io
import sys

import numpy as np

import symgrad as sg
from symgrad import ir_backward


def hypot_forward(a, b):
    """Elementwise sqrt(a**2 + b**2) without overflow (NumPy reference of the hypot op)."""
    return np.hypot(a, b)


def hypot_shape(a_type, b_type):
    """Both inputs share one shape and one float dtype; the result has them too."""
    (a_shape, a_dtype), (b_shape, b_dtype) = a_type, b_type
    if a_shape != b_shape or a_dtype != b_dtype:
        raise sg.ShapeError(f"hypot: inputs must match, got {a_dtype}{list(a_shape)} and "
                            f"{b_dtype}{list(b_shape)}")
    return a_shape, a_dtype


def hypot_backward(inputs, outputs, grad_outputs):
    """Gradients of hypot, written with symgrad ops (so they can be differentiated again)."""
    (a, b), (r,), (g,) = inputs, outputs, grad_outputs
    return [g * a / r, g * b / r]


hypot = sg.custom_op("hypot", forward=hypot_forward, infer_shape=hypot_shape,
                     backward=hypot_backward)


def build():
    """f(a, b) = sum(hypot(a, b) * w) and its first and second derivatives w.r.t. a."""
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", shape=[None], dtype="float64")
        b = sg.data("b", shape=[None], dtype="float64")
        w = sg.data("w", shape=[None], dtype="float64")
        f = sg.sum(hypot(a, b) * w)
        da, db = ir_backward.grad(f, [a, b], create_graph=True)
        (d2a,) = ir_backward.grad(sg.sum(da), [a])      # diagonal of the Hessian in a
    return prog, [f, da, db, d2a]


def central_difference(fn, x, eps=1e-6):
    """d fn / d x_i for every i, by central differences."""
    grad = np.zeros_like(x)
    for i in range(x.size):
        bump = np.zeros_like(x)
        bump[i] = eps
        grad[i] = (fn(x + bump) - fn(x - bump)) / (2 * eps)
    return grad


def main():
    table = sg.show_registry(file=io.StringIO())     # the table `symgrad ops` prints
    rows = [r for r in table if r["op"] == "hypot"]
    print("== the registry lists the new op ==")
    print(type(table)(rows))
    row = rows[0]
    assert row["user_defined"] and row["vjp"] and "numpy" in row["backends"]

    prog, fetches = build()
    fn = sg.compile(prog, fetch_list=fetches, backend="numpy")
    oracle = sg.compile(prog, fetch_list=fetches, backend="interpreter")
    assert "hypot_forward(" in fn.source, "the generated module calls the user's forward"
    print("\n== the generated module calls the user's forward by name ==")
    print("\n".join(line for line in fn.source.splitlines() if "hypot" in line))

    rng = np.random.default_rng(0)
    a, b, w = rng.normal(size=5), rng.normal(size=5), rng.normal(size=5)
    f, da, db, d2a = fn(a=a, b=b, w=w)
    for got, want in zip((f, da, db, d2a), oracle(a=a, b=b, w=w)):
        np.testing.assert_allclose(got, want, rtol=1e-12)

    def f_of(a_, b_):
        return float(np.sum(np.hypot(a_, b_) * w))

    np.testing.assert_allclose(da, central_difference(lambda x: f_of(x, b), a), rtol=1e-6)
    np.testing.assert_allclose(db, central_difference(lambda x: f_of(a, x), b), rtol=1e-6)
    # d2a[i] = d/da_i of sum_j df/da_j = d2f/da_i^2 (hypot is elementwise).
    grad_a = sg.compile(prog, fetch_list=[fetches[1]], backend="numpy")
    numeric_d2a = central_difference(lambda x: float(np.sum(grad_a(a=x, b=b, w=w)[0])), a)
    np.testing.assert_allclose(d2a, numeric_d2a, rtol=1e-5, atol=1e-8)
    print("\nf =", f)
    print("df/da =", da)
    print("d2f/da2 =", d2a)
    print("first and second derivatives match finite differences: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
