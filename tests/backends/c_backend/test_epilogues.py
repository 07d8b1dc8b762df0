"""Epilogues of native ops (symgrad/backends/c_backend/epilogues.py): the loop group that alone
reads a conv2d's result, computed in the conv's GEMM output loop. Each program is compiled
with and without epilogues: the results agree bit for bit (the group's own C expressions) and
match the interpreter, and the fused functions are counted; a result read elsewhere keeps its
group apart, an operand computed after the conv fuses the group with the later conv; random
convolutions (geometry, groups, per-channel and residual operands, activations, a dynamic
batch) match the interpreter."""
import functools
import re
from unittest import mock

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends import c_backend
from symgrad.backends.c_backend import blas, epilogues

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

RNG = np.random.default_rng(5)
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def _fused(compiled) -> int:
    """How many native functions compute an epilogue (they write ``sg_o0``)."""
    return len(set(re.findall(r"SG_LINK int (sg_n_\w+)\([^)]*sg_o0",
                              compiled._executable.source)))


def _conv_program(dtype, x_shape, w_shape, with_bias=True, extra=None, fetch=None,
                  pool=2, batch=None, **attrs):
    """relu(conv2d(x, w) + b [+ r]) and the gradients of the sum of squares of its max
    pooling (a native op after the group, as in a CNN); ``extra``: the shape of ``r``, an
    operand shaped like the result; ``fetch``: ``"conv"`` (the convolution's result, read
    after the segment) or ``"pre"`` (the activation's input); ``batch``: the static batch dim
    (None: dynamic)."""
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
        return prog, [y, *grads] + ({"conv": [conv], "pre": [pre]}.get(fetch, []))
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


def _two_convolutions():
    """relu(conv(x, v) + conv(x, w)): the group reads the second conv's result, made after
    the first, so it is the second's epilogue, reading the first's result as an operand."""
    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 2, 5, 5], "float64")
            v = sg.data("v", [3, 2, 3, 3], "float64")
            w = sg.data("w", [3, 2, 1, 1], "float64")
            y = nn.relu(nn.conv2d(x, v, padding=1) + nn.conv2d(x, w))
            loss = sg.sum(nn.max_pool2d(y, 2, 2, 0) ** 2)
        return prog, [y, *ir_backward.grad(loss, [x, v, w])]
    feeds = [{"x": RNG.standard_normal((n, 2, 5, 5)), "v": RNG.standard_normal((3, 2, 3, 3)),
              "w": RNG.standard_normal((3, 2, 1, 1))} for n in (2, 1)]
    return build, feeds


def _scan_of_convolutions():
    """h <- relu(conv(h, w) + b) / 2 three times, and its gradient: a C loop whose body
    fuses too."""
    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            h0 = sg.data("h0", [2, 3, 4, 4], "float64")
            xs = sg.data("xs", [3, 1], "float64")
            w = sg.data("w", [3, 3, 3, 3], "float64")
            b = sg.data("b", [3], "float64")
            h, _ = sg.scan(lambda h, x: (nn.relu(nn.conv2d(h, w, b, padding=1)) * 0.5,) * 2,
                           h0, xs)
            loss = sg.sum(h * h)
        return prog, [loss, *ir_backward.grad(loss, [h0, w, b])]
    feeds = [{"h0": RNG.standard_normal((2, 3, 4, 4)), "xs": np.zeros((3, 1)),
              "w": RNG.standard_normal((3, 3, 3, 3)) * 0.3, "b": RNG.standard_normal(3)}]
    return build, feeds


def _dense_layer():
    """tanh(x @ w + b) @ v: the matmuls stay apart from their groups (the epilogues of
    ``BLOCKS`` are the convolutions')."""
    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 5], "float32")
            w = sg.data("w", [5, 7], "float32")
            b = sg.data("b", [7], "float32")
            z = sg.tanh(x @ w + b) @ sg.data("v", [7, 3], "float32")
            loss = sg.sum(z * z)
        return prog, [z, *ir_backward.grad(loss, [x, w, b])]
    feeds = [{"x": RNG.standard_normal((4, 5)).astype("float32"),
              "w": RNG.standard_normal((5, 7)).astype("float32"),
              "b": RNG.standard_normal(7).astype("float32"),
              "v": RNG.standard_normal((7, 3)).astype("float32")}]
    return build, feeds


