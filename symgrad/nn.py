"""Neural-network front end: activations, the softmax family, losses, linear, conv, pooling.

Every function takes symgrad Values (NumPy arrays and scalars become constants) and returns a
Value; shape and dtype errors are raised when the op is built. Layout is NCHW.
"""
from .ops.activation import gelu, relu, softplus
from .ops.core import as_value, as_values, atomic_functions
from .ops.linalg import matmul
from .ops.nn_ops import (avg_pool2d, conv2d, log_softmax, max_pool2d, softmax,
                         softmax_cross_entropy)
from .errors import ShapeError
from .ir.value import format_shape

__all__ = ["relu", "gelu", "softplus", "softmax", "log_softmax", "softmax_cross_entropy",
           "linear", "conv2d", "max_pool2d", "avg_pool2d"]


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


# A call that raises leaves its program as it was (see symgrad.ops.core.atomic).
atomic_functions(globals(), __all__)
