"""Checkpointed loops (``checkpoint=``) are ordinary region ops: the C backend and the CUDA
backend's generated code (run on the CPU by the emulation) give the interpreter's numbers."""
import numpy as np
import pytest

import symgrad as sg
from tests.autodiff.test_checkpoint_grad import (FEEDS, RAGGED_FEEDS, RAGGED_STACK_ERROR, _program,
                                                 _ragged_program, _rnn_step, _while_program)
from tests.backends.cuda_emulation import library as emulation
from tests.backends.cuda_emulation.device import EmulatedDevice

WHILE_FEEDS = {"x": np.array([0.1, 0.2, -0.3]), "w": np.array([0.5, -1.0, 2.0])}
CASES = [(_program(_rnn_step, "sqrt"), FEEDS), (_program(_rnn_step, 4, reverse=True), FEEDS),
         (_while_program(3, True), WHILE_FEEDS), (_program(_rnn_step, ("binomial", 3)), FEEDS),
         (_program(_rnn_step, ("binomial", 2), reverse=True), FEEDS),
         (_while_program(("binomial", 2), True), WHILE_FEEDS),
         (_while_program("sqrt", True), WHILE_FEEDS),
         (_ragged_program(), RAGGED_FEEDS),     # a while loop of data-dependent trip counts
                                                # in a scan body: recomputed by a reverse_loop
         (_ragged_program(order=2), RAGGED_FEEDS)]   # ... differentiated twice


def _check(got, prog, fetches, feeds):
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_checkpointed_loops_run_on_the_c_backend(case):
    (prog, fetches), feeds = CASES[case]
    _check(sg.compile(prog, fetches, backend="c")(**feeds), prog, fetches, feeds)


@pytest.mark.skipif(emulation.compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("case", range(len(CASES)))
def test_checkpointed_loops_run_on_the_emulated_cuda_backend(case, tmp_path):
    (prog, fetches), feeds = CASES[case]
    compiled = sg.compile(prog, fetches, backend="cuda")
    device = EmulatedDevice(emulation.Library([compiled._executable.cuda_source],
                                              cache_dir=tmp_path))
    _check(device.run(compiled, feeds), prog, fetches, feeds)


def test_a_ragged_stack_fails_clearly_on_the_c_backend():
    """A third derivative through a while loop of data-dependent trip counts in a loop body
    (``test_checkpoint_grad``): the host code the C backend shares checks a stack's rows."""
    fn = sg.compile(*_ragged_program(order=3), backend="c")
    with pytest.raises(sg.errors.FeedError, match=RAGGED_STACK_ERROR):
        fn(**RAGGED_FEEDS)


def test_no_step_reversed_gives_stacks_of_the_run_time_dims():
    """A reverse_loop that runs no step: its stacked cotangents still have the run-time dims
    of their slices (the host lowering shared by the NumPy and C backends)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", ["T", "batch", 3], "float64")
        h0 = sg.data("h0", ["batch", 3], "float64")
        h, _ = sg.scan(lambda h, x: (sg.sin(h * x), None), h0, xs, checkpoint=("binomial", 2))
        (grad,) = sg.ir_backward.grad(sg.sum(h), [xs])
    feeds = {"xs": np.zeros((0, 4, 3)), "h0": np.ones((4, 3))}
    (got,) = sg.compile(prog, [grad], backend="numpy")(**feeds)
    assert got.shape == (0, 4, 3)
