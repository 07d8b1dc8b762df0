"""Epilogues of native ops (symgrad/backends/c_backend/epilogues.py): the loop group that alone
reads a conv2d's result computed in the conv's GEMM output loop. Each program is compiled with
and without epilogues: the results agree bit for bit (the group's own C expressions), match
the interpreter, and the epilogue takes the group's segment away; a result read elsewhere
keeps its group apart."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends.c_backend import blas, epilogues

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

RNG = np.random.default_rng(5)
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def _compiled_both(build):
    """``build()``'s program compiled for C without epilogues, then with them."""
    saved = dict(epilogues.BLOCKS)
    epilogues.BLOCKS.clear()
    try:
        plain = sg.compile(*build(), backend="c")
    finally:
        epilogues.BLOCKS.update(saved)
    return plain, sg.compile(*build(), backend="c")


def _check(build, feeds_list, dtype, fused=True):
    plain, fused_fn = _compiled_both(build)
    reference = sg.compile(*build(), backend="interpreter")
    segments = plain.stats["c_segments"] - fused_fn.stats["c_segments"]
    assert segments == (1 if fused else 0)
    for feeds in feeds_list:
        expected, before, after = reference(**feeds), plain(**feeds), fused_fn(**feeds)
        for e, b, a in zip(expected, before, after):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def _conv_program(dtype, x_shape, w_shape, with_bias=True, extra=None, fetch_conv=False,
                  pool=2, batch=None, **attrs):
    """relu(conv2d(x, w) + b [+ r]) and the gradients of the sum of squares of its max
    pooling (a native op after the group, as in a CNN: a loss read right away would fuse the
    whole step into one group with a reduction); ``extra``: the shape of ``r``, an operand
    shaped like the result; ``batch``: the static batch dim (None: dynamic)."""
    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [batch] + list(x_shape[1:]), dtype)
            w = sg.data("w", list(w_shape), dtype)
            b = sg.data("b", [w_shape[0]], dtype)
            conv = nn.conv2d(x, w, b if with_bias else None, **attrs)
            pre = conv if extra is None else conv + sg.data("r", [batch] + list(extra[1:]), dtype)
            y = nn.relu(pre)
            h = nn.max_pool2d(y, pool, pool, 0)
            loss = sg.sum(h * h)
            grads = ir_backward.grad(loss, [x, w, b] if with_bias else [x, w])
        return prog, [y, *grads] + ([conv] if fetch_conv else [])
    return build


def _feeds(dtype, x_shape, w_shape, batches, extra=None):
    out = []
    for n in batches:
        feeds = {"x": RNG.standard_normal((n,) + tuple(x_shape[1:])).astype(dtype),
                 "w": RNG.standard_normal(w_shape).astype(dtype),
                 "b": RNG.standard_normal(w_shape[0]).astype(dtype)}
        if extra is not None:
            feeds["r"] = RNG.standard_normal((n,) + tuple(extra[1:])).astype(dtype)
        out.append(feeds)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bias_and_relu_run_in_the_conv_with_a_dynamic_batch(dtype):
    x_shape, w_shape = (2, 3, 6, 6), (4, 3, 3, 3)
    _check(_conv_program(dtype, x_shape, w_shape, padding=1),
           _feeds(dtype, x_shape, w_shape, [2, 3, 1]), dtype)


def test_an_operand_shaped_like_the_result_with_groups_and_stride():
    x_shape, w_shape, out = (2, 4, 7, 7), (6, 2, 3, 3), (2, 6, 3, 3)
    _check(_conv_program("float32", x_shape, w_shape, extra=out, pool=3, batch=2, stride=2,
                         groups=2),
           _feeds("float32", x_shape, w_shape, [2], extra=out), "float32")


def test_relu_without_bias():
    x_shape, w_shape = (2, 2, 4, 4), (3, 2, 1, 1)
    _check(_conv_program("float32", x_shape, w_shape, with_bias=False),
           _feeds("float32", x_shape, w_shape, [2]), "float32")


def test_a_fetched_sum_with_the_bias_is_an_output_of_the_epilogue():
    x_shape, w_shape = (2, 3, 4, 4), (4, 3, 3, 3)
    _check(_conv_program("float32", x_shape, w_shape, fetch_conv=True, padding=1),
           _feeds("float32", x_shape, w_shape, [2]), "float32")


def test_a_result_read_elsewhere_keeps_its_group_apart():
    x_shape, w_shape = (2, 3, 4, 4), (4, 3, 3, 3)
    _check(_conv_program("float32", x_shape, w_shape, with_bias=False, fetch_conv=True,
                         padding=1),
           _feeds("float32", x_shape, w_shape, [2]), "float32", fused=False)
