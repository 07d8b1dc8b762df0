"""OpSamples of the integer gathers: ``take``, ``take_along_axis``, integer-array indexing,
``nn.embedding`` and their scatter-add gradients (see tests/ops/samples.py).

Indices repeat and include negative values, so the gradients' accumulation is exercised; empty
indices (an empty list, fed arrays of size 0) gather nothing and get gradients of zeros.
"""
import numpy as np

import symgrad as sg
from symgrad.ops.core import bind

from .samples import OpSample

_R = np.random.default_rng(31)


def _u(*shape):
    return _R.uniform(-2.0, 2.0, size=shape)


def _scatter_take(g, indices, shape, axis):
    out = np.zeros(shape)
    if axis is None:
        np.add.at(out.reshape(-1), indices, g)
    else:
        np.add.at(out, (slice(None),) * axis + (indices,), g)
    return out


def _scatter_along(g, indices, shape, axis):
    """Loop reference: out[..., indices[..., i, ...], ...] += g[..., i, ...]."""
    out = np.zeros(shape)
    indices = np.broadcast_to(indices, g.shape)
    for position in np.ndindex(g.shape):
        target = list(position)
        target[axis] = indices[position]
        target = tuple(0 if shape[d] == 1 else t for d, t in enumerate(target))
        out[target] += g[position]
    return out


_IDX = np.array([[0, -1], [2, 0]])
_ALONG = np.array([[1, 1], [0, 3], [-1, 2]])

SAMPLES = [
    OpSample("take", lambda x, i: sg.take(x, i, axis=0), [_u(4, 3), _IDX],
             lambda x, i: np.take(x, i, axis=0), id="take-axis0-repeats"),
    OpSample("take", lambda x, i: sg.take(x, i), [_u(3, 4), np.array([5, -2, 5])],
             lambda x, i: np.take(x, i), id="take-flat"),
    OpSample("take", lambda x, i: sg.take(x, i, axis=-1), [_u(3, 5), np.array([4, 0, 4])],
             lambda x, i: np.take(x, i, axis=-1), dynamic=(0,), id="take-last-dynamic"),
    OpSample("take_grad",
             lambda g, i: bind("take_grad", [g, i], {"shape": (4, 3), "axis": 0}),
             [_u(2, 2, 3), _IDX], lambda g, i: _scatter_take(g, i, (4, 3), 0),
             id="take_grad-axis0"),
    OpSample("take_grad",
             lambda g, i: bind("take_grad", [g, i], {"shape": (2, 3), "axis": None}),
             [_u(4), np.array([1, -1, 1, 0])],
             lambda g, i: _scatter_take(g, i, (2, 3), None), id="take_grad-flat"),
    OpSample("take_along_axis", lambda x, i: sg.take_along_axis(x, i, axis=1),
             [_u(3, 4), _ALONG], lambda x, i: np.take_along_axis(x, i, axis=1),
             id="take_along_axis-axis1"),
    OpSample("take_along_axis", lambda x, i: sg.take_along_axis(x, i, axis=0),
             [_u(3, 4), np.array([[2], [0], [2]])],
             lambda x, i: np.take_along_axis(x, i, axis=0), dynamic=(0,),
             id="take_along_axis-broadcast-dynamic"),
    OpSample("take_along_axis", lambda x, i: sg.take_along_axis(x, i, axis=None),
             [_u(2, 3), np.array([4, -1, 4])],
             lambda x, i: np.take_along_axis(x, i, axis=None), id="take_along_axis-flat"),
    OpSample("take_along_axis_grad",
             lambda g, i: bind("take_along_axis_grad", [g, i], {"shape": (3, 4), "axis": 1}),
             [_u(3, 2), _ALONG], lambda g, i: _scatter_along(g, i, (3, 4), 1),
             id="take_along_axis_grad-axis1"),
    OpSample("take_along_axis_grad",
             lambda g, i: bind("take_along_axis_grad", [g, i], {"shape": (1, 4), "axis": 0}),
             [_u(3, 4), np.array([[0], [0], [0]])],
             lambda g, i: _scatter_along(g, i, (1, 4), 0), id="take_along_axis_grad-bcast"),
    # integer-array indexing (take after basic indexing)
    OpSample("take", lambda x, i: x[i], [_u(4, 3), _IDX], lambda x, i: x[i],
             dynamic=(0,), id="getitem-int-value"),
    OpSample("take", lambda x, i: x[:, i], [_u(2, 4), np.array([3, -4, 3])],
             lambda x, i: x[:, i], id="getitem-second-axis"),
    OpSample("take", lambda x, i: x[1, ::2, i], [_u(3, 4, 5), np.array([[0, 4]])],
             lambda x, i: x[1, ::2, i], id="getitem-apart-dims-first"),
    OpSample("take", lambda x: x[..., [2, 0, 2]], [_u(2, 3, 3)],
             lambda x: x[..., [2, 0, 2]], id="getitem-constant-list"),
    OpSample("take", lambda ids, table: sg.nn.embedding(ids, table),
             [np.array([[1, 4, 1], [0, 1, 3]]), _u(5, 2)], lambda ids, t: t[ids],
             dynamic=(0,), id="embedding"),
    # empty indices: NumPy's shapes, and gradients of zeros
    OpSample("take", lambda x: x[[]], [_u(4, 3)], lambda x: x[[]], id="getitem-empty-list"),
    OpSample("take", lambda x: x[[], 0], [_u(4, 3)], lambda x: x[[], 0],
             id="getitem-empty-list-int"),
    OpSample("take", lambda x: x[[], :], [_u(4, 3)], lambda x: x[[], :],
             id="getitem-empty-list-slice"),
    OpSample("take", lambda x: x[:, np.array([], int)], [_u(4, 3)],
             lambda x: x[:, np.array([], int)], id="getitem-empty-array"),
    OpSample("take", lambda x, i: sg.take(x, i, axis=1), [_u(4, 3), np.zeros(0, np.int64)],
             lambda x, i: np.take(x, i, axis=1), dynamic=(0,), id="take-empty-fed"),
    OpSample("take_along_axis", lambda x, i: sg.take_along_axis(x, i, axis=1),
             [_u(4, 3), np.zeros((4, 0), np.int64)],
             lambda x, i: np.take_along_axis(x, i, axis=1), id="take_along_axis-empty-fed"),
]
