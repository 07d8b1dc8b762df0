"""Neural-network ops: conv2d, pooling, the softmax family, softmax cross-entropy, one_hot.

Every op is opaque: its NumPy kernel lives in :mod:`symgrad.ops.kernels` (copied into generated
modules as a helper). Gradients are primitive ops of their own whose VJPs are built from the
forward ops and each other, so any order of derivative works:

- ``conv2d(x, w)`` -> ``conv2d_input_grad(g, w)``, ``conv2d_weight_grad(x, g)``; the three are
  bilinear and each one's VJP is a pair of the others.
- ``max_pool2d(x)`` -> ``max_pool2d_grad(x, g)`` (the cotangent split evenly among tied window
  maxima) whose adjoint in ``g`` is ``max_pool2d_select(x, h)`` and back; both are piecewise
  constant in ``x`` (zero gradient).
- ``avg_pool2d(x)`` -> ``avg_pool2d_grad(g)``, each the other's adjoint.

Layout is NCHW. Only the batch dim may be unknown for conv2d and avg_pool2d (their gradients
need the static spatial size); max_pool2d also accepts unknown spatial dims. Attributes are
plain JSON-able values: ints, tuples of ints, strings.

``conv_transpose2d`` is no op of its own: it is ``conv2d_input_grad`` (the adjoint of conv2d
in its input), so its gradients are conv2d's.

The public front end of these ops is :mod:`symgrad.nn`; only ``one_hot`` is exported at the
top level.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError
from ..ir.dims import add, broadcast_dims, floordiv
from ..ir.value import format_shape
from . import kernels
from .batching import axis_batch, fold_batch
from .core import OPAQUE, OpDef, bind, normalize_axis, register, same_dims
from .source import as_value, as_values

__all__ = ["one_hot"]


def _ops():
    import symgrad.ops as ops

    return ops


# --- shared shape rules -----------------------------------------------------------------------
def _same_dims(a, b) -> bool:
    """Shapes equal, an unknown dim matching anything."""
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _float_operands(types, what):
    """All operands of one floating dtype; returns it."""
    kinds = {np.dtype(d) for _, d in types}
    if len(kinds) != 1 or not dtypes.is_float(next(iter(kinds))):
        shown = ", ".join(str(np.dtype(d)) for _, d in types)
        raise DTypeError(f"{what} need operands of one floating dtype, got {shown}")
    return next(iter(kinds))


def _nchw(shape, what):
    if len(shape) != 4:
        raise ShapeError(f"{what} must be 4-D NCHW, got shape {format_shape(shape)}")


def _window_count(size, kernel, stride, padding, dilation, where):
    """Number of windows along one spatial axis (``None`` for an unknown size)."""
    if size is None:
        return None
    span = dilation * (kernel - 1) + 1
    if size + 2 * padding < span:
        raise ShapeError(f"kernel {kernel} (dilated span {span}) is larger than the padded "
                         f"input {size} + 2*{padding} {where}")
    return kernels.window_counts((size,), (kernel,), (stride,), (padding,), (dilation,))[0]


def _windows_hw(hw, kernel, stride, padding, dilation, where):
    return tuple(_window_count(hw[i], kernel[i], stride[i], padding[i], dilation[i], where)
                 for i in range(2))


# --- symbolic dims rules (see OpDef.dims) ---------------------------------------------------
def _batch_dims_of(index):
    """Dims rule: the batch dim (axis 0) is input ``index``'s; the others are static."""
    def rule(input_dims, attrs, shapes):
        return [(input_dims[index][0],) + tuple(shapes[0][1:])]
    return rule


def _window_dim(size, kernel, stride, padding, dilation=1):
    span = dilation * (kernel - 1) + 1
    return floordiv(add(size, 2 * padding - span + stride), stride)   # (... - span)//s + 1


def _pooled_dims(input_dims, attrs, shapes):
    dims = input_dims[0]
    kernel, stride, padding = (attrs[k] for k in POOL_ATTRS)
    return [tuple(dims[:2]) + tuple(_window_dim(dims[2 + i], kernel[i], stride[i], padding[i])
                                    for i in range(2))]


