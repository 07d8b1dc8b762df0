"""Pure-NumPy kernels of the opaque ops (conv, pooling, softmax family, one_hot).

They serve twice: as the interpreter's reference ``impl`` of each op, and as helpers whose
source the NumPy code generator copies into the generated module (the ``helpers`` of their
rules in :mod:`symgrad.backends.host.lowering`).
So every function here is a self-contained top-level function that uses only ``np`` and the
other helpers of this module; an op lists every helper its kernel calls.

Layout is NCHW throughout. ``stride``, ``padding``, ``dilation``, ``kernel_size``,
``input_hw`` and ``kernel_hw`` are ``(h, w)`` pairs (tuples or lists).

Windows are read through a strided view (no copy until a contraction needs one) and written
back by a loop over the kernel taps, never over pixels.

The convolutions and max pooling take ``over_rows``, a function with the contract of
``RowPool.over_rows`` (:mod:`symgrad.backends.host.row_pool`): ``over_rows(body, n, rows)``
runs ``body(start, stop, rows)`` over ranges covering samples 0:n. All of their work on
large arrays (padding, im2col, the GEMMs, col2im, zeroing, the pooling loops) runs per range
of samples, each range writing its own samples of one result, so that a pool's threads share
all of it; None (the interpreter) runs one range on the calling thread, a generated module
passes its pool's, whose ranges run on threads (with the BLAS single-threaded meanwhile, see
:mod:`~symgrad.backends.host.row_pool`). The GEMMs of the forward and weight gradient run per
sample (batched matmuls), the input gradient's per range over whole columns, so each element
gets the same sum whatever the ranges, and a sum over the samples adds per-sample products in
sample order: the results do not depend on the ranges.
"""
import numpy as np


# --- windows ----------------------------------------------------------------------------------
def serial_rows(body, n, rows, *args):
    """``over_rows`` on the calling thread: one range, ``[body(0, n, rows, *args)]``."""
    return [body(0, n, rows, *args)]


def pad_hw(x, padding, value):
    """``x`` [N, C, H, W] padded by ``padding`` on both sides of H and W with ``value``: the
    four borders filled, then ``x`` copied in (what ``np.pad`` gives, at half to two thirds
    of its cost on the small per-range arrays of a pool's loops)."""
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    n, c, h, w = x.shape
    out = np.empty((n, c, h + 2 * ph, w + 2 * pw), x.dtype)
    out[:, :, :ph] = value
    out[:, :, h + ph:] = value
    out[:, :, ph:h + ph, :pw] = value
    out[:, :, ph:h + ph, w + pw:] = value
    out[:, :, ph:h + ph, pw:w + pw] = x
    return out


def window_view(xp, kernel, stride, dilation):
    """Strided view [N, C, Ho, Wo, kh, kw] of the windows of the padded ``xp``."""
    kh, kw = kernel
    dh, dw = dilation
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    view = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))
    return view[:, :, ::stride[0], ::stride[1], ::dh, ::dw]


def window_scatter(cols, out, stride, dilation):
    """Adjoint of :func:`window_view`: add ``cols`` [kh, kw, A, B, Ho, Wo] (tap first) into
    ``out`` [A, B, H, W] at the window positions (overlapping windows accumulate): one strided
    slice-add per kernel tap. Returns ``out``."""
    kh, kw, _, _, ho, wo = cols.shape
    sh, sw = stride
    for i in range(kh):
        r = i * dilation[0]
        for j in range(kw):
            q = j * dilation[1]
            out[:, :, r:r + sh * (ho - 1) + 1:sh, q:q + sw * (wo - 1) + 1:sw] += cols[i, j]
    return out


def crop_hw(xp, padding, size):
    """Remove ``padding`` from the H and W sides of ``xp`` so that [H, W] is ``size``."""
    ph, pw = padding
    return xp[:, :, ph:ph + size[0], pw:pw + size[1]]


# --- convolution ------------------------------------------------------------------------------
def window_counts(input_hw, kernel, stride, padding, dilation):
    """``(Ho, Wo)``: the number of windows along H and W of an input of spatial size
    ``input_hw`` (what :func:`window_view` gives, known before any range is padded)."""
    return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                 for size, k, s, p, d in zip(input_hw, kernel, stride, padding, dilation))


def conv_columns(windows, group, channels):
    """im2col of one group's ``channels`` input channels, per sample: the copy
    [N, channels * kh * kw, Ho * Wo] of the window view [N, C, Ho, Wo, kh, kw] (a row per
    tap, runs of Wo contiguous pixels on both sides of the copy)."""
    n, _, ho, wo, kh, kw = windows.shape
    part = windows[:, group * channels:(group + 1) * channels].transpose(0, 1, 4, 5, 2, 3)
    return np.ascontiguousarray(part).reshape(n, channels * kh * kw, ho * wo)


