"""Neural-network front end: activations, the softmax family, losses, linear, conv, pooling,
normalization, embeddings and dropout.

Every function takes symgrad Values (NumPy arrays and scalars become constants) and returns a
Value; shape and dtype errors are raised when the op is built. Layout is NCHW.
``layer_norm``, ``embedding`` and ``dropout`` are compositions of other ops (``mean``,
``take``, ``random.uniform`` and ``where``), so their gradients (of any order) are those ops'.
"""
from . import dtypes
from .errors import DTypeError, ShapeError
from .ir.value import Value, format_shape
from .ops import elementwise as ew
from .ops.activation import gelu, leaky_relu, relu, softplus
from .ops.core import atomic_functions
from .ops.indexing import gather, take_p
from .ops.linalg import matmul
from .ops.nn_ops import (avg_pool2d, conv2d, log_softmax, max_pool2d, softmax,
                         softmax_cross_entropy)
from .ops.reduction import mean
from .ops.source import as_value, as_values
from .random import uniform

__all__ = ["relu", "leaky_relu", "gelu", "softplus", "softmax", "log_softmax",
           "softmax_cross_entropy", "linear", "conv2d", "max_pool2d", "avg_pool2d",
           "layer_norm", "embedding", "dropout"]


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


def _check_features(name, what, v, x):
    if v.ndim != 1 or (v.shape[0] is not None and x.shape[-1] is not None
                       and v.shape[0] != x.shape[-1]):
        raise ShapeError(f"{name}: {what} {v.type_str} must be 1-D with the {x.shape[-1]} "
                         f"features of the last axis of {x.type_str}")


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


def dropout(x, p=0.5, training=True, seed=0, counter=None):
    """Zero each element of ``x`` with probability ``p`` and scale the kept ones by
    ``1 / (1 - p)`` (``x`` itself when not ``training`` or ``p == 0``). The mask comes from
    ``random.uniform`` shaped like ``x`` at run time (so it changes with every call of the
    compiled program; ``seed``, ``counter`` as there) and the gradient uses the same mask:
    ``where(keep, g / (1 - p), 0)``."""
    x = as_value(x)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be a number in [0, 1], got {p!r}")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"dropout: needs a floating input, got {x.type_str}")
    if not training or p == 0:
        return x
    keep = uniform(x, dtype="float32", seed=seed, counter=counter) >= float(p)
    return ew.where(keep, x * (1.0 / (1.0 - p) if p < 1 else 0.0), 0.0)


# A call that raises leaves its program as it was (see symgrad.ops.core.atomic).
atomic_functions(globals(), __all__)