def _cross_entropy_dims(input_dims, attrs, shapes):
    logits, labels = input_dims
    axis, = normalize_axis(attrs["axis"], len(logits))
    reduced = tuple(logits[:axis] + logits[axis + 1:])
    if len(labels) == len(reduced):
        reduced = broadcast_dims(reduced, labels, what="labels against the logits")
    return [reduced]


def _one_hot_dims(input_dims, attrs, shapes):
    dims, axis = input_dims[0], attrs["axis"]
    return [tuple(dims[:axis]) + (attrs["num_classes"],) + tuple(dims[axis:])]


# --- conv2d -----------------------------------------------------------------------------------
CONV_ATTRS = ("stride", "padding", "dilation", "groups")


def _check_weight(w_shape):
    if len(w_shape) != 4 or None in w_shape:
        raise ShapeError(f"weight must be a static 4-D [out, in/groups, kh, kw], "
                         f"got {format_shape(w_shape)}")


def conv2d_shape(x_shape, w_shape, attrs):
    """Output shape of conv2d, checking channels, groups and the kernel against the input."""
    _nchw(x_shape, "conv2d input")
    _check_weight(w_shape)
    n, c, h, w = x_shape
    out_ch, cg, kh, kw = w_shape
    groups = attrs["groups"]
    if None in (c, h, w):
        raise ShapeError(f"needs static channel and spatial dims (only the batch dim may be "
                         f"unknown), got input {format_shape(x_shape)}")
    if out_ch % groups:
        raise ShapeError(f"groups={groups} does not divide the {out_ch} output channels of "
                         f"weight {format_shape(w_shape)}")
    if c % groups:
        raise ShapeError(f"groups={groups} does not divide the {c} channels of input "
                         f"{format_shape(x_shape)}")
    if c != cg * groups:
        raise ShapeError(f"input {format_shape(x_shape)} has {c} channels but weight "
                         f"{format_shape(w_shape)} with groups={groups} expects {cg * groups}")
    where = (f"(input {format_shape(x_shape)}, weight {format_shape(w_shape)}, "
             f"padding {tuple(attrs['padding'])}, dilation {tuple(attrs['dilation'])})")
    ho, wo = _windows_hw((h, w), (kh, kw), attrs["stride"], attrs["padding"],
                         attrs["dilation"], where)
    return (n, out_ch, ho, wo)


def _check_cotangent(g_shape, expected, what):
    if not _same_dims(g_shape, expected):
        raise ShapeError(f"{what} {format_shape(g_shape)} does not match the conv output "
                         f"{format_shape(expected)}")


def conv2d_rule(types, attrs):
    (xs, _), (ws, _) = types
    dtype = _float_operands(types, "conv2d input and weight")
    return conv2d_shape(xs, ws, attrs), dtype


def conv2d_input_grad_rule(types, attrs):
    (gs, _), (ws, _) = types
    dtype = _float_operands(types, "cotangent and weight")
    _nchw(gs, "cotangent")
    _check_weight(ws)
    x_shape = (gs[0], ws[1] * attrs["groups"]) + tuple(attrs["input_hw"])
    _check_cotangent(gs, conv2d_shape(x_shape, ws, attrs), "cotangent")
    return x_shape, dtype