def _conv_case(dtype, x_shape, w_shape, batches, extra=None, fused=1, **options):
    return (_conv_program(dtype, x_shape, w_shape, extra=extra, **options),
            _feeds(dtype, x_shape, w_shape, batches, extra=extra), dtype, fused)


_OUT = (2, 4, 4, 4)
# name -> (build, feeds, dtype, how many native functions compute an epilogue)
CASES = {
    # relu(conv + bias), a dynamic batch fed at three sizes
    "bias_relu_dynamic_batch_float32": _conv_case("float32", (2, 3, 6, 6), (4, 3, 3, 3),
                                                  [2, 3, 1], padding=1),
    "bias_relu_dynamic_batch_float64": _conv_case("float64", (2, 3, 6, 6), (4, 3, 3, 3),
                                                  [2, 1], padding=1),
    # an operand shaped like the result, with groups and stride
    "residual_groups_stride": _conv_case("float32", (2, 4, 7, 7), (6, 2, 3, 3), [2],
                                         extra=(2, 6, 3, 3), pool=3, batch=2, stride=2,
                                         groups=2),
    # a 1x1 conv reads its input as the columns
    "1x1_conv": _conv_case("float32", (2, 2, 4, 4), (3, 2, 1, 1), [2]),
    # relu's gradient masks by its input, the convolution's result: two readers
    "relu_without_bias_stays_apart": _conv_case("float32", (2, 2, 4, 4), (3, 2, 3, 3), [2],
                                                with_bias=False, padding=1, fused=0),
    # the fetched sum with the bias is an output of the epilogue
    "fetched_pre_activation": _conv_case("float32", (2, 3, 4, 4), (4, 3, 3, 3), [2],
                                         fetch="pre", padding=1),
    # a result read after the segment keeps its group apart; not read, it fuses
    "result_read_after_stays_apart": _conv_case("float32", (2, 3, 4, 4), (4, 3, 3, 3), [2],
                                                extra=_OUT, with_bias=False, fetch="conv",
                                                batch=2, padding=1, fused=0),
    "result_not_read_after": _conv_case("float32", (2, 3, 4, 4), (4, 3, 3, 3), [2],
                                        extra=_OUT, with_bias=False, batch=2, padding=1),
    "two_convolutions_summed": (*_two_convolutions(), "float64", 1),
    "scan_of_convolutions": (*_scan_of_convolutions(), "float64", 1),
    "dense_layer_takes_none": (*_dense_layer(), "float32", 0),
}


@functools.lru_cache(maxsize=None)
def _compiled() -> dict:
    """Every case's program compiled for C without epilogues and with them, in one batch:
    ``{name: (plain, with_epilogues)}``."""
    built = {}
    with c_backend.deferred():
        for name, (build, _, _, _) in CASES.items():
            with mock.patch.dict(epilogues.BLOCKS, clear=True):
                plain = sg.compile(*build(), backend="c")
            built[name] = plain, sg.compile(*build(), backend="c")
    return built


