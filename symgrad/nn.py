"""Neural-network front end: activations, the softmax family, losses, linear, conv, pooling,
normalization, embeddings and dropout.

Every function takes symgrad Values (NumPy arrays and scalars become constants) and returns a
Value; shape and dtype errors are raised when the op is built. Layout is NCHW.
``layer_norm``, ``batch_norm``, ``embedding``, ``dropout`` and ``dropout2d`` are compositions
of other ops (``mean``, ``sqrt``, ``take``, ``random.uniform``, ``where``...), so their
gradients (of any order) are those ops', and every backend runs them as it runs those ops.
``batch_norm``'s running statistics are program state: parameters that it ``assign``s in
training mode (see :mod:`symgrad.ops.state`). ``conv_transpose2d`` is conv2d's input gradient
op (see :mod:`symgrad.ops.nn_ops`).
"""
import numpy as np

from . import dtypes
from .errors import DTypeError, ScopeError, ShapeError
from .ir.program import current_block
from .ir.value import Value, format_shape
from .ops import elementwise as ew
from .ops.activation import gelu, leaky_relu, relu, softplus
from .ops.core import atomic_functions
from .ops.indexing import gather, take_p
from .ops.linalg import matmul
from .ops.nn_ops import (avg_pool2d, conv2d, conv_transpose2d, log_softmax, max_pool2d, softmax,
                         softmax_cross_entropy)
from .ops.reduction import _count as element_count
from .ops.reduction import mean
from .ops.shape import reshape
from .ops.source import as_value, as_values, parameter
from .ops.state import assign, assignments, is_parameter
from .random import uniform

__all__ = ["relu", "leaky_relu", "gelu", "softplus", "softmax", "log_softmax",
           "softmax_cross_entropy", "linear", "conv2d", "conv_transpose2d", "max_pool2d",
           "avg_pool2d", "layer_norm", "batch_norm", "batch_norm_stats", "embedding", "dropout",
           "dropout2d"]


def linear(x, w, b=None):
    """``x @ w + b``: ``x`` [..., in], ``w`` [in, out], optional bias ``b`` [out]; returns
    [..., out]. Leading dims of ``x`` (a dynamic batch included) are kept."""
    x, w = as_values(x, w)
    if w.ndim != 2:
        raise ShapeError(f"linear: weight must be 2-D [in, out], got {format_shape(w.shape)}")
    y = matmul(x, w)
    if b is None:
        return y
    b = as_value(b, program=w.program)
    if b.ndim != 1 or (b.shape[0] is not None and w.shape[1] is not None
                       and b.shape[0] != w.shape[1]):
        raise ShapeError(f"linear: bias shape {format_shape(b.shape)} does not match the "
                         f"{w.shape[1]} outputs of weight {format_shape(w.shape)}")
    return y + b


def _check_features(name, what, v, x, axis=-1):
    """``v`` is 1-D with the size of ``x``'s ``axis`` (the features)."""
    size = x.shape[axis]
    if v.ndim != 1 or (v.shape[0] is not None and size is not None and v.shape[0] != size):
        where = "the last axis" if axis == -1 else f"axis {axis}"
        raise ShapeError(f"{name}: {what} {v.type_str} must be 1-D with the {size} "
                         f"features of {where} of {x.type_str}")


def _number(name, what, value, low, high=None):
    """A Python number in ``[low, high]`` (no upper bound when ``high`` is None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not low <= value <= (np.inf if high is None else high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: {what} must be a number {bound}, got {value!r}")
    return float(value)


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Normalize over the last axis: ``(x - mean) / sqrt(var + eps)``, then ``* weight`` and
    ``+ bias`` (each 1-D over the last axis, optional), as ``torch.nn.functional.layer_norm``
    with ``normalized_shape = x.shape[-1:]``. ``x`` is floating of rank >= 1."""
    x = as_value(x)
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"layer_norm: needs a floating input, got {x.type_str}")
    if x.ndim == 0:
        raise ShapeError(f"layer_norm: needs an input of rank >= 1, got {x.type_str}")
    centered = x - mean(x, axis=-1, keepdims=True)
    variance = mean(centered * centered, axis=-1, keepdims=True)
    y = centered / ew.sqrt(variance + eps)
    for what, v in (("weight", weight), ("bias", bias)):
        if v is None:
            continue
        v = as_value(v, program=x.program)
        _check_features("layer_norm", what, v, x)
        y = y * v if what == "weight" else y + v
    return y


