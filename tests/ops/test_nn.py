"""symgrad.nn and the opaque nn ops: forward against naive NumPy loops (and the samples
against their references), kernel adjointness, conv_transpose2d, shape/dtype errors, dynamic
batch, and the generated-code helpers."""
import inspect
import itertools

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends.host import lowering as numpy_lowering
from symgrad.ops.core import evaluate_vjp
from symgrad import ir_backward, nn
from symgrad.ops import REGISTRY, kernels
from tests.ops.samples import interpret
from tests.ops.samples_nn import SAMPLES as ALL_NN_SAMPLES

NN_SAMPLES = [s for s in ALL_NN_SAMPLES if s.expected is not None]

RNG = np.random.default_rng(0)


def run(build, *arrays, dynamic=()):
    """The interpreter's result(s) of ``build`` on data inputs shaped like ``arrays``."""
    return interpret(build, *arrays, dynamic=dynamic)[1]


# --- naive references ---------------------------------------------------------------------
def naive_conv(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, ho, wo), np.result_type(x, w))
    og = o // groups
    for b, oc, i, j in itertools.product(range(n), range(o), range(ho), range(wo)):
        g = oc // og
        for ci, a, e in itertools.product(range(cg), range(kh), range(kw)):
            pixel = xp[b, g * cg + ci, i * sh + a * dh, j * sw + e * dw]
            out[b, oc, i, j] += pixel * w[oc, ci, a, e]
    return out


def naive_pool(x, k, s, p, kind):
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    out = np.zeros((n, c, ho, wo), x.dtype)
    grad = np.zeros_like(x)
    for b, ch, i, j in itertools.product(range(n), range(c), range(ho), range(wo)):
        rows = [r for r in range(i * s[0] - p[0], i * s[0] - p[0] + k[0]) if 0 <= r < h]
        cols = [q for q in range(j * s[1] - p[1], j * s[1] - p[1] + k[1]) if 0 <= q < w]
        window = x[b, ch][np.ix_(rows, cols)]
        if kind == "max":
            out[b, ch, i, j] = window.max()
            ties = window == window.max()
            grad[b, ch][np.ix_(rows, cols)] += ties / ties.sum()
        else:
            out[b, ch, i, j] = window.mean()
            grad[b, ch][np.ix_(rows, cols)] += 1.0 / window.size
    return out, grad


# --- conv2d -----------------------------------------------------------------------------------
CONV_CASES = [
    dict(),
    dict(stride=2),
    dict(padding=1),
    dict(stride=(2, 1), padding=(1, 2)),
    dict(dilation=2, padding=2),
    dict(groups=2),
    dict(groups=4, stride=2, padding=1, dilation=(1, 2)),
]


@pytest.mark.parametrize("kw", CONV_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_forward_matches_naive_loops(kw, dtype):
    groups = kw.get("groups", 1)
    x = RNG.standard_normal((2, 4, 7, 6)).astype(dtype)
    w = RNG.standard_normal((4, 4 // groups, 3, 2)).astype(dtype)
    got = run(lambda a, b: nn.conv2d(a, b, **kw), x, w)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    ref = naive_conv(x, w, pair(kw.get("stride", 1)), pair(kw.get("padding", 0)),
                     pair(kw.get("dilation", 1)), groups)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)


def test_conv2d_bias_and_dynamic_batch():
    x = RNG.standard_normal((3, 2, 5, 5))
    w = RNG.standard_normal((3, 2, 3, 3))
    b = RNG.standard_normal(3)
    got = run(lambda a, c, d: nn.conv2d(a, c, d, padding=1), x, w, b, dynamic=(0,))
    np.testing.assert_allclose(got, naive_conv(x, w, padding=(1, 1)) + b[:, None, None])


@pytest.mark.parametrize("kw", CONV_CASES, ids=str)
def test_conv2d_gradient_kernels_are_adjoint(kw):
    """<conv(x, w), g> == <x, input_grad(g, w)> == <w, weight_grad(x, g)>."""
    groups = kw.get("groups", 1)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    attrs = dict(stride=pair(kw.get("stride", 1)), padding=pair(kw.get("padding", 0)),
                 dilation=pair(kw.get("dilation", 1)), groups=groups)
    x = RNG.standard_normal((2, 4, 7, 6))
    w = RNG.standard_normal((8, 4 // groups, 3, 2))
    y = kernels.conv2d_forward(x, w, **attrs)
    g = RNG.standard_normal(y.shape)
    dx = kernels.conv2d_input_grad(g, w, x.shape[2:], **attrs)
    dw = kernels.conv2d_weight_grad(x, g, w.shape[2:], **attrs)
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, dx), rtol=1e-10)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(w, dw), rtol=1e-10)


def test_conv2d_gradient_ops_shapes():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 9, 9], "float64")
        w = sg.data("w", [6, 2, 3, 3], "float64")
        y = nn.conv2d(x, w, stride=2, groups=2)
        (vjp_x, vjp_w) = evaluate_vjp(y.op, [y])
    assert vjp_x.shape == (None, 4, 9, 9) and vjp_w.shape == (6, 2, 3, 3)
    assert vjp_x.op.name == "conv2d_input_grad" and vjp_w.op.name == "conv2d_weight_grad"


