"""Quickstart: build a small program, differentiate it, compile it, show the generated source.

Prints the program as built (forward and backward); the optimized program that
``sg.compile`` generated the source from (``fn.ir``: the passes drop, merge and fuse ops, so an
op may read other Values there, ``%9 = size(%6)`` becoming ``%9 = size(%3)``); and the
generated source, whose comments quote the optimized program.

Run: python examples/quickstart.py
"""
import numpy as np

import symgrad as sg
from symgrad import ir_backward


def build():
    """Returns (program, fetch_list): usable with `symgrad dump examples/quickstart.py`."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape=[None, 4], dtype="float32")
        w = sg.parameter("w", shape=[4, 3], dtype="float32",
                         init=np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3))
        b = sg.parameter("b", shape=[3], dtype="float32", init=np.zeros(3, "float32"))
        hidden = sg.tanh(x @ w + b)
        loss = sg.mean(hidden * hidden)
        grad_w, grad_b = ir_backward.grad(loss, [w, b])
    return prog, [loss, grad_w, grad_b]


def main():
    prog, fetches = build()
    print("== the program as built (forward and backward) ==")
    print(prog)

    x = np.arange(8, dtype="float32").reshape(2, 4) / 8
    fn = sg.compile(prog, fetch_list=fetches, backend="numpy")
    loss, grad_w, grad_b = fn(x=x)
    print("\n== the optimized program the source is generated from (fn.ir) ==")
    print(fn.ir)
    print("\n== generated NumPy source (its comments quote the optimized program) ==")
    print(fn.source)
    print("== results ==")
    print("loss   =", loss)
    print("grad_w =\n", grad_w)
    print("grad_b =", grad_b)

    reference = sg.compile(prog, fetch_list=fetches, backend="interpreter")(x=x)
    for got, want in zip((loss, grad_w, grad_b), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print("\nmatches the reference interpreter")


if __name__ == "__main__":
    main()
