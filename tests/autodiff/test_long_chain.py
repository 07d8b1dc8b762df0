"""The backward pass is iterative and linear: a 100,000-op chain differentiates without a
recursion error and computes the right gradient."""
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import interpreter

N = 100_000


@pytest.mark.slow
def test_hundred_thousand_op_chain():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        y = x
        for _ in range(N):
            y = -y
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # any recursion over the graph would fail at once
    try:
        g, = ir_backward.grad(y, x)
    finally:
        sys.setrecursionlimit(limit)
    assert prog.num_ops == 2 * N + 2  # N negations back, plus the data op and the seed
    # The interpreter directly (sg.compile would first copy the 200,000-op program).
    out = interpreter.build(prog, [g], None).run({"x": np.array([1.0, 2.0])})[0]
    np.testing.assert_array_equal(out, np.ones(2))  # (-1) ** N with N even
