"""OpSamples of matmul and the nn ops (conv2d and its gradients, conv_transpose2d, pooling,
softmax family, cross-entropy, one_hot, linear, batch_norm), each with an independent NumPy
reference."""
import numpy as np

import symgrad as sg
from symgrad import nn
from symgrad.ops.core import bind

from .samples import OpSample

R = np.random.default_rng(7)


def normal(*shape):
    return R.standard_normal(shape)


# --- references (loops over kernel taps, written independently of symgrad.ops.kernels) ---------
def ref_conv(x, w, stride=1, padding=0, dilation=1, groups=1):
    s, p, d = stride, padding, dilation
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho, wo = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * d:i * d + s * (ho - 1) + 1:s,
                           j * d:j * d + s * (wo - 1) + 1:s]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                         w[g * og:(g + 1) * og, :, i, j])
    return out


def ref_conv_input_grad(g, w, hw, stride=1, padding=0, dilation=1, groups=1):
    """J^T g, with J the matrix of x -> conv(x, w), built column by column."""
    n, o = g.shape[:2]
    c = w.shape[1] * groups
    size = c * hw[0] * hw[1]
    basis = np.eye(size).reshape(size, 1, c, *hw)
    jac = np.stack([ref_conv(e, w, stride, padding, dilation, groups)[0] for e in basis])
    return np.einsum("knohw,nohw->nk", jac[:, None], g).reshape(n, c, *hw)


def ref_conv_weight_grad(x, g, khw, stride=1, padding=0, dilation=1, groups=1):
    o, c = g.shape[1], x.shape[1] // groups
    size = o * c * khw[0] * khw[1]
    basis = np.eye(size).reshape(size, o, c, *khw)
    return np.stack([np.vdot(ref_conv(x, e, stride, padding, dilation, groups), g)
                     for e in basis]).reshape(o, c, *khw)