@pytest.mark.parametrize("call, message", [
    (lambda x, w: nn.conv2d(x, w[:, :2]), "has 4 channels but weight"),
    (lambda x, w: nn.conv2d(x, w, groups=3), "groups=3 does not divide"),
    (lambda x, w: nn.conv2d(x[:, :, :2, :2], w), "larger than the padded input"),
    (lambda x, w: nn.conv2d(x, w, dilation=4), "larger than the padded input"),
    (lambda x, w: nn.conv2d(x[0], w), "must be 4-D NCHW"),
    (lambda x, w: nn.conv2d(x, w, b=sg.data("b", [5], "float32")), "bias shape [5]"),
])
def test_conv2d_shape_errors(call, message):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, 4, 5, 5], "float32")
        w = sg.data("w", [6, 4, 3, 3], "float32")
        with pytest.raises(sg.ShapeError, match="conv2d") as info:
            call(x, w)
    assert message in str(info.value)


def test_conv2d_argument_errors():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [1, 4, 5, 5], "float32")
        w = sg.data("w", [6, 4, 3, 3], "float32")
        with pytest.raises(ValueError, match="stride must be >= 1"):
            nn.conv2d(x, w, stride=0)
        with pytest.raises(TypeError, match="padding must be an int or a pair"):
            nn.conv2d(x, w, padding=(1, 1, 1))
        with pytest.raises(ValueError, match="groups must be a positive int"):
            nn.conv2d(x, w, groups=0)
        with pytest.raises(sg.DTypeError, match="one floating dtype"):
            nn.conv2d(x, sg.data("w64", [6, 4, 3, 3], "float64"))
        with pytest.raises(sg.ShapeError, match="static channel and spatial dims"):
            nn.conv2d(sg.data("xd", [1, 4, None, 5], "float32"), w)
        with pytest.raises(sg.ShapeError, match="static channel and spatial dims"):
            nn.conv2d(sg.data("xc", [1, None, 5, 5], "float32"), w)


# --- conv_transpose2d ------------------------------------------------------------------------
def naive_conv_transpose(x, w, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1,
                         dilation=(1, 1)):
    """PyTorch's definition, pixel by pixel: out[n, g*Og + o, i*s - p + a*d, j*s - p + b*d]
    += x[n, c, i, j] * w[c, o, a, b], c in group g."""
    n, c, h, wd = x.shape
    og, kh, kw = w.shape[1:]
    (sh, sw), (ph, pw), (oh, ow), (dh, dw) = stride, padding, output_padding, dilation
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oh + 1
    wo = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + ow + 1
    out = np.zeros((n, og * groups, ho, wo), np.result_type(x, w))
    cg = c // groups
    for b, ci, i, j, a, e in itertools.product(range(n), range(c), range(h), range(wd),
                                               range(kh), range(kw)):
        r, q = i * sh - ph + a * dh, j * sw - pw + e * dw
        if 0 <= r < ho and 0 <= q < wo:
            g = ci // cg
            out[b, g * og:(g + 1) * og, r, q] += x[b, ci, i, j] * w[ci, :, a, e]
    return out


CONV_TRANSPOSE_CASES = [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 2)),
    dict(groups=2, dilation=2, padding=2),
    dict(stride=2, dilation=3, output_padding=2),   # output_padding >= stride: x is padded
    dict(groups=4, stride=(1, 2), dilation=(2, 1), output_padding=(1, 0)),
]