def conv2d_weight_grad_rule(types, attrs):
    (xs, _), (gs, _) = types
    dtype = _float_operands(types, "input and cotangent")
    _nchw(xs, "input")
    _nchw(gs, "cotangent")
    if xs[1] is None or gs[1] is None:
        raise ShapeError(f"channel dims must be static, got input {format_shape(xs)} and "
                         f"cotangent {format_shape(gs)}")
    groups = attrs["groups"]
    if xs[1] % groups:
        raise ShapeError(f"groups={groups} does not divide the {xs[1]} channels of input "
                         f"{format_shape(xs)}")
    w_shape = (gs[1], xs[1] // groups) + tuple(attrs["kernel_hw"])
    _check_cotangent(gs, conv2d_shape(xs, w_shape, attrs), "cotangent")
    return w_shape, dtype


def _conv_attrs(op):
    return {k: op.attrs[k] for k in CONV_ATTRS}


def _conv(x, w, attrs):
    return bind(conv2d_p, [x, w], attrs)


def _conv_input_grad(g, w, input_hw, attrs):
    return bind(conv2d_input_grad_p, [g, w], {"input_hw": tuple(input_hw), **attrs})


def _conv_weight_grad(x, g, kernel_hw, attrs):
    return bind(conv2d_weight_grad_p, [x, g], {"kernel_hw": tuple(kernel_hw), **attrs})


def conv2d_vjp(op, cotangents):
    x, w = op.inputs
    g, attrs = cotangents[0], _conv_attrs(op)
    return [lambda: _conv_input_grad(g, w, x.shape[2:], attrs),
            lambda: _conv_weight_grad(x, g, w.shape[2:], attrs)]


def conv2d_input_grad_vjp(op, cotangents):
    """``<h, input_grad(g, w)> = <conv(h, w), g>``: bilinear in ``g`` and ``w``."""
    g, w = op.inputs
    h, attrs = cotangents[0], _conv_attrs(op)
    return [lambda: _conv(h, w, attrs), lambda: _conv_weight_grad(h, g, w.shape[2:], attrs)]


def conv2d_weight_grad_vjp(op, cotangents):
    """``<k, weight_grad(x, g)> = <conv(x, k), g>``: bilinear in ``x`` and ``g``."""
    x, g = op.inputs
    k, attrs = cotangents[0], _conv_attrs(op)
    return [lambda: _conv_input_grad(g, k, x.shape[2:], attrs), lambda: _conv(x, k, attrs)]


conv2d_p = register(OpDef(
    "conv2d", OPAQUE, conv2d_rule, kernels.conv2d_forward, vjp=conv2d_vjp,
    dims=_batch_dims_of(0),
    batch=fold_batch(0),
    doc="2-D convolution (cross-correlation), NCHW, weight [out, in/groups, kh, kw]."))

conv2d_input_grad_p = register(OpDef(
    "conv2d_input_grad", OPAQUE, conv2d_input_grad_rule, kernels.conv2d_input_grad,
    vjp=conv2d_input_grad_vjp,
    dims=_batch_dims_of(0),
    batch=fold_batch(0),
    doc="Gradient of conv2d with respect to its input, from (cotangent, weight)."))

conv2d_weight_grad_p = register(OpDef(
    "conv2d_weight_grad", OPAQUE, conv2d_weight_grad_rule, kernels.conv2d_weight_grad,
    vjp=conv2d_weight_grad_vjp,
    doc="Gradient of conv2d with respect to its weight, from (input, cotangent)."))


# --- pooling ----------------------------------------------------------------------------------
POOL_ATTRS = ("kernel_size", "stride", "padding")


def pool_shape(x_shape, attrs, static_hw):
    """Pooled shape of ``x_shape``; padding may be at most half the kernel."""
    _nchw(x_shape, "pooling input")
    kernel, stride, padding = (attrs[k] for k in POOL_ATTRS)
    if static_hw and None in x_shape[2:]:
        raise ShapeError(f"needs static spatial dims (only the batch dim may be unknown), "
                         f"got input {format_shape(x_shape)}")
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(f"padding {tuple(padding)} must be at most half the kernel "
                         f"{tuple(kernel)}")
    where = f"(input {format_shape(x_shape)}, padding {tuple(padding)})"
    return x_shape[:2] + _windows_hw(x_shape[2:], kernel, stride, padding, (1, 1), where)


def _pool_rule(static_hw):
    def rule(types, attrs):
        (xs, _), = types
        return pool_shape(xs, attrs, static_hw), _float_operands(types, "pooling")
    return rule


def _pair_rule(pooled_second):
    """Rule of the two-input max-pool gradient ops: input ``x`` first; the second operand is
    shaped like the pooled output (``pooled_second``) or like ``x``; the result the other."""
    def rule(types, attrs):
        (xs, _), (ss, _) = types
        dtype = _float_operands(types, "input and cotangent")
        pooled = pool_shape(xs, attrs, static_hw=False)
        expected, result = (pooled, xs) if pooled_second else (xs, pooled)
        if not _same_dims(ss, expected):
            raise ShapeError(f"second operand {format_shape(ss)} should have shape "
                             f"{format_shape(expected)}")
        return result, dtype
    return rule


def avg_pool2d_grad_rule(types, attrs):
    (gs, _), = types
    dtype = _float_operands(types, "cotangent")
    _nchw(gs, "cotangent")
    x_shape = gs[:2] + tuple(attrs["input_hw"])
    pooled = pool_shape(x_shape, attrs, static_hw=True)
    if not _same_dims(gs, pooled):
        raise ShapeError(f"cotangent {format_shape(gs)} does not match the pooled shape "
                         f"{format_shape(pooled)}")
    return x_shape, dtype


def _pool_attrs(op):
    return {k: op.attrs[k] for k in POOL_ATTRS}


def max_pool2d_vjp(op, cotangents):
    return [bind(max_pool2d_grad_p, [op.inputs[0], cotangents[0]], _pool_attrs(op))]


def max_pool2d_grad_vjp(op, cotangents):
    """Linear in ``g`` (adjoint: :func:`kernels.max_pool2d_select`); constant in ``x``."""
    x = op.inputs[0]
    return [_ops().zeros_like(x), bind(max_pool2d_select_p, [x, cotangents[0]], _pool_attrs(op))]


def max_pool2d_select_vjp(op, cotangents):
    x = op.inputs[0]
    return [_ops().zeros_like(x), bind(max_pool2d_grad_p, [x, cotangents[0]], _pool_attrs(op))]


def avg_pool2d_vjp(op, cotangents):
    attrs = {"input_hw": tuple(op.inputs[0].shape[2:]), **_pool_attrs(op)}
    return [bind(avg_pool2d_grad_p, [cotangents[0]], attrs)]


def avg_pool2d_grad_vjp(op, cotangents):
    return [bind(avg_pool2d_p, [cotangents[0]], _pool_attrs(op))]


max_pool2d_p = register(OpDef(
    "max_pool2d", OPAQUE, _pool_rule(static_hw=False), kernels.max_pool2d_forward,
    vjp=max_pool2d_vjp,
    dims=_pooled_dims,
    batch=fold_batch(0),
    doc="Window maxima (padding is -inf); the gradient splits evenly among ties."))

max_pool2d_grad_p = register(OpDef(
    "max_pool2d_grad", OPAQUE, _pair_rule(pooled_second=True), kernels.max_pool2d_grad,
    vjp=max_pool2d_grad_vjp,
    dims=same_dims(0),
    batch=fold_batch(0, 1),
    doc="Gradient of max_pool2d from (input, cotangent)."))

max_pool2d_select_p = register(OpDef(
    "max_pool2d_select", OPAQUE, _pair_rule(pooled_second=False), kernels.max_pool2d_select,
    vjp=max_pool2d_select_vjp,
    dims=_pooled_dims,
    batch=fold_batch(0, 1),
    doc="Per window of x, the mean of h over the tied maxima (adjoint of max_pool2d_grad)."))

avg_pool2d_p = register(OpDef(
    "avg_pool2d", OPAQUE, _pool_rule(static_hw=True), kernels.avg_pool2d_forward,
    vjp=avg_pool2d_vjp,
    dims=_pooled_dims,
    batch=fold_batch(0),
    doc="Window means; padding is not counted."))

avg_pool2d_grad_p = register(OpDef(
    "avg_pool2d_grad", OPAQUE, avg_pool2d_grad_rule, kernels.avg_pool2d_grad,
    vjp=avg_pool2d_grad_vjp,
    dims=_batch_dims_of(0),
    batch=fold_batch(0),
    doc="Gradient of avg_pool2d from the cotangent."))


# --- softmax family ---------------------------------------------------------------------------
def softmax_rule(types, attrs):
    (shape, _), = types
    dtype = _float_operands(types, "softmax")
    if not shape:
        raise ShapeError("needs an input of rank >= 1, got a scalar")
    normalize_axis(attrs["axis"], len(shape))
    return shape, dtype


def cross_entropy_rule(types, attrs):
    """Per-example losses: the logits' shape without the class axis."""
    (ls, ld), (ys, yd) = types
    if not dtypes.is_float(ld):
        raise DTypeError(f"logits need a floating dtype, got {ld}")
    if not ls:
        raise ShapeError("logits need rank >= 1, got a scalar")
    axis = attrs["axis"]
    normalize_axis(axis, len(ls))
    reduced = ls[:axis] + ls[axis + 1:]
    if yd.kind in "iu":
        if not _same_dims(ys, reduced):
            raise ShapeError(f"integer labels {format_shape(ys)} must have the logits' shape "
                             f"{format_shape(ls)} without axis {axis}: {format_shape(reduced)}")
        if ls[axis] is None:
            raise ShapeError(f"the class dim (axis {axis}) of logits {format_shape(ls)} must be "
                             f"static with integer labels")
        return reduced, ld
    if yd != ld:
        raise DTypeError(f"soft labels need the logits' dtype {ld}, got {yd}")
    if not _same_dims(ys, ls):
        raise ShapeError(f"soft labels {format_shape(ys)} must have the logits' shape "
                         f"{format_shape(ls)}")
    return reduced, ld


def softmax_vjp(op, cotangents):
    """y * (g - sum(g * y))."""
    y, g, axis = op.results[0], cotangents[0], op.attrs["axis"]
    gy = g * y
    return [gy - y * _ops().sum(gy, axis=axis, keepdims=True)]


def log_softmax_vjp(op, cotangents):
    """g - softmax(x) * sum(g)."""
    ops = _ops()
    y, g, axis = op.results[0], cotangents[0], op.attrs["axis"]
    return [g - ops.exp(y) * ops.sum(g, axis=axis, keepdims=True)]


def cross_entropy_vjp(op, cotangents):
    """logits: (softmax * sum(p) - p) * g, p the label distribution; for integer labels
    (which get no gradient) ``softmax_cross_entropy_grad``, one op (one pass over each row on
    C); soft labels: -log_softmax * g."""
    ops = _ops()
    logits, labels = op.inputs
    axis = op.attrs["axis"]
    if labels.dtype.kind in "iu":
        return [bind(softmax_cross_entropy_grad_p, [logits, labels, cotangents[0]],
                     {"axis": axis}), None]
    g = ops.expand_dims(cotangents[0], axis)
    probs = bind(softmax_p, [logits], {"axis": axis})
    mass = ops.sum(labels, axis=axis, keepdims=True)
    log_probs = bind(log_softmax_p, [logits], {"axis": axis})
    return [(probs * mass - labels) * g, -log_probs * g]


softmax_p = register(OpDef(
    "softmax", OPAQUE, softmax_rule, kernels.softmax_forward, vjp=softmax_vjp,
    dims=same_dims(0),
    batch=axis_batch("axis"),
    doc="exp(x) / sum(exp(x)) along axis (stable)."))

log_softmax_p = register(OpDef(
    "log_softmax", OPAQUE, softmax_rule, kernels.log_softmax_forward, vjp=log_softmax_vjp,
    dims=same_dims(0),
    batch=axis_batch("axis"),
    doc="x - logsumexp(x) along axis (stable)."))

softmax_cross_entropy_p = register(OpDef(
    "softmax_cross_entropy", OPAQUE, cross_entropy_rule, kernels.softmax_cross_entropy_forward,
    vjp=cross_entropy_vjp,
    dims=_cross_entropy_dims,
    batch=axis_batch("axis"),
    doc="Per-example -sum(p * log_softmax(logits)) for integer or soft labels."))


def cross_entropy_grad_rule(types, attrs):
    """The logits' gradient: the logits' shape and dtype; integer labels and the cotangent
    ``g`` shaped like the per-example losses, ``g`` of the logits' dtype."""
    (ls, ld), (ys, yd), (gs, gd) = types
    if yd.kind not in "iu":
        raise DTypeError(f"labels need an integer dtype, got {yd}")
    reduced, _ = cross_entropy_rule(types[:2], attrs)
    if gd != ld:
        raise DTypeError(f"the cotangent needs the logits' dtype {ld}, got {gd}")
    if not _same_dims(gs, reduced):
        raise ShapeError(f"the cotangent {format_shape(gs)} must have the per-example losses' "
                         f"shape {format_shape(reduced)}")
    return ls, ld


def cross_entropy_grad_vjp(op, cotangents):
    """For y = (p - onehot) * g with p = softmax(logits) along ``axis``: logits get
    p * (c g - sum(c g p)) (softmax's VJP of c g), g gets sum(c (p - onehot)); labels none."""
    ops = _ops()
    logits, labels, g = op.inputs
    axis = op.attrs["axis"]
    c = cotangents[0]
    probs = bind(softmax_p, [logits], {"axis": axis})
    cg = c * ops.expand_dims(g, axis)
    gy = cg * probs
    target = bind(one_hot_p, [labels], {"num_classes": logits.shape[axis],
                                       "dtype": logits.dtype.name, "axis": axis,
                                       "strict": True})
    return [gy - probs * ops.sum(gy, axis=axis, keepdims=True), None,
            ops.sum(c * (probs - target), axis=axis)]


softmax_cross_entropy_grad_p = register(OpDef(
    "softmax_cross_entropy_grad", OPAQUE, cross_entropy_grad_rule,
    kernels.softmax_cross_entropy_grad, vjp=cross_entropy_grad_vjp,
    dims=same_dims(0),
    batch=axis_batch("axis"),
    doc="Gradient of softmax_cross_entropy with integer labels: (softmax(logits) - "
        "one_hot(labels)) * g along axis, g the per-example losses' cotangent."))


# --- one_hot ----------------------------------------------------------------------------------
def one_hot_rule(types, attrs):
    (shape, dtype), = types
    if dtype.kind not in "iu":
        raise DTypeError(f"indices need an integer dtype, got {dtype}")
    num_classes, axis = attrs["num_classes"], attrs["axis"]
    if not 0 <= axis <= len(shape):
        raise ShapeError(f"axis {axis} is out of range for indices {format_shape(shape)}")
    return shape[:axis] + (num_classes,) + shape[axis:], dtypes.as_dtype(attrs["dtype"])


one_hot_p = register(OpDef(
    "one_hot", OPAQUE, one_hot_rule, kernels.one_hot_forward,
    dims=_one_hot_dims,
    batch=axis_batch("axis"),
    doc="One-hot encoding along a new class axis (no gradient: indices are integers)."))


# --- front end --------------------------------------------------------------------------------
def _pair(value, what, minimum):
    """An int or a pair of ints as a validated ``(h, w)`` tuple."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif (isinstance(value, (tuple, list)) and len(value) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)):
        pair = (int(value[0]), int(value[1]))
    else:
        raise TypeError(f"{what} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")
    return pair


def _axis(axis, ndim, what):
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    if ndim == 0:
        raise ShapeError(f"{what}: needs an input of rank >= 1, got a scalar")
    return normalize_axis(axis, ndim)[0]


def _conv_attrs_of(stride, padding, dilation, groups, what):
    """Validated conv attrs (``stride``, ``padding``, ``dilation``: ints or (h, w) pairs)."""
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    return {"stride": _pair(stride, f"{what}: stride", 1),
            "padding": _pair(padding, f"{what}: padding", 0),
            "dilation": _pair(dilation, f"{what}: dilation", 1),
            "groups": int(groups)}


def _add_channel_bias(y, b, channels, w, what):
    """``y`` [N, channels, H, W] plus the optional bias ``b`` [channels]."""
    if b is None:
        return y
    b = as_value(b, program=w.program)
    if b.shape != (channels,):
        raise ShapeError(f"{what}: bias shape {format_shape(b.shape)} does not match the "
                         f"{channels} output channels of weight {format_shape(w.shape)}")
    return y + _ops().reshape(b, (1, channels, 1, 1))


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) of ``x`` [N, C, H, W] with ``w`` [O, C/groups, kh,
    kw] plus an optional bias ``b`` [O]; returns [N, O, Ho, Wo] with
    ``Ho = (H + 2*ph - dh*(kh-1) - 1) // sh + 1``. ``stride``, ``padding`` (zeros) and
    ``dilation`` are ints or (h, w) pairs; ``groups`` splits the channels into independent
    convolutions. Only the batch dim of ``x`` may be unknown."""
    attrs = _conv_attrs_of(stride, padding, dilation, groups, "conv2d")
    x, w = as_values(x, w)
    return _add_channel_bias(_conv(x, w, attrs), b, w.shape[0], w, "conv2d")


def conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-D convolution (``torch.nn.functional.conv_transpose2d``) of ``x`` [N, C,
    H, W] with ``w`` [C, O/groups, kh, kw] plus an optional bias ``b`` [O]; returns [N, O,
    Ho, Wo] with ``Ho = (H - 1)*sh - 2*ph + dh*(kh-1) + oph + 1``. It is the gradient of
    ``conv2d`` (weight ``w``, same ``stride``, ``padding``, ``dilation``, ``groups``) with
    respect to its input, computed by that op (``conv2d_input_grad``), so its gradients are
    conv2d's. ``output_padding`` (an int or an (h, w) pair, each smaller than the stride or
    the dilation of its axis) adds rows and columns at the bottom and right. Only the batch
    dim of ``x`` may be unknown."""
    what = "conv_transpose2d"
    attrs = _conv_attrs_of(stride, padding, dilation, groups, what)
    extra = _pair(output_padding, f"{what}: output_padding", 0)
    for axis, name in enumerate("hw"):
        if extra[axis] >= max(attrs["stride"][axis], attrs["dilation"][axis]):
            raise ValueError(f"{what}: output_padding {extra} must be smaller than the stride "
                             f"{attrs['stride']} or the dilation {attrs['dilation']} along "
                             f"{name}")
    x, w = as_values(x, w)
    _transpose_operands(x, w, attrs["groups"])
    kernel, size = w.shape[2:], x.shape[2:]
    out_hw = tuple((size[i] - 1) * attrs["stride"][i] - 2 * attrs["padding"][i]
                   + attrs["dilation"][i] * (kernel[i] - 1) + extra[i] + 1 for i in range(2))
    if min(out_hw) < 1:
        raise ShapeError(f"{what}: the output of input {x.type_str} with weight "
                         f"{format_shape(w.shape)} and padding {attrs['padding']} would be "
                         f"{format_shape(out_hw)}: too small")
    # conv2d maps the output back onto the windows of x; an output_padding of a stride or
    # more adds windows past x's last row or column, which x fills with zeros
    windows = conv2d_shape((x.shape[0], w.shape[1] * attrs["groups"]) + out_hw, w.shape,
                           attrs)[2:]
    if windows != tuple(size):
        x = _ops().pad(x, ((0, 0), (0, 0), (0, windows[0] - size[0]), (0, windows[1] - size[1])))
    y = _conv_input_grad(x, w, out_hw, attrs)
    return _add_channel_bias(y, b, w.shape[1] * attrs["groups"], w, what)


def _transpose_operands(x, w, groups):
    """Check conv_transpose2d's operands: ``x`` 4-D with static C, H, W and ``w`` a static
    [C, O/groups, kh, kw] of its floating dtype, with ``groups`` dividing C."""
    what = "conv_transpose2d"
    _float_operands([(x.shape, x.dtype), (w.shape, w.dtype)], f"{what}: input and weight")
    if x.ndim != 4 or None in x.shape[1:]:
        raise ShapeError(f"{what}: input must be 4-D NCHW with static channel and spatial "
                         f"dims (only the batch dim may be unknown), got {x.type_str}")
    if w.ndim != 4 or None in w.shape:
        raise ShapeError(f"{what}: weight must be a static 4-D [in, out/groups, kh, kw], "
                         f"got {w.type_str}")
    if w.shape[0] != x.shape[1]:
        raise ShapeError(f"{what}: input {x.type_str} has {x.shape[1]} channels but weight "
                         f"{w.type_str} expects {w.shape[0]}")
    if x.shape[1] % groups:
        raise ShapeError(f"{what}: groups={groups} does not divide the {x.shape[1]} channels "
                         f"of input {x.type_str}")


def _pool_attrs_of(kernel_size, stride, padding, what):
    kernel = _pair(kernel_size, f"{what}: kernel_size", 1)
    return {"kernel_size": kernel,
            "stride": kernel if stride is None else _pair(stride, f"{what}: stride", 1),
            "padding": _pair(padding, f"{what}: padding", 0)}


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Maximum over windows of ``x`` [N, C, H, W]; ``stride`` defaults to ``kernel_size``;
    ``padding`` (at most half the kernel) is ``-inf``. The gradient of a window is split
    evenly among its tied maxima; overlapping windows accumulate."""
    attrs = _pool_attrs_of(kernel_size, stride, padding, "max_pool2d")
    return bind(max_pool2d_p, [as_value(x)], attrs)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of ``x`` [N, C, H, W]; ``stride`` defaults to ``kernel_size``;
    ``padding`` (at most half the kernel) is not counted in the mean. Only the batch dim
    may be unknown."""
    attrs = _pool_attrs_of(kernel_size, stride, padding, "avg_pool2d")
    return bind(avg_pool2d_p, [as_value(x)], attrs)


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x), axis)``, computed stably (floating ``x`` of rank >= 1)."""
    x = as_value(x)
    return bind(softmax_p, [x], {"axis": _axis(axis, x.ndim, "softmax")})


