"""The n-th derivative of sin, n = 1..10, by calling ``grad`` on its own result.

Each ``grad(..., create_graph=True)`` returns a differentiable gradient, so differentiating it
again gives the next order. Checked against the closed form d^n/dx^n sin(x) = sin(x + n*pi/2).
Run: python examples/nth_derivative.py   (exits non-zero if a check fails)
"""
import sys

import numpy as np

import symgrad as sg
from symgrad import ir_backward

ORDERS = 10


def main():
    xs = np.linspace(-3.0, 3.0, 7)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        derivative = sg.sin(x)
    derivatives = []
    for _ in range(ORDERS):
        # Elementwise function: the ones seed gives d/dx of each element.
        derivative, = ir_backward.grad(derivative, x, create_graph=True)
        derivatives.append(derivative)
    values = sg.compile(prog, derivatives, backend="numpy")(x=xs)

    ok = True
    print(f"program: {prog.num_ops} ops")
    print(f"{'n':>2}  {'max |error|':>11}  check")
    for n, value in enumerate(values, start=1):
        error = float(np.max(np.abs(value - np.sin(xs + n * np.pi / 2))))
        passed = error < 1e-12
        ok &= passed
        print(f"{n:>2}  {error:11.2e}  {'ok' if passed else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
