"""Scans, while loops and checkpointed loops' backwards whose blocks C computes whole run as
loops in C (backends/c_backend/loops.py), against the interpreter: carries swapped, passed
through and stacked, reverse steps, a run-time trip count of zero, a dynamic batch, the
blocks' constants, every checkpoint schedule, failures inside the loop, and the Python loop
kept where a block's op runs on NumPy."""
from __future__ import annotations

import signal
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends.c_backend import blas, compiler

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

RNG = np.random.default_rng(5)
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


def _c_loops(compiled) -> int:
    return compiled.sources[".py"].count("a loop in C")


def _python_loops(compiled) -> int:
    return compiled.sources[".py"].count("    for _t")


def _assert_matches(prog, fetches, compiled, feeds, dtype="float64"):
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = compiled(**feeds)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def _rnn(dtype, batch, checkpoint=None):
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, batch, 6], dtype)
        h0 = sg.data("h0", [batch, 8], dtype)
        w = sg.data("w", [8, 8], dtype)
        u = sg.data("u", [6, 8], dtype)
        b = sg.data("b", [8], dtype)
        h, hs = sg.scan(lambda h, x: (sg.tanh(h @ w + x @ u + b),) * 2, h0, xs,
                        checkpoint=checkpoint)
        loss = sg.mean(h * h) + sg.sum(hs) * 0.01
        fetches = [loss, hs, *ir_backward.grad(loss, [w, u, b, h0, xs])]
    return prog, fetches


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [5, None], ids=["static", "dynamic"])
def test_an_rnn_and_its_gradient_are_loops_in_c(dtype, batch):
    """The forward scan and the reverse scan of its gradient are each one C call; steps of
    any number (none included), a dynamic batch of any size."""
    prog, fetches = _rnn(dtype, batch)
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 2 and _python_loops(compiled) == 0
    for steps, rows in ((7, 5), (1, 5), (0, 5)) + (((4, 1), (3, 9)) if batch is None else ()):
        feeds = {"xs": RNG.standard_normal((steps, rows, 6)), "h0": RNG.standard_normal((rows, 8)),
                 "w": RNG.standard_normal((8, 8)) * 0.5, "u": RNG.standard_normal((6, 8)),
                 "b": RNG.standard_normal(8)}
        _assert_matches(prog, fetches, compiled, {k: v.astype(dtype) for k, v in feeds.items()},
                        dtype)


@pytest.mark.parametrize("checkpoint", ["sqrt", ("binomial", 3), 2],
                         ids=["sqrt", "binomial", "every-2"])
def test_a_checkpointed_rnn_reverses_its_schedule_in_c(checkpoint):
    """The backward of a scan checkpointed by a run-time schedule (a reverse_loop) is one C
    call that runs the schedule's actions: advancing, storing and restoring the carries,
    reversing the steps; every number of steps, none and one included."""
    prog, fetches = _rnn("float64", None, checkpoint)
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 2 and _python_loops(compiled) == 0
    assert "reverse_loop of" in compiled.sources[".py"]
    for steps, rows in ((9, 3), (1, 2), (0, 4), (5, 1)):
        feeds = {"xs": RNG.standard_normal((steps, rows, 6)), "h0": RNG.standard_normal((rows, 8)),
                 "w": RNG.standard_normal((8, 8)) * 0.5, "u": RNG.standard_normal((6, 8)),
                 "b": RNG.standard_normal(8)}
        _assert_matches(prog, fetches, compiled, feeds)