@pytest.mark.parametrize("kw", CONV_TRANSPOSE_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_transpose2d_forward_matches_naive_loops(kw, dtype):
    groups = kw.get("groups", 1)
    x = RNG.standard_normal((2, 4, 4, 3)).astype(dtype)
    w = RNG.standard_normal((4, 2, 3, 2)).astype(dtype)   # 2 * groups output channels
    got = run(lambda a, b: nn.conv_transpose2d(a, b, **kw), x, w, dynamic=(0,))
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    ref = naive_conv_transpose(x, w, pair(kw.get("stride", 1)), pair(kw.get("padding", 0)),
                               pair(kw.get("output_padding", 0)), groups,
                               pair(kw.get("dilation", 1)))
    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)


def test_conv_transpose2d_is_the_input_gradient_of_conv2d():
    """conv_transpose2d(g, w) == d<conv2d(x, w), g>/dx for the same weight, stride, padding,
    dilation and groups (output_padding restores x's size); its own gradients are conv2d's
    ops."""
    attrs = dict(stride=2, padding=1, dilation=(1, 2), groups=2)
    prog = sg.Program()
    with sg.program_guard(prog):
        x, w = sg.data("x", [None, 4, 7, 6], "float64"), sg.data("w", [6, 2, 3, 3], "float64")
        g = sg.data("g", [None, 6, 4, 2], "float64")
        dx, = ir_backward.grad(nn.conv2d(x, w, **attrs), [x], grad_outputs=[g])
        t = nn.conv_transpose2d(g, w, output_padding=(0, 1), **attrs)
        dt = ir_backward.grad(sg.sum(t * t), [g, w])
    assert t.op.name == "conv2d_input_grad" and t.shape == (None, 4, 7, 6)
    assert [v.op.name for v in dt] == ["conv2d", "conv2d_weight_grad"]
    feeds = dict(x=RNG.standard_normal((2, 4, 7, 6)), w=RNG.standard_normal((6, 2, 3, 3)),
                 g=RNG.standard_normal((2, 6, 4, 2)))
    want, got = sg.compile(prog, [dx, t], backend="numpy")(**feeds)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, naive_conv_transpose(
        feeds["g"], feeds["w"], (2, 2), (1, 1), (0, 1), 2, (1, 2)), rtol=1e-12)


@pytest.mark.parametrize("call, error, message", [
    (lambda x, w: nn.conv_transpose2d(x, w[:2]), sg.ShapeError,
     "conv_transpose2d: input float32[?0, 4, 5, 5] has 4 channels but weight float32[2, 3, 3, 3] "
     "expects 2"),
    (lambda x, w: nn.conv_transpose2d(x, w, groups=3), sg.ShapeError,
     "conv_transpose2d: groups=3 does not divide the 4 channels"),
    (lambda x, w: nn.conv_transpose2d(x[0], w), sg.ShapeError, "must be 4-D NCHW"),
    (lambda x, w: nn.conv_transpose2d(sg.data("xd", [1, 4, None, 5]), w), sg.ShapeError,
     "static channel and spatial dims"),
    (lambda x, w: nn.conv_transpose2d(x, sg.data("w3", [4, 3, 3])), sg.ShapeError,
     "weight must be a static 4-D [in, out/groups, kh, kw]"),
    (lambda x, w: nn.conv_transpose2d(x, w, padding=5), sg.ShapeError,
     "would be [-3, -3]: too small"),
    (lambda x, w: nn.conv_transpose2d(x, w, b=sg.data("b", [4])), sg.ShapeError,
     "conv_transpose2d: bias shape [4] does not match the 3 output channels"),
    (lambda x, w: nn.conv_transpose2d(x, w, stride=2, output_padding=2), ValueError,
     "output_padding (2, 2) must be smaller than the stride (2, 2) or the dilation (1, 1) "
     "along h"),
    (lambda x, w: nn.conv_transpose2d(x, w, output_padding=-1), ValueError,
     "output_padding must be >= 0"),
    (lambda x, w: nn.conv_transpose2d(x, w, groups=0), ValueError,
     "conv_transpose2d: groups must be a positive int"),
    (lambda x, w: nn.conv_transpose2d(x, sg.data("w64", [4, 3, 3, 3], "float64")),
     sg.DTypeError, "conv_transpose2d: input and weight need operands of one floating dtype, "
     "got float32, float64"),
])
def test_conv_transpose2d_errors(call, error, message):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, 4, 5, 5], "float32")
        w = sg.data("w", [4, 3, 3, 3], "float32")
        with pytest.raises(error) as info:
            call(x, w)
    assert message in str(info.value)


