"""The backward pass is iterative and linear: a 100,000-op chain differentiates without a
recursion error and computes the right gradient."""
import sys
import time

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


def _scan_with_a_long_body(n):
    """A scan whose body is a chain of about ``n`` ops, nearly each of whose results the
    backward reads (so the forward scan records about ``n`` residuals), also reading
    constants and a captured Value, with per-step outputs; returns ``(loss, [init, w])``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")

        def body(c, _):
            ys = []
            for step in range(n // 4):
                c = c * sg.sin(c) * w * 0.5
                if step % 50 == 0:
                    ys.append(c)
            return c, tuple(ys)

        c, ys = sg.scan(body, x, length=3)
        loss = sg.sum(c) + sum(sg.sum(y) for y in ys)
    return loss, [x, w]


def _grad_seconds(n, repeats) -> float:
    """The best of ``repeats`` times of ``grad`` through a body of about ``n`` ops."""
    best = float("inf")
    for _ in range(repeats):
        loss, inputs = _scan_with_a_long_body(n)
        start = time.process_time()
        ir_backward.grad(loss, inputs)
        best = min(best, time.process_time() - start)
    return best


def test_grad_through_a_scan_body_is_linear_in_the_body_size():
    """8 times the body, about 8 times the time (a step quadratic in the body's size made it
    about 40): the growth ratio, with a margin for a busy machine, not an absolute time."""
    small, large = _grad_seconds(1000, repeats=5), _grad_seconds(8000, repeats=2)
    assert large / small < 20, f"{small:.4f} s -> {large:.4f} s"
