"""Run-time checks of the assumptions a program made about its unknown dims."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.core import RuntimeDim, broadcast_shapes
from symgrad.runtime.dims import DimCheck


def test_broadcast_refuses_to_stretch_a_run_time_dim_of_one():
    assert broadcast_shapes((1, 3), (5, 3)) == (5, 3)            # a declared 1 broadcasts
    assert broadcast_shapes((RuntimeDim(1), 3), (RuntimeDim(1), 3)) == (1, 3)
    assert broadcast_shapes((RuntimeDim(1), 3), (1, 3)) == (1, 3)
    with pytest.raises(sg.ShapeError, match="dim 0 of \\[1, 3\\] is 1 when the program runs"):
        broadcast_shapes((RuntimeDim(1), 3), (5, 3))


def test_no_check_without_unknown_dims():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", [2, 3], "float32") * 2.0
    assert DimCheck.for_program(prog) is None
    assert sg.compile(prog, [y])._dim_check is None


def test_shapes_flow_through_ops_that_compute_them():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6], "float32")
        b = sg.data("b", [3, 2], "float32")
        y = sg.reshape(x, [-1, 3, 2]) + b                # reshape computes the run-time dim
        z = sg.sum(y, axis=0) * sg.data("c", [None, 2], "float32")
    fn = sg.compile(prog, [z], backend="interpreter")
    fn(x=np.ones((4, 6), "float32"), b=np.ones((3, 2), "float32"),
       c=np.ones((3, 2), "float32"))
    with pytest.raises(sg.FeedError, match="op multiply"):
        fn(x=np.ones((4, 6), "float32"), b=np.ones((3, 2), "float32"),
           c=np.ones((1, 2), "float32"))


def test_a_loaded_artifact_checks_through_fused_groups(tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        y = sg.data("y", [None, 3], "float32")
        z = sg.sum(sg.exp(x) * sg.tanh(y), axis=1)
    loaded = sg.load(sg.compile(prog, [z]).save(str(tmp_path / "m")))
    assert any(op.blocks for op in loaded.compiled.program.ops)   # fused
    np.testing.assert_allclose(loaded(x=np.zeros((2, 3), "float32"),
                                      y=np.zeros((2, 3), "float32"))[0], [0, 0])
    with pytest.raises(sg.FeedError, match="cannot be broadcast"):
        loaded(x=np.zeros((2, 3), "float32"), y=np.zeros((3, 3), "float32"))