# --- samples: forward against their references ------------------------------------------------
@pytest.mark.parametrize("sample", NN_SAMPLES, ids=lambda s: s.id)
def test_sample_forward_matches_the_reference(sample):
    out, got = interpret(sample.build, *sample.inputs, dynamic=sample.dynamic)
    want = sample.expected(*sample.inputs)
    got, want = (list(v) if isinstance(out, tuple) else [v] for v in (got, want))
    for g, w in zip(got, want, strict=True):
        assert g.shape == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# --- pooling ----------------------------------------------------------------------------------
POOL_CASES = [((2, 2), None, (0, 0)), ((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0)),
              ((2, 3), (1, 2), (0, 1))]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("k, s, p", POOL_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pool_forward_matches_naive_loops(kind, k, s, p, dtype):
    x = RNG.standard_normal((2, 3, 6, 5)).astype(dtype)
    pool = nn.max_pool2d if kind == "max" else nn.avg_pool2d
    got = run(lambda a: pool(a, k, s, p), x, dynamic=(0,))
    ref, _ = naive_pool(x, k, s or k, p, kind)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_pool_gradients_match_naive_loops_with_ties(k, s, p):
    x = RNG.integers(0, 3, (2, 2, 6, 5)).astype(np.float64)   # many ties
    s = s or k
    _, max_ref = naive_pool(x, k, s, p, "max")
    _, avg_ref = naive_pool(x, k, s, p, "avg")
    ones = np.ones_like(kernels.max_pool2d_forward(x, k, s, p))
    np.testing.assert_allclose(kernels.max_pool2d_grad(x, ones, k, s, p), max_ref)
    np.testing.assert_allclose(kernels.avg_pool2d_grad(ones, x.shape[2:], k, s, p), avg_ref)


@pytest.mark.parametrize("padding", [(0, 0), (1, 1)])
def test_max_pool_gradient_of_tiling_windows_matches_the_general_path(padding):
    """Windows that tile the padded input (stride = kernel size) get each tap's products
    written in place; the general path (here: one more column, in no window) sums them from
    +0.0: the same bits, ties, signed zeros, NaN inputs and cotangents included. The extra
    column is -inf, so where padding puts it in a window it acts as the padding does."""
    x = RNG.integers(0, 3, (2, 3, 6, 8)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    g = RNG.standard_normal(kernels.max_pool2d_forward(x, (2, 2), (2, 2), padding).shape)
    g = g.astype(np.float32)
    g[0, 1, 0, 0], g[1, 0, 1, 1], g[1, 2, 2, 3] = np.inf, np.nan, -0.0
    wider = np.concatenate([x, np.full_like(x[..., :1], -np.inf)], axis=3)
    with np.errstate(invalid="ignore"):   # 0 * inf
        tiled = kernels.max_pool2d_grad(x, g, (2, 2), (2, 2), padding)
        general = kernels.max_pool2d_grad(wider, g, (2, 2), (2, 2), padding)[..., :8]
    np.testing.assert_array_equal(tiled.view(np.uint32), general.view(np.uint32))


@pytest.mark.parametrize("k, s, p", POOL_CASES)
def test_pool_gradient_kernels_are_adjoint(k, s, p):
    x = RNG.integers(0, 3, (2, 2, 6, 5)).astype(np.float64)
    s = s or k
    g = RNG.standard_normal(kernels.max_pool2d_forward(x, k, s, p).shape)
    h = RNG.standard_normal(x.shape)
    np.testing.assert_allclose(np.vdot(kernels.max_pool2d_grad(x, g, k, s, p), h),
                               np.vdot(g, kernels.max_pool2d_select(x, h, k, s, p)))
    np.testing.assert_allclose(np.vdot(kernels.avg_pool2d_forward(h, k, s, p), g),
                               np.vdot(h, kernels.avg_pool2d_grad(g, x.shape[2:], k, s, p)))


def test_max_pool_accepts_unknown_spatial_dims():
    x = RNG.standard_normal((1, 2, 6, 4))
    got = run(lambda a: nn.max_pool2d(a, 2), x, dynamic=(0,))
    np.testing.assert_allclose(got, naive_pool(x, (2, 2), (2, 2), (0, 0), "max")[0])
    with sg.program_guard(sg.Program()):
        y = nn.max_pool2d(sg.data("x", [None, 2, None, 4], "float32"), 2)
    assert y.shape == (None, 2, None, 2)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: nn.max_pool2d(x, 7), sg.ShapeError, "larger than the padded input"),
    (lambda x: nn.avg_pool2d(x, 2, padding=2), sg.ShapeError, "at most half the kernel"),
    (lambda x: nn.max_pool2d(x[0], 2), sg.ShapeError, "must be 4-D NCHW"),
    (lambda x: nn.max_pool2d(x, 0), ValueError, "kernel_size must be >= 1"),
    (lambda x: nn.avg_pool2d(sg.data("i", [1, 2, 4, 4], "int32"), 2), sg.DTypeError,
     "floating"),
    (lambda x: nn.avg_pool2d(sg.data("d", [1, 2, None, 4], "float32"), 2), sg.ShapeError,
     "static spatial dims"),
])
def test_pool_errors(call, error, message):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, 2, 6, 6], "float32")
        with pytest.raises(error, match=message):
            call(x)


