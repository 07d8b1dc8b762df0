"""nn.batch_norm: training and inference against PyTorch's formulas (literal numbers, and a
float64 NumPy reference over several steps), the running statistics as program state shared by
a training step and an evaluation function, on the interpreter, NumPy and C backends; errors.
Its gradients go through the registry's numeric tests (the batch_norm samples of
tests/ops/samples_nn.py)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import nn
from symgrad.errors import DTypeError, ScopeError, ShapeError
from tests.ops.samples_nn import ref_batch_norm, ref_batch_stats

BACKENDS = ["interpreter", "numpy", "c"]


def _train_and_eval(x_shape, dtype="float64", stats_dtype=None, affine=True, **options):
    """A program with a training and an inference batch_norm of one data input over the same
    running statistics (and weight and bias); returns (program, train output, eval output)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", x_shape, dtype)
        channels = x_shape[1]
        mean, var = nn.batch_norm_stats("bn", channels, stats_dtype or dtype)
        weight = bias = None
        if affine:
            weight = sg.parameter("w", [channels], dtype, init=np.arange(2.0, 2.0 + channels))
            bias = sg.parameter("b", [channels], dtype, init=np.linspace(0.5, -1.0, channels))
        trained = nn.batch_norm(x, mean, var, weight, bias, training=True, **options)
        inferred = nn.batch_norm(x, mean, var, weight, bias, training=False, **options)
    return prog, trained, inferred


@pytest.mark.parametrize("backend", BACKENDS)
def test_literal_numbers_of_two_training_steps_and_inference(backend):
    """x [N=2, C=2]: channel 0 holds 1, 3 (mean 2, biased variance 1, unbiased 2), channel 1
    holds 10, 14 (mean 12, variance 4, unbiased 8); momentum 0.1, eps 1e-5, weight [2, 3],
    bias [0.5, -1]."""
    prog, trained, inferred = _train_and_eval([None, 2])
    train = sg.compile(prog, [trained], backend=backend)
    evaluate = sg.compile(prog, [inferred], backend=backend, updates=False, state=train.state)
    batch = np.array([[1.0, 10.0], [3.0, 14.0]])
    assert train.state["bn.running_mean"].tolist() == [0.0, 0.0]
    assert train.state["bn.running_var"].tolist() == [1.0, 1.0]
    (y,) = train(x=batch)
    np.testing.assert_allclose(y, [[-2 / np.sqrt(1.00001) + 0.5, -6 / np.sqrt(4.00001) - 1],
                                   [2 / np.sqrt(1.00001) + 0.5, 6 / np.sqrt(4.00001) - 1]],
                               rtol=1e-15)
    np.testing.assert_allclose(train.state["bn.running_mean"], [0.2, 1.2], rtol=1e-15)
    np.testing.assert_allclose(train.state["bn.running_var"], [1.1, 1.7], rtol=1e-15)
    train(x=batch)
    np.testing.assert_allclose(train.state["bn.running_mean"], [0.38, 2.28], rtol=1e-15)
    np.testing.assert_allclose(train.state["bn.running_var"], [1.19, 2.33], rtol=1e-15)
    (y,) = evaluate(x=np.array([[1.38, 2.28]]))
    np.testing.assert_allclose(y, [[2 / np.sqrt(1.19001) + 0.5, -1.0]], rtol=1e-15)
    np.testing.assert_allclose(train.state["bn.running_mean"], [0.38, 2.28], rtol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_steps_of_varying_batch_size_match_the_reference(backend):
    """NCHW with a dynamic batch, momentum 0.3, eps 1e-3: every step normalizes with the
    batch's statistics and moves the running ones; inference reads them."""
    prog, trained, inferred = _train_and_eval([None, 3, 4, 5], momentum=0.3, eps=1e-3)
    train = sg.compile(prog, [trained], backend=backend)
    evaluate = sg.compile(prog, [inferred], backend=backend, updates=False, state=train.state)
    assert sorted(train.assigned) == ["bn.running_mean", "bn.running_var"]
    assert evaluate.assigned == []
    rng = np.random.default_rng(4)
    weight, bias = np.arange(2.0, 5.0), np.linspace(0.5, -1.0, 3)
    running_mean, running_var = np.zeros(3), np.ones(3)
    for n in (4, 1, 7):
        x = rng.normal(2.0, 3.0, (n, 3, 4, 5))
        mean, var, unbiased = ref_batch_stats(x)
        (y,) = train(x=x)
        np.testing.assert_allclose(y, ref_batch_norm(x, mean, var, weight, bias, eps=1e-3),
                                   rtol=1e-12, atol=1e-12)
        running_mean = 0.7 * running_mean + 0.3 * mean
        running_var = 0.7 * running_var + 0.3 * unbiased
        np.testing.assert_allclose(train.state["bn.running_mean"], running_mean, rtol=1e-12)
        np.testing.assert_allclose(train.state["bn.running_var"], running_var, rtol=1e-12)
    x = rng.normal(2.0, 3.0, (2, 3, 4, 5))
    (y,) = evaluate(x=x)
    np.testing.assert_allclose(
        y, ref_batch_norm(x, running_mean, running_var, weight, bias, eps=1e-3), rtol=1e-12)
    np.testing.assert_allclose(train.state["bn.running_mean"], running_mean, rtol=1e-12)


def test_inference_alone_reads_the_statistics_and_assigns_nothing():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 3], "float64")
        mean, var = nn.batch_norm_stats("bn", 2, "float64")
        y = nn.batch_norm(x, mean, var)
    assert prog.assignments == {}
    assert mean.stop_gradient and var.stop_gradient
    fn = sg.compile(prog, [y])
    fn.state["bn.running_mean"] = np.array([1.0, -1.0])
    fn.state["bn.running_var"] = np.array([4.0, 0.25])
    x = np.arange(12.0).reshape(2, 2, 3)
    np.testing.assert_allclose(fn(x=x)[0], ref_batch_norm(x, np.array([1.0, -1.0]),
                                                          np.array([4.0, 0.25])), rtol=1e-14)
    assert fn.state["bn.running_mean"].tolist() == [1.0, -1.0]