def conv2d_forward(x, w, stride, padding, dilation, groups, over_rows=None):
    """y[n, o, i, j] = sum_{c, a, b} xpad[n, g*Cg + c, i*s + a*d, j*s + b*d] * w[o, c, a, b],
    g the group of output channel o. Per range of samples (padding, im2col, then per group
    and sample one GEMM ``W_g @ im2col(x_n)``: a batched matmul over the range), writing the
    contiguous [N, O, Ho, Wo] result. Every range does all of its own work (BLAS included),
    so a pool's threads share all of it."""
    n = x.shape[0]
    out_ch, cg, kh, kw = w.shape
    og = out_ch // groups
    ho, wo = window_counts(x.shape[2:], (kh, kw), stride, padding, dilation)
    out = np.empty((n, out_ch, ho * wo), np.result_type(x, w))

    def part(start, stop, _rows):
        windows = window_view(pad_hw(x[start:stop], padding, 0), (kh, kw), stride, dilation)
        for g in range(groups):
            np.matmul(w[g * og:(g + 1) * og].reshape(og, -1), conv_columns(windows, g, cg),
                      out=out[start:stop, g * og:(g + 1) * og])
    (over_rows or serial_rows)(part, n, 1)
    return out.reshape(n, out_ch, ho, wo)


def conv2d_input_grad(g, w, input_hw, stride, padding, dilation, groups, over_rows=None):
    """Gradient of :func:`conv2d_forward` with respect to ``x`` ([N, C, *input_hw]) for the
    output cotangent ``g``. Per range of samples: that range of ``g`` copied channel-major,
    per group one GEMM ``W_g^T @ g_g``, then col2im by one slice-add per kernel tap into the
    range's samples of a channel-major padded array (zeroed by the range); the result is the
    cropped [N, C, H, W] view. Linear in ``g`` and in ``w``."""
    n, out_ch, ho, wo = g.shape
    _, cg, kh, kw = w.shape
    og = out_ch // groups
    ph, pw = padding
    dtype = np.result_type(g, w)
    padded = np.empty((groups * cg, n, input_hw[0] + 2 * ph, input_hw[1] + 2 * pw), dtype)

    def part(start, stop, _rows):
        m = stop - start
        rows = np.ascontiguousarray(g[start:stop].transpose(1, 0, 2, 3))
        cols = np.empty((groups * cg, kh, kw, m, ho, wo), dtype)
        for k in range(groups):
            np.matmul(w[k * og:(k + 1) * og].reshape(og, -1).T,
                      rows[k * og:(k + 1) * og].reshape(og, m * ho * wo),
                      out=cols[k * cg:(k + 1) * cg].reshape(cg * kh * kw, m * ho * wo))
        target = padded[:, start:stop]
        target[...] = 0
        window_scatter(cols.transpose(1, 2, 0, 3, 4, 5), target, stride, dilation)
    (over_rows or serial_rows)(part, n, 1)
    return crop_hw(padded.transpose(1, 0, 2, 3), padding, input_hw)


def conv2d_weight_grad(x, g, kernel_hw, stride, padding, dilation, groups, over_rows=None):
    """Gradient of :func:`conv2d_forward` with respect to ``w`` ([O, C/groups, *kernel_hw])
    for the output cotangent ``g``: per range of samples, per group and sample
    ``im2col(x_n) @ g_g^T`` (a batched matmul over the range, giving [taps, O/groups]; a third
    faster than ``g_g @ im2col(x_n)^T`` on a 3x3 convolution of 16 channels of 16x16),
    then the sum over all samples in order (the same sums whichever ranges computed the
    products), transposed; linear in ``x`` and in ``g``."""
    n, out_ch, ho, wo = g.shape
    og = out_ch // groups
    cg = x.shape[1] // groups
    taps = cg * kernel_hw[0] * kernel_hw[1]
    per_sample = np.empty((groups, n, taps, og), np.result_type(x, g))

    def part(start, stop, _rows):
        m = stop - start
        windows = window_view(pad_hw(x[start:stop], padding, 0), kernel_hw, stride, dilation)
        for k in range(groups):
            rows = g[start:stop, k * og:(k + 1) * og].reshape(m, og, ho * wo)
            np.matmul(conv_columns(windows, k, cg), rows.transpose(0, 2, 1),
                      out=per_sample[k, start:stop])
    (over_rows or serial_rows)(part, n, 1)
    return per_sample.sum(axis=1).transpose(0, 2, 1).reshape(out_ch, cg, *kernel_hw)


# --- pooling ----------------------------------------------------------------------------------
def window_taps(xp, kernel, stride):
    """``(i, j, view)`` for each tap (i, j) of the windows (no dilation) of the padded ``xp``
    [N, C, H, W], in order: ``view`` [N, C, Ho, Wo] (strided, no copy) holds that tap of every
    window. Pooling loops over the taps (a few large NumPy calls), never over windows."""
    sh, sw = stride
    ho = (xp.shape[2] - kernel[0]) // sh + 1
    wo = (xp.shape[3] - kernel[1]) // sw + 1
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield i, j, xp[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]