# --- softmax family ---------------------------------------------------------------------------
def ref_log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_and_log_softmax(axis, dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 50).astype(dtype)   # large logits: must stay stable
    s, ls = run(lambda a: (nn.softmax(a, axis), nn.log_softmax(a, axis)), x)
    ref = ref_log_softmax(x.astype(np.float64), axis)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(ls, ref, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(s, np.exp(ref), rtol=tol, atol=tol)
    assert np.isfinite(ls).all()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_cross_entropy_integer_labels(reduction, axis):
    logits = RNG.standard_normal((4, 5, 3))
    labels = RNG.integers(0, logits.shape[axis], (4, 3) if axis == 1 else (4, 5))
    got = run(lambda a, b: nn.softmax_cross_entropy(a, b, axis=axis, reduction=reduction),
              logits, labels, dynamic=(0, 1))
    logp = ref_log_softmax(logits, axis)
    losses = -np.squeeze(np.take_along_axis(logp, np.expand_dims(labels, axis), axis), axis)
    ref = {"mean": losses.mean(), "sum": losses.sum(), "none": losses}[reduction]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_cross_entropy_soft_labels():
    logits = RNG.standard_normal((6, 4)).astype(np.float32)
    labels = RNG.dirichlet(np.ones(4), 6).astype(np.float32)
    got = run(lambda a, b: nn.softmax_cross_entropy(a, b, reduction="none"), logits, labels)
    ref = -(labels * ref_log_softmax(logits.astype(np.float64), -1)).sum(-1)
    assert got.dtype == np.float32 and got.shape == (6,)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


@pytest.mark.parametrize("call, error, message", [
    (lambda z, y: nn.softmax_cross_entropy(z, y[:, None]), sg.ShapeError, "integer labels"),
    (lambda z, y: nn.softmax_cross_entropy(z, sg.data("s", [None, 3], "float32")),
     sg.ShapeError, "soft labels"),
    (lambda z, y: nn.softmax_cross_entropy(z, sg.data("s", [None, 4], "float64")),
     sg.DTypeError, "logits' dtype"),
    (lambda z, y: nn.softmax_cross_entropy(z, y, reduction="avg"), ValueError, "reduction"),
    (lambda z, y: nn.softmax_cross_entropy(z, y, axis=2), sg.ShapeError, "out of range"),
    (lambda z, y: nn.softmax(y), sg.DTypeError, "floating"),
    (lambda z, y: nn.softmax_cross_entropy(sg.data("u", [None, None], "float32"), y),
     sg.ShapeError, "must be static"),
    (lambda z, y: nn.softmax(sg.data("c", [], "float32")), sg.ShapeError, "scalar"),
])
def test_softmax_family_errors(call, error, message):
    with sg.program_guard(sg.Program()):
        z = sg.data("z", [None, 4], "float32")
        y = sg.data("y", [None], "int64")
        with pytest.raises(error, match=message):
            call(z, y)


# --- one_hot, linear --------------------------------------------------------------------------
def test_one_hot():
    idx = np.array([[0, 2], [3, -1]], dtype=np.int64)
    got = run(lambda i: sg.one_hot(i, 3, dtype="float64"), idx, dynamic=(0,))
    ref = (idx[..., None] == np.arange(3)).astype(np.float64)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, ref)
    with sg.program_guard(sg.Program()):
        with pytest.raises(sg.DTypeError, match="integer"):
            sg.one_hot(sg.data("f", [2], "float32"), 3)
        with pytest.raises(ValueError, match="num_classes"):
            sg.one_hot(sg.data("i", [2], "int32"), 0)


