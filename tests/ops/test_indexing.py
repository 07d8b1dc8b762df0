"""take, take_along_axis, integer-array indexing and embedding: forward against NumPy (the
samples), NumPy's placement of gathered dims, scatter-add gradients, empty index lists,
constant indices out of range refused when built, errors. (Fed indices out of range:
tests/backends/test_index_range.py.)"""
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import DTypeError, IndexOutOfRangeError, ShapeError, SymgradError
from symgrad.ops import source
from tests.ops.samples import expect_build_error, interpret
from tests.ops.samples_indexing import SAMPLES


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_sample_forward_matches_numpy(sample):
    out, got = interpret(sample.build, *sample.inputs, dynamic=sample.dynamic)
    want = np.asarray(sample.expected(*sample.inputs))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("index", [
    np.s_[:, [1, 1]], np.s_[[0, -1], 2], np.s_[0, :, [1, 0]], np.s_[None, [2, 0]],
    np.s_[[0], None, 1], np.s_[..., [3, 0]], np.s_[1:, [[0, 2]], ::-1], np.s_[0, None, [1]],
])
def test_integer_array_indexing_places_dims_as_numpy(index):
    x = np.arange(3 * 4 * 5, dtype=np.float64).reshape(3, 4, 5)
    out, got = interpret(lambda v: v[index], x)
    np.testing.assert_array_equal(got, x[index])
    assert out.shape == x[index].shape


def test_index_value_with_negative_entries_and_its_gradient_accumulates():
    x = np.arange(5.0)
    idx = np.array([4, -1, 0, 4])

    def build(v, i):
        y = v[i]
        return y, ir_backward.grad(sg.sum(y * np.arange(1.0, 5.0)), [v])[0]
    _, (y, g) = interpret(build, x, idx)
    np.testing.assert_array_equal(y, x[idx])
    np.testing.assert_array_equal(g, [3.0, 0.0, 0.0, 0.0, 1.0 + 2.0 + 4.0])


def test_embedding_gradient_scatter_adds_repeated_ids():
    table = np.arange(8.0).reshape(4, 2)
    ids = np.array([[3, 1], [3, 3]])

    def build(i, t):
        y = sg.nn.embedding(i, t)
        return y, ir_backward.grad(sg.sum(y), [t])[0]
    out, (y, g) = interpret(build, ids, table, dynamic=(0,))
    assert out[0].shape == (None, 2, 2)
    np.testing.assert_array_equal(y, table[ids])
    np.testing.assert_array_equal(g, [[0, 0], [1, 1], [0, 0], [3, 3]])


def test_embedding_takes_numpy_ids_as_indices_without_promoting_the_table(monkeypatch):
    monkeypatch.setattr(source, "_warned_promotions", set())   # warned once per process
    table = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, y = interpret(lambda t: sg.nn.embedding(np.array([[3, 0]]), t), table)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(y, table[[[3, 0]]])


def test_out_of_range_index_raises_when_the_program_runs():
    with pytest.raises(IndexOutOfRangeError, match="out of bounds"):
        interpret(lambda x, i: sg.take(x, i, axis=0), np.zeros((3, 2)), np.array([3]))


# --- empty index lists -----------------------------------------------------------------------
@pytest.mark.parametrize("index", [
    np.s_[[]], np.s_[[], 0], np.s_[[], :], np.s_[:, []], np.s_[[[]]], np.s_[1, []],
    np.s_[np.array([], int)], np.s_[None, []],
])
def test_an_empty_index_list_gathers_nothing_with_numpy_shapes_and_zero_gradients(index):
    x = np.arange(12.0).reshape(4, 3)

    def build(v):
        y = v[index]
        return y, ir_backward.grad(sg.sum(y * 2.0), [v])[0]
    out, (y, g) = interpret(build, x)
    assert out[0].shape == x[index].shape == y.shape
    assert out[0].dtype == y.dtype == x.dtype
    np.testing.assert_array_equal(g, np.zeros_like(x))


@pytest.mark.parametrize("build, shape", [
    (lambda x: sg.take(x, []), (0,)),
    (lambda x: sg.take(x, [[], []], axis=1), (4, 2, 0)),
    (lambda x: sg.take_along_axis(x, [[]] * 4, axis=1), (4, 0)),
])
def test_take_accepts_empty_index_lists(build, shape):
    out, y = interpret(build, np.ones((4, 3)))
    assert out.shape == y.shape == shape


def test_an_empty_float_array_is_still_not_an_index():
    """NumPy refuses ``x[np.array([])]`` (float64): only a list is taken as integers."""
    expect_build_error(lambda x, i: x[np.array([])], TypeError,
                       r"getitem: indices must be integers, got float64")