@pytest.mark.parametrize("name", CASES)
def test_the_epilogue_gives_the_bytes_of_the_group_and_the_interpreters_results(name):
    build, feeds_list, dtype, fused = CASES[name]
    plain, with_epilogues = _compiled()[name]
    assert (_fused(plain), _fused(with_epilogues)) == (0, fused)
    reference = sg.compile(*build(), backend="interpreter")
    for feeds in feeds_list:
        expected, before, after = reference(**feeds), plain(**feeds), with_epilogues(**feeds)
        for e, b, a in zip(expected, before, after):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_a_cnn_training_step_updates_its_state_alike():
    """Two SGD steps of conv -> relu -> pool -> dense on a dynamic batch: the parameters,
    updated in place, and the losses are those without epilogues and the interpreter's."""
    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 2, 6, 6], "float32")
            w = sg.parameter("w", [4, 2, 3, 3], "float32",
                             init=np.random.default_rng(1).standard_normal((4, 2, 3, 3)))
            b = sg.parameter("b", [4], "float32", init=np.zeros(4))
            d = sg.parameter("d", [36, 1], "float32",
                             init=np.random.default_rng(2).standard_normal((36, 1)))
            h = nn.max_pool2d(nn.relu(nn.conv2d(x, w, b, padding=1)), 2, 2, 0)
            loss = sg.mean(sg.reshape(h, [-1, 36]) @ d)
        sg.optimizer.SGD(0.1).minimize(loss)
        return prog, [loss]
    with c_backend.deferred():
        compiled = [sg.compile(*build(), backend=backend) for backend in ("interpreter", "c")]
        with mock.patch.dict(epilogues.BLOCKS, clear=True):
            compiled.append(sg.compile(*build(), backend="c"))
    assert [_fused(c) for c in compiled[1:]] == [1, 0]
    for n in (3, 2):
        x = RNG.standard_normal((n, 2, 6, 6)).astype("float32")
        expected, fused, plain = (fn(x=x)[0] for fn in compiled)
        np.testing.assert_array_equal(fused, plain)
        np.testing.assert_allclose(fused, expected, rtol=1e-5)
    for name in ("w", "b", "d"):
        np.testing.assert_array_equal(compiled[1].state[name], compiled[2].state[name])
        np.testing.assert_allclose(compiled[1].state[name], compiled[0].state[name],
                                   rtol=1e-5, atol=1e-6)


def _random_conv(rng, dtype):
    """A random convolution (kernel, stride, padding, dilation, groups, bias or not, batch
    dynamic or not), times a per-channel scale of a random layout, plus a residual when the
    batch is static, then an activation; fetches it and the gradients of its sum of squares.
    Returns ``(program, fetches, feeds)``."""
    groups, k, stride, pad, dilation = (int(rng.choice(c)) for c in
                                        ([1, 2], [1, 2, 3], [1, 2], [0, 1], [1, 2]))
    c, o, h, n = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3)), 7, 2
    dynamic, bias = bool(rng.integers(2)), bool(rng.integers(2))
    scale = [[], [o, 1, 1], [1, o, 1, 1], [1]][int(rng.integers(4))]
    activation = [nn.relu, sg.tanh, nn.gelu, lambda v: nn.leaky_relu(v, 0.1)][int(rng.integers(4))]
    feeds = {"x": rng.standard_normal((n, c, h, h)).astype(dtype),
             "w": rng.standard_normal((o, c // groups, k, k)).astype(dtype),
             "b": rng.standard_normal(o).astype(dtype)}
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None if dynamic else n, c, h, h], dtype)
        w, b = sg.data("w", list(feeds["w"].shape), dtype), sg.data("b", [o], dtype)
        y = nn.conv2d(x, w, b if bias else None, stride=stride, padding=pad,
                      dilation=dilation, groups=groups)
        if scale:
            y = y * sg.data("s", scale, dtype)
            feeds["s"] = rng.standard_normal(scale).astype(dtype)
        if not dynamic:
            y = y + sg.data("r", [n, *y.shape[1:]], dtype)
            feeds["r"] = rng.standard_normal((n, *y.shape[1:])).astype(dtype)
        y = activation(y)
        loss = sg.sum(nn.max_pool2d(y, 1, 1, 0) ** 2)
        fetches = [y, *ir_backward.grad(loss, [x, w] + ([b] if bias else []))]
    return prog, fetches, feeds


def test_random_convolutions_with_their_epilogues_match_the_interpreter():
    rng = np.random.default_rng(23)
    cases = [(*_random_conv(rng, dtype), dtype) for dtype in ["float32", "float64"] * 4]
    with c_backend.deferred():
        compiled = [sg.compile(prog, fetches, backend="c") for prog, fetches, _, _ in cases]
    for (prog, fetches, feeds, dtype), fn in zip(cases, compiled):
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
        for e, g in zip(expected, fn(**feeds)):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=10 * TOLERANCE[dtype],
                                       atol=10 * TOLERANCE[dtype])
    assert [_fused(fn) for fn in compiled] == [1] * len(cases)