def test_one_hot_kernel_inner_axis():
    idx = np.array([[1, 0, 2]])
    np.testing.assert_array_equal(kernels.one_hot_forward(idx, 3, "int32", 1),
                                  np.moveaxis(np.eye(3, dtype=np.int32)[idx], -1, 1))


def test_linear():
    x = RNG.standard_normal((5, 3))
    w = RNG.standard_normal((3, 2))
    b = RNG.standard_normal(2)
    got = run(lambda a, c, d: nn.linear(a, c, d), x, w, b, dynamic=(0,))
    np.testing.assert_allclose(got, x @ w + b)
    np.testing.assert_allclose(run(lambda a, c: nn.linear(a, c), x, w), x @ w)
    with sg.program_guard(sg.Program()):
        xv, wv = sg.data("x", [None, 3]), sg.data("w", [3, 2])
        with pytest.raises(sg.ShapeError, match="weight must be 2-D"):
            nn.linear(xv, sg.data("w3", [3]))
        with pytest.raises(sg.ShapeError, match="bias shape"):
            nn.linear(xv, wv, sg.data("b", [3]))


def test_nn_exports_activations():
    for name in ("relu", "gelu", "softplus"):
        assert callable(getattr(nn, name))
    assert not hasattr(sg, "conv2d") and callable(sg.one_hot)


# --- generated-code helpers -----------------------------------------------------------------
NN_OP_NAMES = ["conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d",
               "max_pool2d_grad", "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad",
               "softmax", "log_softmax", "softmax_cross_entropy", "one_hot"]


@pytest.mark.parametrize("name", NN_OP_NAMES)
def test_numpy_helpers_run_standalone(name):
    """The helpers' source, exec'd with only ``np`` in scope, computes what the impl does."""
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 4, 6, 6], "float64")
        w = sg.data("w", [4, 2, 3, 3], "float64")
        labels = sg.data("y", [2, 6, 6], "int64")
        conv = nn.conv2d(x, w, stride=2, padding=1, groups=2)
        pool = nn.max_pool2d(x, 3, 2, 1)
        built = {
            "conv2d": conv, "max_pool2d": pool, "avg_pool2d": nn.avg_pool2d(x, 3, 2, 1),
            "softmax": nn.softmax(x, 1), "log_softmax": nn.log_softmax(x),
            "softmax_cross_entropy": nn.softmax_cross_entropy(x, labels, 1, "none"),
            "one_hot": sg.one_hot(labels, 3),
        }
        grads = {"conv2d": evaluate_vjp(conv.op, [conv]),
                 "max_pool2d": evaluate_vjp(pool.op, [pool])}
    built["conv2d_input_grad"], built["conv2d_weight_grad"] = grads["conv2d"]
    built["max_pool2d_grad"], = grads["max_pool2d"]
    built["max_pool2d_select"] = evaluate_vjp(
        built["max_pool2d_grad"].op, [x])[1]
    avg = built["avg_pool2d"]
    built["avg_pool2d_grad"] = evaluate_vjp(avg.op, [avg])[0]
    op = built[name].op
    assert op.name == name
    opdef = REGISTRY[name]
    namespace = {"np": np}
    rule = numpy_lowering.LOWERINGS.rule(opdef)
    for helper in rule.helpers:
        exec(inspect.getsource(helper), namespace)
    feeds = {"x": RNG.integers(0, 3, (2, 4, 6, 6)).astype(np.float64),
             "w": RNG.standard_normal((4, 2, 3, 3)),
             "y": RNG.integers(0, 3, (2, 6, 6))}
    env = {}
    for producer in op.block.program.ops:      # evaluate the op's inputs with the oracle
        if producer is op:
            break
        if producer.opdef.feedable:
            env[producer.results[0]] = feeds[producer.attrs["name"]]
        elif all(v in env for v in producer.inputs):
            env[producer.results[0]] = producer.opdef.impl(
                *[env[v] for v in producer.inputs], **producer.attrs)
    args = [env[v] for v in op.inputs]
    namespace.update({f"a{i}": a for i, a in enumerate(args)})
    code = rule.emit([f"a{i}" for i in range(len(args))], op.attrs)
    np.testing.assert_array_equal(eval(code, namespace), opdef.impl(*args, **op.attrs))


