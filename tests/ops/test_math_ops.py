"""cumsum, cumprod, erf, arctan2, leaky_relu and the compositions var, std, layer_norm:
forward against NumPy (the samples), dtypes, edge values, errors."""
import math

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import DTypeError, ShapeError
from tests.ops.samples import expect_build_error, interpret
from tests.ops.samples_math import SAMPLES


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_sample_forward_matches_numpy(sample):
    out, got = interpret(sample.build, *sample.inputs, dynamic=sample.dynamic)
    want = np.asarray(sample.expected(*sample.inputs))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_erf_is_accurate_in_every_range_and_keeps_the_dtype():
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    _, got = interpret(sg.erf, x)
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=4e-16)
    assert np.signbit(got[-4]) and np.isnan(got[-1])
    for dtype, ulp in (("float32", 2 ** -23), ("float16", 2 ** -10), ("bfloat16", 2 ** -7)):
        rounded = x[:-5].astype(dtype)
        _, low = interpret(sg.erf, rounded)
        assert low.dtype == np.dtype(dtype)
        exact = np.array([math.erf(float(v)) for v in rounded])
        np.testing.assert_allclose(low.astype(np.float64), exact, rtol=ulp, atol=ulp / 8)


def test_cumulative_dtypes_follow_numpy():
    ints = np.array([[1, 2], [3, 4]], dtype=np.int32)
    for function, reference in ((sg.cumsum, np.cumsum), (sg.cumprod, np.cumprod)):
        out, got = interpret(lambda x, f=function: f(x, axis=0), ints)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(got, reference(ints, axis=0))
    out, got = interpret(sg.cumsum, np.array([True, False, True]))
    assert out.dtype == np.int64 and list(got) == [1, 1, 2]


def test_cumprod_gradient_with_zeros_is_exact():
    x = np.array([2.0, 0.0, 3.0, 0.0, 5.0])

    def build(v):
        return ir_backward.grad(sg.sum(sg.cumprod(v)), [v])[0]
    _, got = interpret(build, x)
    # d/dx_j sum_i prod_{k<=i} x_k, by expanding each product without x_j
    want = [sum(np.prod(np.delete(x[:i + 1], j)) for i in range(j, 5)) for j in range(5)]
    np.testing.assert_allclose(got, want)


def test_cumprod_third_derivative_with_zeros_is_exact():
    """``f(x) = sum_i r_i prod_{k <= i} x_k`` is multilinear: its third derivative along
    distinct ``a, b, c`` is ``sum_{i >= max} r_i prod_{k <= i, k not in {a, b, c}} x_k``, and 0
    along a repeated index. Three zeros in the slice."""
    x = np.array([0.0, 1.5, 0.0, -2.0, 0.0, 0.5])
    r = np.array([0.3, -1.2, 0.8, 1.1, -0.4, 0.9])
    b, c = 0, 4

    def build(v):
        f = sg.sum(sg.cumprod(v) * r)
        g, = ir_backward.grad(f, [v], create_graph=True)
        h, = ir_backward.grad(g, [v], grad_outputs=[sg.constant(np.eye(6)[b])],
                              create_graph=True)
        return ir_backward.grad(h, [v], grad_outputs=[sg.constant(np.eye(6)[c])])[0]
    _, got = interpret(build, x)

    def third(a):
        if len({a, b, c}) < 3:
            return 0.0
        return sum(r[i] * np.prod([x[k] for k in range(i + 1) if k not in (a, b, c)])
                   for i in range(max(a, b, c), 6))
    np.testing.assert_allclose(got, [third(a) for a in range(6)], atol=1e-15)


def test_var_std_of_integers_and_with_ddof():
    x = np.array([[1, 5, 2], [7, 3, 3]], dtype=np.int64)
    out, got = interpret(lambda v: sg.var(v, axis=1, ddof=1), x)
    assert out.dtype == np.float64
    np.testing.assert_allclose(got, np.var(x, axis=1, ddof=1))
    _, got = interpret(lambda v: sg.std(v, keepdims=True), x.astype(np.float32))
    np.testing.assert_allclose(got, np.std(x, keepdims=True), rtol=1e-6)


def test_layer_norm_matches_the_definition_and_checks_its_parameters():
    x = np.random.default_rng(2).standard_normal((2, 3, 6)).astype(np.float32)
    w, b = np.linspace(0.5, 2, 6, dtype=np.float32), np.linspace(-1, 1, 6, dtype=np.float32)
    _, got = interpret(lambda v, wv, bv: sg.nn.layer_norm(v, wv, bv, eps=1e-3), x, w, b)
    mean = x.mean(-1, keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-3) * w + b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with sg.program_guard(sg.Program()):
        v = sg.data("x", [2, 6])
        with pytest.raises(ShapeError, match=r"layer_norm: weight float32\[5\] must be 1-D"):
            sg.nn.layer_norm(v, sg.data("w", [5]))
        with pytest.raises(DTypeError, match="layer_norm: needs a floating input"):
            sg.nn.layer_norm(sg.data("i", [2], "int32"))


def test_leaky_relu_keeps_the_dtype_and_slope_at_zero():
    x = np.array([-2.0, 0.0, 3.0], dtype=np.float16)

    def build(v):
        y = sg.nn.leaky_relu(v, 0.25)
        return y, ir_backward.grad(sg.sum(y), [v])[0]
    (y, _), (yv, gv) = interpret(build, x)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(yv, [-0.5, 0.0, 3.0])
    np.testing.assert_array_equal(gv, [0.25, 0.25, 1.0])


@pytest.mark.parametrize("build,error,match", [
    (lambda x, i: sg.erf(i), DTypeError, r"erf: needs a floating input, got int64"),
    (lambda x, i: sg.cumsum(x, axis=2), ShapeError, "cumsum: axis 2 is out of range"),
    (lambda x, i: sg.cumprod(sg.sum(x), axis=0), ShapeError, "cumprod: needs an input of rank"),
    (lambda x, i: sg.arctan2(x, sg.data("z", [5])), ShapeError,
     r"arctan2: shapes \[3, 4\], \[5\] cannot be broadcast"),
    (lambda x, i: sg.var(x, ddof=-1), ValueError, "ddof must be a non-negative int"),
    (lambda x, i: sg.nn.leaky_relu(i), DTypeError, "leaky_relu: needs a floating input"),
])
def test_errors_name_the_op_and_shapes(build, error, match):
    expect_build_error(build, error, match)