def batch_norm_stats(name, num_features, dtype="float32"):
    """The running statistics of a :func:`batch_norm` over ``num_features`` channels: the
    parameters ``"<name>.running_mean"`` (zeros) and ``"<name>.running_var"`` (ones) of the
    current program, not trainable (``stop_gradient=True``), as PyTorch's ``BatchNorm``
    buffers. They are program state: a compiled program keeps them in ``fn.state`` and saves
    them in artifacts. Returns ``(running_mean, running_var)``."""
    if (isinstance(num_features, bool) or not isinstance(num_features, (int, np.integer))
            or num_features < 1):
        raise ValueError(f"batch_norm_stats: num_features must be a positive int, got "
                         f"{num_features!r}")
    shape = [int(num_features)]
    return (parameter(f"{name}.running_mean", shape, dtype, init=0.0, stop_gradient=True),
            parameter(f"{name}.running_var", shape, dtype, init=1.0, stop_gradient=True))


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalization (``torch.nn.functional.batch_norm``) of ``x`` [N, C, ...] (rank
    >= 2, floating) per channel (axis 1): ``(x - mean) / sqrt(var + eps)``, then ``* weight``
    and ``+ bias`` (each optional, 1-D [C]).

    ``training=True`` normalizes with the batch's statistics over every axis but 1 (the
    biased variance) and updates the running statistics: ``running = (1 - momentum) *
    running + momentum * batch`` with the unbiased variance for ``running_var``. They must
    then be parameters (:func:`batch_norm_stats` makes them), which it ``assign``s (program
    state: ``fn.state`` holds the new values after each call), or both ``None`` (batch
    statistics only); a second training ``batch_norm`` on the same statistics updates the
    values the first one assigned. ``training=False`` normalizes with ``running_mean`` and
    ``running_var`` (any Values: parameters, data...), which it only reads. Running
    statistics of another floating dtype than ``x`` are cast. Compile an evaluation function
    from the ``training=False`` result with ``sg.compile(..., updates=False,
    state=train.state)`` (see the Training page)."""
    name = "batch_norm"
    x = as_value(x)
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"{name}: needs a floating input, got {x.type_str}")
    if x.ndim < 2:
        raise ShapeError(f"{name}: needs an input [N, C, ...] of rank >= 2, got {x.type_str}")
    momentum = _number(name, "momentum", momentum, 0.0, 1.0)
    eps = _number(name, "eps", eps, 0.0)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{name}: give both running_mean and running_var, or neither")
    stats = None if running_mean is None else (as_value(running_mean, program=x.program),
                                               as_value(running_var, program=x.program))
    for what, v in zip(("running_mean", "running_var"), stats or ()):
        _check_features(name, what, v, x, axis=1)
        if not dtypes.is_float(v.dtype):
            raise DTypeError(f"{name}: {what} needs a floating dtype, got {v.type_str}")
    affine = {what: as_value(v, program=x.program)
              for what, v in (("weight", weight), ("bias", bias)) if v is not None}
    for what, v in affine.items():
        _check_features(name, what, v, x, axis=1)
    if training:
        centered, variance = _batch_statistics(x, stats, momentum)
    elif stats is None:
        raise ValueError(f"{name}: needs running_mean and running_var when not training")
    else:
        center, variance = (_per_channel(ew.cast(v, x.dtype) if v.dtype != x.dtype else v, x)
                            for v in stats)
        centered = x - center
    scale = 1.0 / ew.sqrt(variance + eps)
    if "weight" in affine:
        scale = scale * _per_channel(affine["weight"], x)
    y = centered * scale
    return y + _per_channel(affine["bias"], x) if "bias" in affine else y


def _batch_statistics(x, stats, momentum):
    """Training mode: ``(x - mean, biased variance)`` of the batch per channel (``mean`` over
    every axis but 1, kept as [1, C, 1, ...]), after assigning the running statistics
    ``stats`` (or None) their updates."""
    axes = (0,) + tuple(range(2, x.ndim))
    dims = [x.shape[a] for a in axes]
    if None not in dims and int(np.prod(dims)) <= 1:   # as PyTorch
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                         f"got input {x.type_str}")
    if stats is not None:
        _check_running_stats(x, stats)
    center = mean(x, axis=axes, keepdims=True)
    centered = x - center
    variance = mean(centered * centered, axis=axes, keepdims=True)
    if stats is not None:   # running_var takes the unbiased variance
        count = element_count(x, axes, x.dtype)
        bessel = count / (count - 1) if isinstance(count, int) else \
            count / ew.maximum(count - 1, 0)
        for stat, value in zip(stats, (center, variance * bessel)):
            _update_running(stat, value, momentum)
    return centered, variance


def _per_channel(v, x):
    """The 1-D ``v`` [C] shaped to broadcast along axis 1 of ``x``: [1, C, 1, ...]."""
    return reshape(v, [1, -1] + [1] * (x.ndim - 2))


def _check_running_stats(x, stats):
    """In training mode the running statistics are parameters, updated in the global
    block."""
    name = "batch_norm"
    for what, stat in zip(("running_mean", "running_var"), stats):
        if not is_parameter(stat):
            raise TypeError(f"{name}: in training mode {what} must be a parameter "
                            f"(nn.batch_norm_stats or sg.parameter), which it updates, or None; "
                            f"got {stat.type_str}")
    if current_block(x.program) is not x.program.global_block():
        raise ScopeError(f"{name}: in training mode it updates the running statistics "
                         f"{stats[0].name!r} and {stats[1].name!r}, which only the program's "
                         f"global block can do, not a cond branch or a loop body; build it "
                         f"there, or pass running_mean=None, running_var=None")


def _update_running(stat, batch, momentum):
    """Assign ``(1 - momentum) * stat + momentum * batch`` to the parameter ``stat``, from
    the value its last assign so far gives it (the parameter itself when none)."""
    batch = reshape(batch, stat.shape)
    if batch.dtype != stat.dtype:
        batch = ew.cast(batch, stat.dtype)
    latest = assignments(stat.program).get(stat, stat)
    assign(latest * (1.0 - momentum) + batch * momentum, stat)


def embedding(ids, table):
    """Rows of ``table`` [num_embeddings, dim] at the integer ``ids``: shape ``ids.shape +
    [dim]`` (``take(table, ids, axis=0)``). The gradient of ``table`` scatter-adds (a repeated
    id accumulates); ``ids`` get none. An id outside ``[-num_embeddings, num_embeddings)``
    is an :class:`~symgrad.errors.IndexOutOfRangeError`: when the program is built for
    constant ids, else when it runs. NumPy arrays and lists of ids become int64 constants
    (they are indices, not operands the table's dtype is promoted with)."""
    table = as_value(table, program=ids.program if isinstance(ids, Value) else None)
    if table.ndim != 2:
        raise ShapeError(f"embedding: table must be 2-D [num_embeddings, dim], got "
                         f"{table.type_str}")
    if isinstance(ids, Value) and ids.dtype.kind not in "iu":
        raise DTypeError(f"embedding: ids need an integer dtype, got {ids.type_str}")
    return gather(take_p, "embedding", table, ids, 0)


def _check_dropout(name, x, p):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise ValueError(f"{name}: p must be a number in [0, 1], got {p!r}")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"{name}: needs a floating input, got {x.type_str}")