def test_nn_attrs_survive_json():
    """Attrs are plain JSON-able values: a program of every nn op round-trips and reruns."""
    import json

    from symgrad.ir.serialize import program_from_json, program_to_json

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 6, 6], "float64")
        w = sg.data("w", [4, 1, 3, 3], "float64")
        y = sg.data("y", [None], "int64")
        h = nn.max_pool2d(nn.conv2d(x, w, stride=(2, 1), padding=1, groups=2), 2, 1)
        h = nn.avg_pool2d(h, 3, 1, 1).reshape([-1, 4 * 2 * 5])
        loss = nn.softmax_cross_entropy(nn.log_softmax(h @ np.ones((40, 3))), y)
    arrays = {}

    def sink(array):
        arrays[str(len(arrays))] = array
        return str(len(arrays) - 1)

    text = json.dumps(program_to_json(prog, sink))
    copy = program_from_json(json.loads(text), arrays.__getitem__, sg.ops.op_table())
    feeds = {"x": RNG.standard_normal((2, 2, 6, 6)), "w": RNG.standard_normal((4, 1, 3, 3)),
             "y": np.array([0, 2])}
    want = sg.compile(prog, [loss], backend="interpreter")(**feeds)[0]
    got = sg.compile(copy, [copy.ops[-1].results[0]], backend="interpreter")(**feeds)[0]
    np.testing.assert_allclose(got, want)


def test_gradient_penalty_double_backward():
    """d/dθ ||d loss/dx||² through conv, relu, max-pool, linear and cross-entropy, against
    central differences of the penalty."""
    from symgrad import ir_backward

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 1, 5, 5], "float64")
        labels = sg.data("labels", [None], "int64")
        w = sg.data("w", [2, 1, 3, 3], "float64")
        w2 = sg.data("w2", [8, 3], "float64")
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, w, padding=1)), 2)
        loss = nn.softmax_cross_entropy(nn.linear(h.reshape([-1, 8]), w2), labels)
        gx, = ir_backward.grad(loss, [x], create_graph=True)
        penalty = (gx * gx).sum()
        gw, gw2 = ir_backward.grad(penalty, [w, w2])
    feeds = {"x": RNG.standard_normal((2, 1, 5, 5)), "labels": np.array([0, 2]),
             "w": RNG.standard_normal((2, 1, 3, 3)), "w2": RNG.standard_normal((8, 3))}
    fn = sg.compile(prog, [penalty, gw, gw2], backend="interpreter")
    _, got_w, got_w2 = fn(**feeds)
    for name, got in (("w", got_w), ("w2", got_w2)):
        numeric = np.zeros_like(got)
        for index in np.ndindex(got.shape):
            values = []
            for step in (1e-6, -1e-6):
                shifted = dict(feeds, **{name: feeds[name].copy()})
                shifted[name][index] += step
                values.append(fn(**shifted)[0])
            numeric[index] = (values[0] - values[1]) / 2e-6
        np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("bad", [-1, 3])
def test_cross_entropy_labels_outside_the_classes_are_an_error(backend, bad):
    prog = sg.Program()
    with sg.program_guard(prog):
        logits = sg.data("logits", [None, 3], "float64")
        labels = sg.data("labels", [None], "int64")
        loss = sg.nn.softmax_cross_entropy(logits, labels)
        g, = ir_backward.grad(loss, [logits])
    feeds = {"logits": np.zeros((2, 3)), "labels": np.array([0, bad])}
    for fetches in ([loss], [g]):   # the gradient alone checks its labels too
        fn = sg.compile(prog, fetches, backend=backend)
        with pytest.raises(ValueError, match=rf"class index {bad} is outside \[0, 3\)"):
            fn(**feeds)
    ok = sg.compile(prog, [loss, g], backend=backend)(logits=np.zeros((2, 3)),
                                                      labels=np.array([0, 2]))
    np.testing.assert_allclose(ok[0], np.log(3))


def test_one_hot_of_an_index_outside_the_classes_is_a_zero_row():
    prog = sg.Program()
    with sg.program_guard(prog):
        idx = sg.data("idx", [3], "int64")
        hot = sg.one_hot(idx, 3)
    out, = sg.compile(prog, [hot], backend="numpy")(idx=np.array([0, 3, -1]))
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