def ref_conv_transpose(x, w, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """PyTorch's definition: each input pixel scatters ``x * w`` into the output, which is
    then cropped by ``padding`` (``output_padding`` rows and columns stay zero)."""
    s, p, d = stride, padding, dilation
    n, c, h, wd = x.shape
    og, kh, kw = w.shape[1:]
    ho = (h - 1) * s - 2 * p + d * (kh - 1) + output_padding + 1
    wo = (wd - 1) * s - 2 * p + d * (kw - 1) + output_padding + 1
    out = np.zeros((n, og * groups, ho + 2 * p, wo + 2 * p))
    cg = c // groups
    for ci in range(c):
        k = ci // cg
        for i in range(kh):
            for j in range(kw):
                contribution = np.einsum("nhw,o->nohw", x[:, ci], w[ci, :, i, j])
                out[:, k * og:(k + 1) * og, i * d:i * d + s * (h - 1) + 1:s,
                    j * d:j * d + s * (wd - 1) + 1:s] += contribution
    return out[:, :, p:p + ho, p:p + wo]


def ref_batch_norm(x, mean, var, w=None, b=None, eps=1e-5):
    """PyTorch's formula, per channel (axis 1): (x - mean) / sqrt(var + eps) * w + b."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    y = y if w is None else y * w.reshape(shape)
    return y if b is None else y + b.reshape(shape)


def ref_batch_stats(x):
    """(mean, biased variance, unbiased variance) per channel (axis 1)."""
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=axes), x.var(axis=axes), x.var(axis=axes, ddof=1)


def ref_pool(x, k, s, p, reduce):
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            r0, q0 = max(i * s - p, 0), max(j * s - p, 0)
            window = x[:, :, r0:i * s - p + k, q0:j * s - p + k]
            out[:, :, i, j] = reduce(window, axis=(2, 3))
    return out


def ref_log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def ref_ce(z, y, axis=-1):
    logp = ref_log_softmax(z, axis)
    if y.dtype.kind == "f":
        return -(y * logp).sum(axis=axis)
    return -np.squeeze(np.take_along_axis(logp, np.expand_dims(y, axis), axis), axis)


def ref_ce_grad(z, y, g, axis):
    """(softmax(z) - onehot(y)) * g along ``axis`` (``g`` shaped like the losses)."""
    hot = np.zeros_like(z)
    np.put_along_axis(hot, np.expand_dims(y, axis), 1.0, axis)
    return (np.exp(ref_log_softmax(z, axis)) - hot) * np.expand_dims(g, axis)


def conv_attrs(stride=1, padding=0, dilation=1, groups=1):
    return {"stride": (stride, stride), "padding": (padding, padding),
            "dilation": (dilation, dilation), "groups": groups}


def pool_attrs(k, s, p):
    return {"kernel_size": (k, k), "stride": (s, s), "padding": (p, p)}


# --- samples ------------------------------------------------------------------------------------
MATMUL = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 2, 3), (3, 2)),
          ((1, 2, 3), (2, 3, 2)), ((3,), (2, 3, 2))]

CONV = [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=1), dict(groups=2),
        dict(groups=2, stride=2, dilation=2, padding=2)]

SAMPLES = [OpSample("matmul", lambda a, b: a @ b, [normal(*sa), normal(*sb)], np.matmul)
           for sa, sb in MATMUL]
SAMPLES.append(OpSample("matmul", lambda a, b: a @ b, [normal(3, 2, 3), normal(3, 2)], np.matmul,
                        dynamic=(0,), id="matmul-dynamic"))
SAMPLES.append(OpSample("matmul", lambda x, w, b: nn.linear(x, w, b),
                        [normal(4, 3), normal(3, 2), normal(2)], lambda x, w, b: x @ w + b,
                        dynamic=(0,), id="linear-bias"))

for kw in CONV:
    tag = "-".join(f"{k}{v}" for k, v in kw.items()) or "plain"
    x, w = normal(2, 2, 4, 4), normal(2, 2 // kw.get("groups", 1), 3, 3)
    y_shape = ref_conv(x, w, **kw).shape
    SAMPLES += [
        OpSample("conv2d", lambda a, b, kw=kw: nn.conv2d(a, b, **kw), [x, w],
                 lambda a, b, kw=kw: ref_conv(a, b, **kw), dynamic=(0,), id=f"conv2d-{tag}"),
        OpSample("conv2d_input_grad",
                 lambda g, b, kw=kw: bind("conv2d_input_grad", [g, b],
                                          {"input_hw": (4, 4), **conv_attrs(**kw)}),
                 [normal(*y_shape), w], lambda g, b, kw=kw: ref_conv_input_grad(g, b, (4, 4), **kw),
                 id=f"conv2d_input_grad-{tag}"),
        OpSample("conv2d_weight_grad",
                 lambda a, g, kw=kw: bind("conv2d_weight_grad", [a, g],
                                          {"kernel_hw": (3, 3), **conv_attrs(**kw)}),
                 [x, normal(*y_shape)],
                 lambda a, g, kw=kw: ref_conv_weight_grad(a, g, (3, 3), **kw),
                 dynamic=(0, 1), id=f"conv2d_weight_grad-{tag}"),
    ]
SAMPLES.append(OpSample("conv2d", lambda a, b, c: nn.conv2d(a, b, c, padding=1),
                        [normal(1, 2, 4, 4), normal(3, 2, 3, 3), normal(3)],
                        lambda a, b, c: ref_conv(a, b, padding=1) + c[:, None, None],
                        id="conv2d-bias"))

for k, s, p in [(2, 2, 0), (3, 1, 1), (3, 2, 1)]:
    # distinct, well-separated values: no ties, and no max changes under finite differences
    x = R.permutation(2 * 5 * 5).reshape(1, 2, 5, 5) / 10.0
    y_shape = ref_pool(x, k, s, p, np.max).shape
    tag = f"k{k}s{s}p{p}"
    SAMPLES += [
        OpSample("max_pool2d", lambda a, k=k, s=s, p=p: nn.max_pool2d(a, k, s, p), [x],
                 lambda a, k=k, s=s, p=p: ref_pool(a, k, s, p, np.max), dynamic=(0,),
                 id=f"max_pool2d-{tag}"),
        OpSample("avg_pool2d", lambda a, k=k, s=s, p=p: nn.avg_pool2d(a, k, s, p),
                 [normal(1, 2, 5, 5)],
                 lambda a, k=k, s=s, p=p: ref_pool(a, k, s, p, np.mean), dynamic=(0,),
                 id=f"avg_pool2d-{tag}"),
        OpSample("max_pool2d_grad",
                 lambda a, g, k=k, s=s, p=p: bind("max_pool2d_grad", [a, g], pool_attrs(k, s, p)),
                 [x, normal(*y_shape)], id=f"max_pool2d_grad-{tag}"),
        OpSample("max_pool2d_select",
                 lambda a, h, k=k, s=s, p=p: bind("max_pool2d_select", [a, h],
                                                  pool_attrs(k, s, p)),
                 [x, normal(*x.shape)], id=f"max_pool2d_select-{tag}"),
        OpSample("avg_pool2d_grad",
                 lambda g, k=k, s=s, p=p: bind("avg_pool2d_grad", [g],
                                               {"input_hw": (5, 5), **pool_attrs(k, s, p)}),
                 [normal(*y_shape)], id=f"avg_pool2d_grad-{tag}"),
    ]

for axis in (-1, 1):
    SAMPLES += [
        OpSample("softmax", lambda a, axis=axis: nn.softmax(a, axis), [normal(2, 3, 4)],
                 lambda a, axis=axis: np.exp(ref_log_softmax(a, axis)), id=f"softmax-axis{axis}"),
        OpSample("log_softmax", lambda a, axis=axis: nn.log_softmax(a, axis), [normal(2, 3, 4)],
                 lambda a, axis=axis: ref_log_softmax(a, axis), dynamic=(0,),
                 id=f"log_softmax-axis{axis}"),
    ]

SAMPLES += [
    OpSample("softmax_cross_entropy", lambda z, y: nn.softmax_cross_entropy(z, y),
             [normal(5, 4), R.integers(0, 4, 5)], lambda z, y: ref_ce(z, y).mean(),
             dynamic=(0, 1), id="softmax_cross_entropy-int-mean"),
    OpSample("softmax_cross_entropy",
             lambda z, y: nn.softmax_cross_entropy(z, y, axis=1, reduction="none"),
             [normal(2, 4, 3), R.integers(0, 4, (2, 3))], lambda z, y: ref_ce(z, y, 1),
             id="softmax_cross_entropy-int-axis1"),
    OpSample("softmax_cross_entropy",
             lambda z, y: nn.softmax_cross_entropy(z, y, reduction="sum"),
             [normal(3, 4), R.dirichlet(np.ones(4), 3)], lambda z, y: ref_ce(z, y).sum(),
             id="softmax_cross_entropy-soft-sum"),
    OpSample("softmax_cross_entropy",
             lambda z, y: nn.softmax_cross_entropy(z, y, reduction="none"),
             [normal(3, 4), R.random((3, 4))], lambda z, y: ref_ce(z, y),
             dynamic=(0, 1), id="softmax_cross_entropy-soft-unnormalised"),
    OpSample("softmax_cross_entropy_grad",
             lambda z, y, g: bind("softmax_cross_entropy_grad", [z, y, g], {"axis": 1}),
             [normal(5, 4), R.integers(0, 4, 5), normal(5)],
             lambda z, y, g: ref_ce_grad(z, y, g, 1), dynamic=(0, 1, 2),
             id="softmax_cross_entropy_grad-axis1"),
    OpSample("softmax_cross_entropy_grad",
             lambda z, y, g: bind("softmax_cross_entropy_grad", [z, y, g], {"axis": 1}),
             [normal(2, 4, 3), R.integers(0, 4, (2, 3)), normal(2, 3)],
             lambda z, y, g: ref_ce_grad(z, y, g, 1), id="softmax_cross_entropy_grad-3d"),
    OpSample("one_hot", lambda i: sg.one_hot(i, 4, dtype="float64"),
             [np.array([[0, 3, 1], [2, 5, -1]])],
             lambda i: (i[..., None] == np.arange(4)).astype(np.float64),
             grad=False, grad2=False, dynamic=(0,)),
]

# conv_transpose2d is conv2d_input_grad (with a pad when output_padding reaches the stride)
CONV_TRANSPOSE = [dict(), dict(stride=2, padding=1, output_padding=1),
                  dict(groups=2, stride=2, dilation=2, padding=1),
                  dict(dilation=3, stride=2, output_padding=2)]
for kw in CONV_TRANSPOSE:
    tag = "-".join(f"{k}{v}" for k, v in kw.items()) or "plain"
    SAMPLES.append(OpSample(
        "conv2d_input_grad", lambda a, b, kw=kw: nn.conv_transpose2d(a, b, **kw),
        [normal(2, 2, 3, 3), normal(2, 2, 2, 2)],
        lambda a, b, kw=kw: ref_conv_transpose(a, b, **kw), dynamic=(0,),
        id=f"conv_transpose2d-{tag}"))
SAMPLES.append(OpSample(
    "conv2d_input_grad", lambda a, b, c: nn.conv_transpose2d(a, b, c, padding=1),
    [normal(1, 2, 3, 3), normal(2, 3, 3, 3), normal(3)],
    lambda a, b, c: ref_conv_transpose(a, b, padding=1) + c[:, None, None],
    id="conv_transpose2d-bias"))


# batch_norm is a composition (mean, sqrt, ...): the samples name its first op, mean. In
# training they fetch the running statistics' new values too; momentum=1 makes those the
# batch's, which keeps the outputs independent of the state (repeated calls update it).
def _bn_train(x, *affine):
    mean, var = nn.batch_norm_stats("bn", x.shape[1], x.dtype)
    y = nn.batch_norm(x, mean, var, *affine, training=True, momentum=1.0)
    return y, x.program.assignments[mean], x.program.assignments[var]


def _ref_bn_train(x, *affine):
    mean, var, unbiased = ref_batch_stats(x)
    return ref_batch_norm(x, mean, var, *affine), mean, unbiased


SAMPLES += [
    OpSample("mean", _bn_train, [normal(3, 2, 2, 3), normal(2), normal(2)], _ref_bn_train,
             id="batch_norm-train-affine"),
    OpSample("mean", _bn_train, [normal(4, 3, 5)], _ref_bn_train, dynamic=(0,),
             id="batch_norm-train-ncl-dynamic"),
    OpSample("mean", lambda x, w: nn.batch_norm(x, None, None, w, training=True, eps=0.1),
             [normal(5, 3), normal(3)],
             lambda x, w: ref_batch_norm(x, *ref_batch_stats(x)[:2], w, eps=0.1), dynamic=(0,),
             id="batch_norm-train-batch-stats-only"),
    OpSample("mean", lambda x, m, v, w, b: nn.batch_norm(x, m, v, w, b),
             [normal(2, 3, 2, 2), normal(3), R.uniform(0.5, 2.0, 3), normal(3), normal(3)],
             ref_batch_norm, dynamic=(0,), id="batch_norm-eval"),
]