def _drop(x, p, mask_shape, seed, counter):
    """``x`` with the elements where ``random.uniform(mask_shape) < p`` (broadcast) zeroed
    and the others scaled by ``1 / (1 - p)``."""
    keep = uniform(mask_shape, dtype="float32", seed=seed, counter=counter) >= float(p)
    return ew.where(keep, x * (1.0 / (1.0 - p) if p < 1 else 0.0), 0.0)


def dropout(x, p=0.5, training=True, seed=0, counter=None):
    """Zero each element of ``x`` with probability ``p`` and scale the kept ones by
    ``1 / (1 - p)`` (``x`` itself when not ``training`` or ``p == 0``). The mask comes from
    ``random.uniform`` shaped like ``x`` at run time (so it changes with every call of the
    compiled program; ``seed``, ``counter`` as there) and the gradient uses the same mask:
    ``where(keep, g / (1 - p), 0)``."""
    x = as_value(x)
    _check_dropout("dropout", x, p)
    if not training or p == 0:
        return x
    return _drop(x, p, x, seed, counter)


def dropout2d(x, p=0.5, training=True, seed=0, counter=None):
    """Zero each channel of ``x`` [N, C, H, W] (a whole [H, W] plane) with probability ``p``
    and scale the kept ones by ``1 / (1 - p)`` (``x`` itself when not ``training`` or
    ``p == 0``), as ``torch.nn.functional.dropout2d``. The mask is ``random.uniform`` of
    shape [N, C, 1, 1] (``seed``, ``counter`` as there; it changes with every call of the
    compiled program) and the gradient uses the same mask."""
    x = as_value(x)
    _check_dropout("dropout2d", x, p)
    if x.ndim != 4:
        raise ShapeError(f"dropout2d: needs a 4-D NCHW input, got {x.type_str}")
    if not training or p == 0:
        return x
    # the mask takes N and C from x at run time when they are unknown now
    mask_shape = x[:, :, :1, :1] if None in x.shape[:2] else x.shape[:2] + (1, 1)
    return _drop(x, p, mask_shape, seed, counter)


# A call that raises leaves its program as it was (see symgrad.ops.core.atomic).
atomic_functions(globals(), __all__)