def window_max(xp, kernel_size, stride, out=None):
    """Maxima [N, C, Ho, Wo] of the windows (no dilation) of the padded ``xp``, into ``out``
    if given; a window holding NaN gives NaN. Separable: the maxima over each window's rows
    first (kh - 1 calls on whole rows of ``xp``), then over the columns of those (kw - 1
    strided calls); one strided call per tap took 1.3x to 1.7x as long on 2x2 windows."""
    (kh, kw), (sh, sw) = kernel_size, stride
    ho = (xp.shape[2] - kh) // sh + 1
    wo = (xp.shape[3] - kw) // sw + 1
    rows = [xp[:, :, i:i + sh * (ho - 1) + 1:sh] for i in range(kh)]
    high = rows[0] if kh == 1 else np.maximum(rows[0], rows[1])
    for row in rows[2:]:
        np.maximum(high, row, out=high)
    cols = [high[..., j:j + sw * (wo - 1) + 1:sw] for j in range(kw)]
    if out is None:
        out = np.empty(cols[0].shape, xp.dtype)
    if kw == 1:
        np.copyto(out, cols[0])
    else:
        np.maximum(cols[0], cols[1], out=out)
    for col in cols[2:]:
        np.maximum(out, col, out=out)
    return out


def window_maxima(xp, kernel_size, stride):
    """``(window maxima [N, C, Ho, Wo], hits, shares)`` of the padded ``xp``: a window
    holding NaN has NaN as its maximum (:func:`window_max`); ``hits`` holds, per tap in
    :func:`window_taps`' order, where that tap equals its window's maximum (bool
    [N, C, Ho, Wo]); ``shares`` is ``1 / count`` in ``xp``'s dtype, the count of a window
    being the number of its positions equal to the maximum, at least 1."""
    top = window_max(xp, kernel_size, stride)
    hits = [tap == top for _, _, tap in window_taps(xp, kernel_size, stride)]
    shares = hits[0].astype(xp.dtype)   # the count, then its inverse, in place
    for hit in hits[1:]:
        np.add(shares, hit, out=shares)
    np.maximum(shares, 1, out=shares)
    return top, hits, np.divide(1, shares, out=shares)


def max_pool2d_forward(x, kernel_size, stride, padding, over_rows=None):
    """Window maxima (:func:`window_max`), per range of samples; padding is ``-inf`` so it
    never wins."""
    xp = pad_hw(x, padding, -np.inf)
    ho, wo = window_counts(x.shape[2:], kernel_size, stride, padding, (1, 1))
    top = np.empty(x.shape[:2] + (ho, wo), xp.dtype)

    def pool(start, stop, _rows):
        window_max(xp[start:stop], kernel_size, stride, out=top[start:stop])
    (over_rows or serial_rows)(pool, x.shape[0], 1)
    return top