def test_a_second_training_call_updates_what_the_first_assigned():
    prog = sg.Program()
    with sg.program_guard(prog):
        a, b = sg.data("a", [4, 2], "float64"), sg.data("b", [3, 2], "float64")
        mean, var = nn.batch_norm_stats("bn", 2, "float64")
        nn.batch_norm(a, mean, var, training=True, momentum=0.5)
        y = nn.batch_norm(b, mean, var, training=True, momentum=0.25)
    fn = sg.compile(prog, [y])
    rng = np.random.default_rng(5)
    a_v, b_v = rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
    fn(a=a_v, b=b_v)
    (mean_a, _, var_a), (mean_b, _, var_b) = ref_batch_stats(a_v), ref_batch_stats(b_v)
    np.testing.assert_allclose(fn.state["bn.running_mean"],
                               0.75 * (0.5 * mean_a) + 0.25 * mean_b, rtol=1e-14)
    np.testing.assert_allclose(fn.state["bn.running_var"],
                               0.75 * (0.5 + 0.5 * var_a) + 0.25 * var_b, rtol=1e-14)


def test_statistics_of_another_dtype_are_cast():
    prog, trained, inferred = _train_and_eval([None, 2, 3], "float32", stats_dtype="float64",
                                              affine=False)
    assert trained.dtype == inferred.dtype == np.float32
    train = sg.compile(prog, [trained, inferred])
    x = np.random.default_rng(6).standard_normal((5, 2, 3)).astype("float32")
    y, z = train(x=x)
    mean, var, unbiased = ref_batch_stats(x.astype(np.float64))
    np.testing.assert_allclose(y, ref_batch_norm(x, mean, var), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, ref_batch_norm(x, np.zeros(2), np.ones(2)), rtol=1e-5)
    assert train.state["bn.running_var"].dtype == np.float64
    np.testing.assert_allclose(train.state["bn.running_var"], 0.9 + 0.1 * unbiased, rtol=1e-6)