def log_softmax(x, axis=-1):
    """``x - logsumexp(x, axis)``, computed stably (floating ``x`` of rank >= 1)."""
    x = as_value(x)
    return bind(log_softmax_p, [x], {"axis": _axis(axis, x.ndim, "log_softmax")})


_REDUCTIONS = {
    "mean": lambda losses: _ops().mean(losses),
    "sum": lambda losses: _ops().sum(losses),
    "none": lambda losses: losses,
}


def softmax_cross_entropy(logits, labels, axis=-1, reduction="mean"):
    """Cross-entropy of ``softmax(logits, axis)`` against ``labels``: integer class indices
    shaped like ``logits`` without ``axis`` (no gradient), or float probabilities shaped
    like ``logits`` (they get ``-log_softmax(logits) * g``). Integer labels must lie in
    ``[0, classes)`` (run time raises ``ValueError`` naming the first that does not, in the
    loss and in its gradient); the class dim must then be static. ``reduction``: ``"mean"`` or
    ``"sum"`` over the per-example losses, or ``"none"`` to return them."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"softmax_cross_entropy: reduction must be one of "
                         f"{', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")
    logits, labels = as_values(logits, labels)
    axis = _axis(axis, logits.ndim, "softmax_cross_entropy")
    losses = bind(softmax_cross_entropy_p, [logits, labels], {"axis": axis})
    return _REDUCTIONS[reduction](losses)


def one_hot(indices, num_classes, dtype="float32"):
    """``result[..., k] = (indices[...] == k)`` as ``dtype``, with a new last axis of size
    ``num_classes``; an index outside ``[0, num_classes)`` gives a row of zeros. Integer
    ``indices`` only; no gradient."""
    if (not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool)
            or num_classes < 1):
        raise ValueError(f"one_hot: num_classes must be a positive int, got {num_classes!r}")
    indices = as_value(indices)
    attrs = {"num_classes": int(num_classes), "dtype": dtypes.as_dtype(dtype).name,
             "axis": indices.ndim}
    return bind(one_hot_p, [indices], attrs)