# --- constant indices out of range: refused when the op is built ----------------------------
@pytest.mark.parametrize("build, message", [
    (lambda x: sg.take(x, [0, 4], axis=0), "take: index 4 is out of bounds for axis 0 with size 4"),
    (lambda x: sg.take(x, [-4], axis=-1), "take: index -4 is out of bounds for axis 1 with size 3"),
    (lambda x: sg.take(x, [[3, 12]]),
     "take: index 12 is out of bounds for the flattened input with size 12"),
    (lambda x: sg.take_along_axis(x, np.array([[0], [1], [3], [0]]), axis=1),
     "take_along_axis: index 3 is out of bounds for axis 1 with size 3"),
    (lambda x: sg.take_along_axis(x, [5, 12], axis=None),
     "take_along_axis: index 12 is out of bounds for the flattened input with size 12"),
    (lambda x: sg.nn.embedding(np.array([[0, 5]]), x),
     "embedding: index 5 is out of bounds for axis 0 with size 4"),
    (lambda x: x[[0, -5]], "getitem: index -5 is out of bounds for axis 0 with size 4"),
    (lambda x: x[1:, [3]], "getitem: index 3 is out of bounds for axis 1 with size 3"),
    (lambda x: x[None, ..., [-4]], "getitem: index -4 is out of bounds for axis 1 with size 3"),
])
def test_constant_indices_out_of_range_are_refused_when_built(build, message):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 3], "float32")
        before = len(prog.ops)
        with pytest.raises(IndexOutOfRangeError) as caught:
            build(x)
    assert isinstance(caught.value, IndexError) and isinstance(caught.value, SymgradError)
    text = str(caught.value)
    assert text.startswith(message + " (inputs: float32[4, 3], ")
    assert text.endswith(f"\n  built at {__file__}:{build.__code__.co_firstlineno}")
    assert len(prog.ops) == before   # the failed build left the program as it was


@pytest.mark.parametrize("indices, message", [
    (lambda: sg.constant(np.array([-13])), "index -13 is out of bounds for the flattened input"),
    (lambda: sg.full([2], 12, "int32"), "index 12 is out of bounds for the flattened input"),
])
def test_index_values_known_when_built_are_checked_too(indices, message):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [4, 3], "float32")
        with pytest.raises(IndexOutOfRangeError, match=f"^take: {message} with size 12"):
            sg.take(x, indices())


@pytest.mark.parametrize("build, expected", [
    (lambda x: sg.take(x, [-4, 3], axis=0), lambda x: np.take(x, [-4, 3], axis=0)),
    (lambda x: sg.take(x, [-12, 11]), lambda x: np.take(x, [-12, 11])),
    (lambda x: sg.take_along_axis(x, np.full((4, 1), -3), axis=1),
     lambda x: np.take_along_axis(x, np.full((4, 1), -3), axis=1)),
    (lambda x: sg.nn.embedding(np.array([3, -4]), x), lambda x: x[[3, -4]]),
    (lambda x: x[:, [-3, 2]], lambda x: x[:, [-3, 2]]),
])
def test_constant_indices_at_the_ends_of_the_range_are_accepted(build, expected):
    x = np.arange(12.0).reshape(4, 3)
    _, got = interpret(build, x)
    np.testing.assert_array_equal(got, expected(x))


def test_constant_indices_on_a_dim_known_at_run_time_are_checked_when_it_runs():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, 3], "float32")
        y = sg.take(x, [100], axis=0)        # the dim is unknown here: accepted
    with pytest.raises(IndexOutOfRangeError, match="index 100 is out of bounds for axis 0"):
        sg.compile(y.program, [y], backend="interpreter")(np.zeros((4, 3), "float32"))


@pytest.mark.parametrize("build,error,match", [
    (lambda x, i: sg.take(x, i.astype("float32")), DTypeError,
     r"take: indices need an integer dtype, got float32 \(inputs: float32\[3, 4\], float32\[2\]\)"),
    (lambda x, i: sg.take(x, i, axis=2), ShapeError, "take: axis 2 is out of range for rank 2"),
    (lambda x, i: sg.take_along_axis(x, i, axis=0), ShapeError,
     r"take_along_axis: indices \[2\] must have the rank of \[3, 4\]"),
    (lambda x, i: sg.take_along_axis(x, sg.reshape(i, [2, 1]), axis=None), ShapeError,
     "with axis=None the indices must be 1-D"),
    (lambda x, i: sg.take_along_axis(x, sg.broadcast_to(sg.reshape(i, [2, 1]), [2, 3]), 0),
     ShapeError, r"indices \[2, 3\] do not broadcast against \[3, 4\] outside axis 0"),
    (lambda x, i: x[i > 0], TypeError, "boolean mask"),
    (lambda x, i: x[i, i], TypeError, "one integer-array index"),
    (lambda x, i: sg.nn.embedding(i, sg.reshape(x, [12])), ShapeError, "table must be 2-D"),
    (lambda x, i: sg.nn.embedding(x, x), DTypeError, "ids need an integer dtype"),
])
def test_errors_name_the_op_and_shapes(build, error, match):
    expect_build_error(build, error, match)
