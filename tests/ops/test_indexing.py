"""take, take_along_axis, integer-array indexing and embedding: forward against NumPy (the
samples), NumPy's placement of gathered dims, scatter-add gradients, errors."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import DTypeError, ShapeError
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


def test_out_of_range_index_raises_when_the_program_runs():
    with pytest.raises(IndexError, match="out of bounds"):
        interpret(lambda x, i: sg.take(x, i, axis=0), np.zeros((3, 2)), np.array([3]))


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