def test_one_value_per_channel_at_run_time_gives_a_nan_running_variance():
    """A static shape with one value per channel is refused when built (below); with an
    unknown batch size the unbiased variance of one value is nan, as NumPy's var(ddof=1)."""
    prog, trained, _ = _train_and_eval([None, 2], affine=False)
    fn = sg.compile(prog, [trained])
    with np.errstate(divide="ignore", invalid="ignore"):
        (y,) = fn(x=np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(y, [[0.0, 0.0]])
    np.testing.assert_allclose(fn.state["bn.running_mean"], [0.1, 0.2])
    assert np.isnan(fn.state["bn.running_var"]).all()


def _in_cond(x, mean, var):
    return sg.cond(sg.sum(x) > 0.0, lambda v: nn.batch_norm(v, mean, var, training=True),
                   lambda v: v, x)


@pytest.mark.parametrize("call, error, message", [
    (lambda x, m, v: nn.batch_norm(sg.data("i", [2, 3], "int32"), m, v), DTypeError,
     "batch_norm: needs a floating input, got int32[2, 3]"),
    (lambda x, m, v: nn.batch_norm(sg.data("r", [3]), m, v), ShapeError,
     "batch_norm: needs an input [N, C, ...] of rank >= 2, got float32[3]"),
    (lambda x, m, v: nn.batch_norm(x, sg.data("m4", [4]), v), ShapeError,
     "batch_norm: running_mean float32[4] must be 1-D with the 3 features of axis 1 of "
     "float32[?0, 3, 4]"),
    (lambda x, m, v: nn.batch_norm(x, m, v, sg.data("w", [3, 1])), ShapeError,
     "batch_norm: weight float32[3, 1] must be 1-D"),
    (lambda x, m, v: nn.batch_norm(x, m, None), ValueError,
     "batch_norm: give both running_mean and running_var, or neither"),
    (lambda x, m, v: nn.batch_norm(x, None, None), ValueError,
     "batch_norm: needs running_mean and running_var when not training"),
    (lambda x, m, v: nn.batch_norm(x, sg.data("d", [3]), v, training=True), TypeError,
     "batch_norm: in training mode running_mean must be a parameter"),
    (lambda x, m, v: nn.batch_norm(x, sg.data("k", [3], "int32"), v), DTypeError,
     "batch_norm: running_mean needs a floating dtype, got int32[3]"),
    (lambda x, m, v: nn.batch_norm(sg.data("one", [1, 3, 1]), m, v, training=True), ValueError,
     "batch_norm: expected more than 1 value per channel when training, got input "
     "float32[1, 3, 1]"),
    (lambda x, m, v: nn.batch_norm(sg.data("one", [1, 3]), None, None, training=True),
     ValueError, "batch_norm: expected more than 1 value per channel when training"),
    (lambda x, m, v: nn.batch_norm(x, m, v, momentum=1.5), ValueError,
     "batch_norm: momentum must be a number in [0.0, 1.0], got 1.5"),
    (lambda x, m, v: nn.batch_norm(x, m, v, momentum=None), ValueError, "momentum must be"),
    (lambda x, m, v: nn.batch_norm(x, m, v, eps=-1e-5), ValueError,
     "batch_norm: eps must be a number >= 0.0"),
    (_in_cond, ScopeError, "batch_norm: in training mode it updates the running statistics "
     "'bn.running_mean' and 'bn.running_var', which only the program's global block can do"),
    (lambda x, m, v: nn.batch_norm_stats("other", 0), ValueError,
     "batch_norm_stats: num_features must be a positive int, got 0"),
])
def test_errors_name_batch_norm(call, error, message):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, 3, 4])
        mean, var = nn.batch_norm_stats("bn", 3)
        with pytest.raises(error) as info:
            call(x, mean, var)
    assert message in str(info.value)