def _iteration(checkpoint=None, grad=True):
    """x <- cos(x) * a while i < n, with the gradients of sum(x * x) w.r.t. a and x0."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x0 = sg.data("x0", [5], "float64")
        a = sg.data("a", [5], "float64")
        n = sg.data("n", [], "int64")
        i, x = sg.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, sg.cos(x) * a),
                             [sg.zeros([], "int64"), x0], checkpoint=checkpoint)
        fetches = [i, x] + (ir_backward.grad(sg.sum(x * x), [a, x0]) if grad else [])
    return prog, fetches


@pytest.mark.parametrize("checkpoint, grad, loops", [
    (None, False, (1, 0)), ("sqrt", True, (2, 0)), (("binomial", 2), True, (2, 0)),
    (None, True, (1, 1))], ids=["forward", "sqrt", "binomial", "store-all"])
def test_while_loops_and_their_checkpointed_gradients_run_in_c(checkpoint, grad, loops):
    """A while loop's cond and body, one segment each, are one C call, its trip count written
    when the program reads it; checkpointed, its backward is C too; storing every step's
    residuals (stacked values), the forward stays a Python loop and only the backward is C.
    Trip counts of 7, 1 and 0."""
    prog, fetches = _iteration(checkpoint, grad)
    compiled = sg.compile(prog, fetches, backend="c")
    assert (_c_loops(compiled), compiled.sources[".py"].count("while True")) == loops
    for trips in (7, 1, 0):
        feeds = {"x0": RNG.standard_normal(5), "a": RNG.uniform(0.5, 0.9, 5),
                 "n": np.int64(trips)}
        _assert_matches(prog, fetches, compiled, feeds)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timer")
def test_a_while_loop_that_never_ends_stops_at_a_signal_handlers_exception():
    """The C loop runs Python's signal handlers every 4096 trips: an endless loop stops with
    the exception a handler raises (as Ctrl-C's KeyboardInterrupt would)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x0 = sg.data("x0", [4], "float64")
        x, = sg.while_loop(lambda x: sg.sum(x) > -1.0, lambda x: [sg.abs(x) + 1.0], [x0])
    compiled = sg.compile(prog, [x], backend="c")
    assert _c_loops(compiled) == 1

    def interrupt(signum, frame):
        raise TimeoutError("the loop was stopped")

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(TimeoutError, match="stopped"):
            compiled(x0=np.zeros(4))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_carries_swapped_passed_through_and_stacked_in_reverse():
    """A body that swaps two carries, yields a per-step input and a captured value as
    per-step values, and a carry both as a carry and per step, run last step first."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [6, 3], "float64")
        a0 = sg.data("a0", [3], "float64")
        b0 = sg.data("b0", [3], "float64")
        c = sg.data("c", [3], "float64")

        def body(carry, x):
            a, b = carry
            new = sg.sin(a) * x + c
            return (b, new), (x, c, new, a)

        (a, b), ys = sg.scan(body, (a0, b0), xs, reverse=True)
        fetches = [a, b, *ys]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 1
    feeds = {"xs": RNG.standard_normal((6, 3)), "a0": RNG.standard_normal(3),
             "b0": RNG.standard_normal(3), "c": RNG.standard_normal(3)}
    _assert_matches(prog, fetches, compiled, feeds)


def test_a_run_time_trip_count_and_the_body_constants():
    """A scan over xs of a leading dim known at run time: zero steps leave the carry as it
    was and stack nothing; the body's array constant is made once, before the loop."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, 4], "float64")
        v0 = sg.data("v0", [4], "float64")
        scale = np.array([1.0, 0.5, 0.25, 2.0])
        v, vs = sg.scan(lambda v, x: (sg.cos(v) * sg.constant(scale) + x, v + 1.0), v0, xs)
        fetches = [v, vs]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 1
    for steps in (5, 1, 0):
        _assert_matches(prog, fetches, compiled, {"xs": RNG.standard_normal((steps, 4)),
                                                  "v0": RNG.standard_normal(4)})


def test_threads_and_subnormal_flushing_inside_the_loop():
    """The loops' matmuls and groups on the pool give the bytes of one thread, with
    flush_denormals too, checkpointed or not."""
    feeds = {"xs": RNG.standard_normal((5, 64, 6)), "h0": RNG.standard_normal((64, 8)),
             "w": RNG.standard_normal((8, 8)), "u": RNG.standard_normal((6, 8)),
             "b": RNG.standard_normal(8)}
    feeds = {k: v.astype("float32") for k, v in feeds.items()}
    for flush, checkpoint in ((False, None), (True, "sqrt")):
        prog, fetches = _rnn("float32", 64, checkpoint)
        one = sg.compile(prog, fetches, backend="c", threads=1, flush_denormals=flush)
        two = sg.compile(prog, fetches, backend="c", threads=2, flush_denormals=flush)
        assert _c_loops(two) == 2
        for g, e in zip(two(**feeds), one(**feeds)):
            np.testing.assert_array_equal(g, e)
        _assert_matches(prog, fetches, two, feeds, "float32")


def test_a_failure_inside_the_loop_raises_as_the_python_loop_does():
    """A class label out of range at step 2 raises the row op's error from the C loop."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [3, 4, 5], "float64")
        labels = sg.data("labels", [3, 4], "int64")
        total, _ = sg.scan(lambda t, xl: (t + sg.sum(nn.softmax_cross_entropy(*xl)), None),
                           sg.zeros([], "float64"), (xs, labels))
        fetches = [total]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 1
    good = RNG.integers(0, 5, (3, 4))
    feeds = {"xs": RNG.standard_normal((3, 4, 5)), "labels": good}
    _assert_matches(prog, fetches, compiled, feeds)
    bad = good.copy()
    bad[2, 1] = 7
    with pytest.raises(ValueError, match="7"):
        compiled(xs=feeds["xs"], labels=bad)


def test_a_body_with_an_op_on_numpy_stays_a_python_loop():
    """A cumulative sum in the body runs on NumPy: the scan stays a Python loop of segment
    calls."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [4, 6], "float64")
        h, _ = sg.scan(lambda h, x: (sg.tanh(sg.cumsum(h * x, axis=0)), None),
                       sg.ones([6], "float64"), xs)
        fetches = [h]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_loops(compiled) == 0 and _python_loops(compiled) == 1
    _assert_matches(prog, fetches, compiled, {"xs": RNG.standard_normal((4, 6))})


def test_the_loops_compile_without_warnings(tmp_path):
    """-Wall finds nothing in the C of the RNN's two loops, of a loop of one carry that the
    body writes to its own buffer (no copied carry, no per-step input), of a checkpointed
    RNN's backward, and of a counted while loop and its backward."""
    prog = sg.Program()
    with sg.program_guard(prog):
        v0 = sg.data("v0", [4], "float64")
        v, _ = sg.scan(lambda v, _: (sg.sin(v), None), v0, length=3)
    tools = compiler.toolchain()
    flags = [flag for flag in tools.flags if flag != "-shared"]
    programs = {"rnn": _rnn("float32", None), "sin": (prog, [v]),
                "checkpointed": _rnn("float32", None, ("binomial", 2)),
                "while": _iteration("sqrt")}
    for name, (program, fetches) in programs.items():
        compiled = sg.compile(program, fetches, backend="c")
        assert _c_loops(compiled) >= 1
        path = tmp_path / f"{name}.c"
        path.write_text(compiled._executable.source)
        result = subprocess.run([tools.compiler, *flags, "-Wall", "-Werror", "-fsyntax-only",
                                 str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]