def max_pool2d_grad(x, g, kernel_size, stride, padding, over_rows=None):
    """Gradient of max pooling, per range of samples: each window's cotangent split evenly
    among its tied maxima (every position gets its share, 0 where it is not a maximum, times
    the cotangent: an infinite or NaN cotangent gives NaN there too), overlapping windows
    accumulating: one strided slice-add per tap into the range's samples of a padded array
    (zeroed by the range). Where the windows tile the padded input (stride = kernel size,
    which divides its H and W), each tap's products are written in place instead, then
    ``+ 0.0`` gives the same zeros as a sum from +0.0. Linear in ``g``."""
    ph, pw = padding
    n, c, h, w = x.shape
    out = np.empty((n, c, h + 2 * ph, w + 2 * pw), np.result_type(x, g))
    sh, sw = stride
    tiled = (sh, sw) == tuple(kernel_size) and out.shape[2] % sh == 0 and out.shape[3] % sw == 0

    def scatter(start, stop, _rows):
        xp = pad_hw(x[start:stop], padding, -np.inf)
        top, hits, shares = window_maxima(xp, kernel_size, stride)
        share = shares * g[start:stop]
        ho, wo = top.shape[2:]
        target = out[start:stop]
        if not tiled:
            target[...] = 0
        for (i, j, _), hit in zip(window_taps(xp, kernel_size, stride), hits):
            view = target[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
            if tiled:
                np.multiply(hit, share, out=view)
            else:
                view += hit * share
        if tiled:
            target += 0.0
    (over_rows or serial_rows)(scatter, n, 1)
    return crop_hw(out, padding, x.shape[2:])


def max_pool2d_select(x, h, kernel_size, stride, padding):
    """Adjoint of :func:`max_pool2d_grad` in ``g``: for each window of ``x``, the mean of
    ``h`` over the window's tied maxima (shaped like the pooled output)."""
    xp = pad_hw(x, padding, -np.inf)
    top, hits, shares = window_maxima(xp, kernel_size, stride)
    total = np.zeros(top.shape, np.result_type(x, h))   # sums start from +0.0
    for hit, (_, _, value) in zip(hits, window_taps(pad_hw(h, padding, 0), kernel_size, stride)):
        total += hit * (shares * value)
    return total


def avg_pool2d_counts(input_hw, kernel_size, stride, padding, dtype):
    """[Ho, Wo] number of real (non-padding) elements in each window."""
    ones = np.ones((1, 1, input_hw[0], input_hw[1]), dtype)
    return avg_pool2d_sums(pad_hw(ones, padding, 0), kernel_size, stride)[0, 0]


def avg_pool2d_sums(xp, kernel_size, stride):
    """The sum of each window of the padded ``xp``: +0.0, then its taps added in order."""
    total = None
    for _, _, tap in window_taps(xp, kernel_size, stride):
        total = np.zeros(tap.shape, xp.dtype) if total is None else total
        total += tap
    return total


def avg_pool2d_forward(x, kernel_size, stride, padding):
    """Window means; padding is not counted in the mean."""
    counts = avg_pool2d_counts(x.shape[2:], kernel_size, stride, padding, x.dtype)
    return avg_pool2d_sums(pad_hw(x, padding, 0), kernel_size, stride) / counts


def avg_pool2d_grad(g, input_hw, kernel_size, stride, padding):
    """Gradient of :func:`avg_pool2d_forward` with respect to its input [N, C, *input_hw]."""
    counts = avg_pool2d_counts(input_hw, kernel_size, stride, padding, g.dtype)
    n, c, ho, wo = g.shape
    kh, kw = kernel_size
    cols = np.broadcast_to(g / counts, (kh, kw, n, c, ho, wo))
    ph, pw = padding
    padded = np.zeros((n, c, input_hw[0] + 2 * ph, input_hw[1] + 2 * pw), cols.dtype)
    return crop_hw(window_scatter(cols, padded, stride, (1, 1)), padding, input_hw)


# --- softmax family ---------------------------------------------------------------------------
def softmax_forward(x, axis):
    """exp(x) / sum(exp(x)) along ``axis``, shifted by the max for stability."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_forward(x, axis):
    """x - logsumexp(x) along ``axis``, shifted by the max for stability."""
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def check_class_indices(indices, num_classes, what):
    """Raise ``ValueError`` naming the first index outside ``[0, num_classes)``."""
    if indices.size and (indices.min() < 0 or indices.max() >= num_classes):
        bad = indices[(indices < 0) | (indices >= num_classes)].ravel()[0]
        raise ValueError(f"{what}: class index {int(bad)} is outside [0, {num_classes})")


def softmax_cross_entropy_forward(logits, labels, axis):
    """Per-example loss ``-sum(p_label * log_softmax(logits))`` along ``axis``: ``labels``
    are integer class indices (logits' shape without ``axis``; one outside the classes is a
    ``ValueError``) or float probabilities shaped like ``logits``."""
    logp = log_softmax_forward(logits, axis)
    if labels.dtype.kind not in "iu":   # soft labels (float, bfloat16 included)
        return -(labels * logp).sum(axis=axis)
    check_class_indices(labels, logits.shape[axis], "softmax_cross_entropy")
    picked = np.take_along_axis(logp, np.expand_dims(labels, axis), axis=axis)
    return -np.squeeze(picked, axis=axis)


def softmax_cross_entropy_grad(logits, labels, g, axis):
    """``(softmax(logits) - one_hot(labels)) * g`` along ``axis`` (``g`` shaped like the
    per-example losses), rounded as those three ops round; a label outside the classes is a
    ``ValueError``, as in the loss."""
    n = logits.shape[axis]
    check_class_indices(labels, n, "softmax_cross_entropy")
    hot = np.expand_dims(labels, axis) == np.arange(n).reshape((n,) + (1,) * (labels.ndim - axis))
    return (softmax_forward(logits, axis) - hot.astype(logits.dtype)) * np.expand_dims(g, axis)


def one_hot_forward(indices, num_classes, dtype, axis, strict=False):
    """1 where the class equals the index, along a new axis ``axis`` of the result; an
    index outside ``[0, num_classes)`` gives an all-zero row (a ``ValueError`` when
    ``strict``: the labels of a cross-entropy's gradient)."""
    if strict:
        check_class_indices(indices, num_classes, "softmax_cross_entropy")
    hot = np.expand_dims(indices, axis) == np.arange(num_classes).reshape(
        (num_classes,) + (1,) * (indices.ndim - axis))
    return hot.astype(dtype)
