"""Build-time and run-time errors (issue #12): failed builds leave the program unchanged,
arguments of the wrong type are TypeErrors, attrs reach generated code only as literals, and
nothing big is made at compile time."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.host.lowering import format_attr as _fmt_attr
from symgrad.ops.core import code_int


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3, 4], "float32")
        w = sg.data("w", [4, 5], "float32")
    return prog, x, w


FAILING_BUILDS = {
    "add of a NumPy array": lambda x, w: x + np.ones((5, 7), "float32"),
    "matmul of a NumPy array": lambda x, w: x @ np.ones((5, 7), "float32"),
    "concatenate with a NumPy array": lambda x, w: sg.concatenate(
        [x, np.ones((5, 7), "float32")], axis=0),
    "linear with a NumPy bias": lambda x, w: sg.nn.linear(x, w, np.ones(7, "float32")),
    "where with NumPy operands": lambda x, w: sg.where(np.ones((3, 4), bool), x, np.zeros(9, "float32")),
    "clip with a NumPy bound": lambda x, w: sg.clip(x, np.zeros((5, 7), "float32"), 1.0),
}


@pytest.mark.parametrize("case", sorted(FAILING_BUILDS))
def test_a_failed_build_leaves_the_program_unchanged(case):
    prog, x, w = _program()
    before = str(prog)
    with sg.program_guard(prog), pytest.raises(sg.ShapeError):
        FAILING_BUILDS[case](x, w)
    assert str(prog) == before
    with sg.program_guard(prog):   # and the program keeps working
        y = x @ w
    assert sg.compile(prog, [y], backend="interpreter")(
        x=np.ones((3, 4), "float32"), w=np.ones((4, 5), "float32"))[0].shape == (3, 5)


def test_value_in_list_raises_type_error_and_builds_nothing():
    prog, x, w = _program()
    with sg.program_guard(prog):
        y = x * 2.0
        n = prog.num_ops
        with pytest.raises(TypeError, match="truth value"):
            x in [y]                                 # noqa: B015  (same shapes)
        with pytest.raises(TypeError, match="compare Values elementwise"):
            x in [w]                                 # noqa: B015  (shapes do not broadcast)
        with pytest.raises(TypeError):
            [w, y].index(x)
        assert prog.num_ops == n
        assert x in [x, w]                           # the identity test comes first
        z = x == y                                   # an explicit comparison stays
    assert prog.num_ops == n + 1 and z.dtype == np.bool_


@pytest.mark.parametrize("build, error", [
    (lambda: sg.data("b", [True, 2]), "bool True in shape"),
    (lambda: sg.zeros([2, False]), "bool False in shape"),
    (lambda: sg.parameter("p", np.True_), "bool"),
    (lambda: sg.sum(sg.data("v", [2, 3]), axis=1.0), "axis must be None, an int"),
    (lambda: sg.mean(sg.data("v", [2, 3]), axis=[0, 1.5]), "axis entries must be ints"),
    (lambda: sg.max(sg.data("v", [2, 3]), axis=True), "axis must be None, an int"),
])
def test_arguments_of_the_wrong_type_are_type_errors(build, error):
    prog = sg.Program()
    with sg.program_guard(prog), pytest.raises(TypeError, match=error):
        build()


def test_append_backward_parameter_list_must_be_a_list():
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [2], "float32", init=np.ones(2, "float32"))
        loss = sg.sum(w * w)
    with pytest.raises(TypeError, match="got str \\(put a single name in a list\\)"):
        ir_backward.append_backward(loss, parameter_list="test")
    with pytest.raises(ValueError, match="names 'test'"):
        ir_backward.append_backward(loss, parameter_list=["test"])
    [(param, grad)] = ir_backward.append_backward(loss, parameter_list=["w"])
    assert param is w and grad is not None


def test_a_fake_cuda_array_feed_is_a_feed_type_error():
    class Fake:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "version": 3}

    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", [3], "float32") * 2.0
    with pytest.raises(sg.FeedTypeError, match="input 'x': Fake has __cuda_array_interface__"):
        sg.compile(prog, [y])(x=Fake())


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf")])
def test_pad_with_non_finite_values(fill):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2, 3], "float32")
        y = sg.pad(x, [(1, 1), (0, 2)], constant_values=fill)
    xs = np.ones((2, 3), "float32")
    expected = np.pad(xs, [(1, 1), (0, 2)], constant_values=fill)
    for backend in ("interpreter", "numpy"):
        np.testing.assert_array_equal(sg.compile(prog, [y], backend=backend)(xs)[0], expected)


def test_attrs_become_literals_and_never_code():
    assert _fmt_attr(((float("nan"), 1.0),)) == "((float('nan'), 1.0),)"
    assert _fmt_attr({"a": -float("inf")}) == "{'a': -float('inf')}"
    assert eval(_fmt_attr(np.array([np.inf, 2.0]))).tolist() == [np.inf, 2.0]   # noqa: S307
    assert _fmt_attr("0); import os; (") == "'0); import os; ('"
    assert code_int(np.int64(3)) == "3"
    for bad in ("0); import os; (", 1.5, True, None):
        with pytest.raises(TypeError, match="expected an int attr"):
            code_int(bad)


def test_big_filled_tensors_are_not_made_at_compile_time():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.sum(sg.zeros([2 ** 33])) + sg.sum(sg.ones([4, 4]))
    fn = sg.compile(prog, [y])   # would allocate 32 GiB if zeros() became a constant
    constants = fn._executable.constants
    assert all(np.asarray(a).size <= 65536 for a in constants.values())
    assert re.search(r"np\.full\(\(8589934592,\), 0\.0, np\.float32\)", fn.source)
