import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import FeedError, FeedTypeError, ProgramMismatchError


@pytest.fixture
def program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        n = sg.data("n", [3], "int64")
        unused = sg.data("unused", [5], "float32")
        w = sg.parameter("w", [3], "float32", init=np.ones(3))
        y = sg.tanh(x * w)
    return prog, x, n, unused, w, y


def compiled(program):
    prog, x, n, unused, w, y = program
    return sg.compile(prog, fetch_list=[y], backend="interpreter")


def test_returns_a_list_even_for_one_fetch(program):
    out = compiled(program)(x=np.zeros((2, 3), "float32"))
    assert isinstance(out, list) and len(out) == 1 and out[0].shape == (2, 3)


def test_positional_feeds_in_data_order(program):
    fn = compiled(program)
    a = fn(np.ones((1, 3), "float32"))[0]
    b = fn(x=np.ones((1, 3), "float32"))[0]
    np.testing.assert_array_equal(a, b)


def test_any_batch_size(program):
    fn = compiled(program)
    for batch in (1, 7, 64):
        assert fn(x=np.ones((batch, 3), "float32"))[0].shape == (batch, 3)


def test_parameters_take_init_unless_fed(program):
    fn = compiled(program)
    x = np.ones((1, 3), "float32")
    np.testing.assert_allclose(fn(x=x)[0], np.tanh(x))
    np.testing.assert_allclose(fn(x=x, w=np.full(3, 2, "float32"))[0], np.tanh(2 * x))


def test_unneeded_feeds_are_accepted_and_ignored(program):
    fn = compiled(program)
    fn(x=np.ones((1, 3), "float32"), unused=np.zeros(5, "float32"), n=np.zeros(3, "int64"))


@pytest.mark.parametrize("feeds, error, match", [
    ({}, FeedError, "missing feed for input 'x'"),
    ({"x": np.ones((1, 3)), "y": 1}, FeedError, "unknown input 'y'"),
    ({"x": np.ones(3)}, FeedError, "input 'x': expected rank 2"),
    ({"x": np.ones((2, 4))}, FeedError, "input 'x': dim 1 must be 3"),
    ({"x": np.ones((2, 3), "int32")}, FeedTypeError, "input 'x': expected floating"),
    ({"x": np.ones((2, 3), bool)}, FeedTypeError, "input 'x'"),
    ({"x": np.ones((2, 3)), "n": np.ones(3)}, FeedTypeError, "input 'n': expected integer"),
    ({"x": np.ones((2, 3)), "w": np.ones(4)}, FeedError, "input 'w': dim 0 must be 3"),
    ({"x": "abc"}, FeedTypeError, "input 'x'"),
])
def test_feed_errors_name_the_input(program, feeds, error, match):
    with pytest.raises(error, match=match):
        compiled(program)(**feeds)


def test_feed_error_classes_are_builtin_subclasses():
    assert issubclass(FeedError, ValueError) and issubclass(FeedTypeError, TypeError)


def test_too_many_positional_and_double_feeds(program):
    fn = compiled(program)
    with pytest.raises(TypeError, match="positional"):
        fn(1, 2, 3, 4)
    with pytest.raises(TypeError, match="both by position and by name"):
        fn(np.ones((1, 3)), x=np.ones((1, 3)))


def test_float64_feed_is_cast_to_the_declared_dtype(program):
    out = compiled(program)(x=np.ones((1, 3)))[0]
    assert out.dtype == np.float32


def test_python_lists_are_accepted(program):
    out = compiled(program)(x=[[1, 2, 3]])[0]
    np.testing.assert_allclose(out, np.tanh([[1, 2, 3]]), rtol=1e-6)


def test_fetch_list_validation(program):
    prog, x, n, unused, w, y = program
    with pytest.raises(TypeError, match="fetch_list"):
        sg.compile(prog, fetch_list=42, backend="interpreter")
    with pytest.raises(TypeError, match=r"fetch_list\[0\]"):
        sg.compile(prog, fetch_list=[None], backend="interpreter")
    other = sg.Program()
    with sg.program_guard(other):
        z = sg.data("z", [1])
    with pytest.raises(ProgramMismatchError):
        sg.compile(prog, fetch_list=[z], backend="interpreter")
    assert sg.compile(prog, fetch_list="x", backend="interpreter").outputs[0].name == "x"


def test_unknown_backend(program):
    with pytest.raises(ValueError, match="unknown backend"):
        sg.compile(program[0], [program[-1]], backend="tpu")


def test_compile_copies_the_program(program):
    prog, x, n, unused, w, y = program
    fn = compiled(program)
    with sg.program_guard(prog):
        sg.tanh(y)
    assert fn.program.num_ops < prog.num_ops


def test_executor_runs_and_caches(program):
    prog, x, n, unused, w, y = program
    exe = sg.Executor("interpreter")
    a = exe.run(prog, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y])
    b = exe.run(prog, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y])
    assert len(exe._cache) == 1
    np.testing.assert_array_equal(a[0], b[0])
