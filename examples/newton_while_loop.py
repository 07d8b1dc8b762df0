"""Differentiate through a Newton solver written with ``sg.while_loop``.

Kepler's equation ``E - e sin(E) = M`` gives the eccentric anomaly ``E`` of an orbit of
eccentricity ``e`` at mean anomaly ``M``; it has no closed form, so ``E`` is found by Newton's
iteration ``E <- E - (E - e sin E - M) / (1 - e cos E)``, repeated *until the residual is
below a tolerance*: a loop whose trip count depends on the data. ``ir_backward.grad``
differentiates ``E`` with respect to ``e`` and ``M`` straight through the loop: the forward
records what each iteration's backward needs, and the backward runs the recorded trip count in
reverse (JAX's ``while_loop`` refuses reverse mode).

Asserts: the gradients through the iterations equal the implicit-function derivatives
``dE/dM = 1 / (1 - e cos E)`` and ``dE/de = sin E / (1 - e cos E)``; the second derivative
(``create_graph=True``) matches finite differences of the first; NumPy matches the
interpreter.

Run: python examples/newton_while_loop.py
"""
import sys

import numpy as np

import symgrad as sg
from symgrad import ir_backward

TOLERANCE = 1e-12


def build():
    prog = sg.Program()
    with sg.program_guard(prog):
        mean_anomaly = sg.data("M", [None], "float64")
        e = sg.data("e", [], "float64")

        def not_converged(E, iterations):
            residual = E - e * sg.sin(E) - mean_anomaly
            return sg.max(sg.abs(residual)) > TOLERANCE

        def newton_step(E, iterations):
            residual = E - e * sg.sin(E) - mean_anomaly
            return [E - residual / (1.0 - e * sg.cos(E)), iterations + 1]

        E, iterations = sg.while_loop(not_converged, newton_step,
                                      [mean_anomaly, sg.constant(np.int64(0))])
        total = sg.sum(E)
        dE_dM, dE_de = ir_backward.grad(total, [mean_anomaly, e], create_graph=True)
        (d2E_de2,) = ir_backward.grad(dE_de, [e])
    return prog, (mean_anomaly, e), (E, iterations, dE_dM, dE_de, d2E_de2)


def main():
    prog, _, fetches = build()
    solve = sg.compile(prog, list(fetches), backend="numpy")
    M = np.linspace(0.1, 3.0, 7)
    e = np.float64(0.6)
    E, iterations, dE_dM, dE_de, d2E_de2 = solve(M=M, e=e)
    print(f"Newton converged in {int(iterations)} iterations; E = {np.round(E, 6)}")
    np.testing.assert_allclose(E - e * np.sin(E), M, atol=1e-11)

    implicit_dM = 1 / (1 - e * np.cos(E))
    implicit_de = np.sum(np.sin(E) / (1 - e * np.cos(E)))
    np.testing.assert_allclose(dE_dM, implicit_dM, rtol=1e-9)
    np.testing.assert_allclose(dE_de, implicit_de, rtol=1e-9)
    print(f"dE/dM through {int(iterations)} iterations = implicit derivative "
          f"(max difference {np.abs(dE_dM - implicit_dM).max():.1e})")

    h = 1e-5
    numeric = (solve(M=M, e=e + h)[3] - solve(M=M, e=e - h)[3]) / (2 * h)
    np.testing.assert_allclose(d2E_de2, numeric, rtol=1e-5)
    print(f"d2(sum E)/de2 = {float(d2E_de2):.6f} matches finite differences ({float(numeric):.6f})")

    reference = sg.compile(prog, list(fetches), backend="interpreter")(M=M, e=e)
    for got, want in zip(solve(M=M, e=e), reference):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    print("NumPy backend matches the interpreter: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
