"""OpSamples of the reductions and shape ops (see tests/ops/samples.py).

Inputs are float64; ``max``/``min`` inputs have no ties except in the samples named ``ties``
(two-way ties, where the even split equals the central difference). ``prod`` inputs stay away
from zero except in the samples named ``zero``. ``argmax``/``argmin`` carry no gradient.
"""
import numpy as np

import symgrad as sg
from symgrad.ops import reduction
from symgrad.ops import shape as shape_ops
from symgrad.ops.core import bind

from .samples import OpSample

_R = np.random.default_rng(23)


def _u(*shape):
    return _R.uniform(-2.0, 2.0, size=shape)


def _distinct(*shape):
    """Values at least 0.05 apart from each other (no ties anywhere)."""
    n = int(np.prod(shape))
    return (_R.permutation(n) * 0.1 - 0.05 * n + _R.uniform(0, 0.05, n)).reshape(shape)


def _positive(*shape):
    return _R.uniform(0.5, 1.5, size=shape) * _R.choice([-1.0, 1.0], size=shape)


def _logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _scatter(g, shape, index):
    out = np.zeros(shape)
    out[index] = g
    return out


_ties = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 0.5, 2.0, 1.5], [0.25, -4.0, 0.0, -2.0]])
_one_zero = np.array([[1.5, 0.0, -0.7], [0.8, 1.2, -1.1]])
_two_zeros = np.array([[0.0, 1.3, 0.0, 0.6], [0.9, -1.4, 0.7, 1.1]])

SAMPLES = [
    # reductions
    OpSample("sum", sg.sum, [_u(3, 4)], np.sum),
    OpSample("sum", lambda x: sg.sum(x, axis=(0, -1), keepdims=True), [_u(3, 2, 4)],
             lambda x: np.sum(x, axis=(0, 2), keepdims=True), id="sum-axes-keepdims"),
    OpSample("sum", lambda x: sg.sum(x, axis=0), [_u(4, 3)], lambda x: np.sum(x, axis=0),
             dynamic=(0,), id="sum-dynamic-axis"),
    OpSample("sum", lambda x: sg.sum(x, axis=1), [_R.integers(-5, 5, (3, 4))],
             lambda x: np.sum(x, axis=1), grad=False, grad2=False, id="sum-int"),
    OpSample("mean", sg.mean, [_u(3, 4)], np.mean),
    OpSample("mean", lambda x: sg.mean(x, axis=(0, 2)), [_u(4, 3, 2)],
             lambda x: np.mean(x, axis=(0, 2)), dynamic=(0,), id="mean-dynamic-count"),
    OpSample("mean", lambda x: sg.mean(x, axis=-1, keepdims=True), [_u(2, 5)],
             lambda x: np.mean(x, axis=-1, keepdims=True), dynamic=(0,), id="mean-keepdims"),
    OpSample("max", lambda x: sg.max(x, axis=1), [_distinct(3, 4)], lambda x: np.max(x, axis=1)),
    OpSample("max", sg.max, [_distinct(2, 3, 2)], np.max, dynamic=(0,), id="max-all-dynamic"),
    OpSample("max", lambda x: sg.max(x, axis=1), [_ties], lambda x: np.max(x, axis=1),
             grad2=False, id="max-ties"),
    OpSample("min", lambda x: sg.min(x, axis=0, keepdims=True), [_distinct(3, 4)],
             lambda x: np.min(x, axis=0, keepdims=True)),
    OpSample("min", lambda x: sg.min(x, axis=-1), [_ties], lambda x: np.min(x, axis=-1),
             grad2=False, id="min-ties"),
    OpSample("prod", lambda x: sg.prod(x, axis=1), [_positive(3, 4)],
             lambda x: np.prod(x, axis=1)),
    OpSample("prod", sg.prod, [_positive(2, 3)], np.prod, dynamic=(0,), id="prod-all"),
    OpSample("prod", lambda x: sg.prod(x, axis=1), [_one_zero], lambda x: np.prod(x, axis=1),
             id="prod-one-zero"),
    OpSample("prod", lambda x: sg.prod(x, axis=-1), [_two_zeros], lambda x: np.prod(x, axis=-1),
             grad2=False, id="prod-two-zeros"),
    OpSample("argmax", lambda x: sg.argmax(x, axis=1), [_distinct(3, 4)],
             lambda x: np.argmax(x, axis=1), grad=False, grad2=False),
    OpSample("argmax", sg.argmax, [_distinct(3, 4)], np.argmax, grad=False, grad2=False,
             dynamic=(0,), id="argmax-flat"),
    OpSample("argmin", lambda x: sg.argmin(x, axis=-1, keepdims=True), [_distinct(2, 5)],
             lambda x: np.argmin(x, axis=-1, keepdims=True), grad=False, grad2=False),
    OpSample("logsumexp", lambda x: sg.logsumexp(x, axis=1), [_u(3, 4)],
             lambda x: _logsumexp(x, axis=1)),
    OpSample("logsumexp", lambda x: sg.logsumexp(x, axis=(0, 1), keepdims=True), [_u(2, 3, 2)],
             lambda x: _logsumexp(x, axis=(0, 1), keepdims=True), dynamic=(0,),
             id="logsumexp-dynamic-keepdims"),
    # shape ops
    OpSample("reshape", lambda x: sg.reshape(x, (4, 3)), [_u(2, 6)], lambda x: x.reshape(4, 3)),
    OpSample("reshape", lambda x: sg.reshape(x, (-1, 2)), [_u(3, 2, 2)],
             lambda x: x.reshape(-1, 2), dynamic=(0,), id="reshape-dynamic"),
    OpSample("transpose", sg.transpose, [_u(2, 3, 4)], np.transpose),
    OpSample("transpose", lambda x: sg.transpose(x, (1, -1, 0)), [_u(2, 3, 4)],
             lambda x: np.transpose(x, (1, 2, 0)), dynamic=(0,), id="transpose-perm-dynamic"),
    OpSample("broadcast_to", lambda x: sg.broadcast_to(x, (2, 3, 4)), [_u(3, 1)],
             lambda x: np.broadcast_to(x, (2, 3, 4))),
    OpSample("broadcast_to", lambda x: sg.broadcast_to(x, (-1, 2, 3)), [_u(4, 1, 3)],
             lambda x: np.broadcast_to(x, (4, 2, 3)), dynamic=(0,), id="broadcast_to-keep"),
    OpSample("expand_dims", lambda x: sg.expand_dims(x, (0, -1)), [_u(2, 3)],
             lambda x: np.expand_dims(x, (0, -1))),
    OpSample("squeeze", sg.squeeze, [_u(2, 1, 3, 1)], np.squeeze),
    OpSample("squeeze", lambda x: sg.squeeze(x, -1), [_u(3, 2, 1)],
             lambda x: np.squeeze(x, -1), dynamic=(0,), id="squeeze-axis-dynamic"),
    OpSample("concatenate", lambda a, b: sg.concatenate([a, b], axis=1), [_u(2, 3), _u(2, 2)],
             lambda a, b: np.concatenate([a, b], axis=1)),
    OpSample("concatenate", lambda a, b, c: sg.concatenate([a, b, c]),
             [_u(2, 3), _u(1, 3), _u(3, 3)], lambda a, b, c: np.concatenate([a, b, c]),
             dynamic=(1,), id="concatenate-one-dynamic"),
    OpSample("concatenate", lambda a, b: sg.concatenate([a, b], axis=0), [_u(2, 3), _u(3, 3)],
             lambda a, b: np.concatenate([a, b], axis=0), dynamic=(0, 1),
             id="concatenate-two-dynamic"),
    OpSample("stack", lambda a, b: sg.stack([a, b], axis=1), [_u(2, 3), _u(2, 3)],
             lambda a, b: np.stack([a, b], axis=1)),
    OpSample("split", lambda x: sg.split(x, 3, axis=1), [_u(2, 6)],
             lambda x: np.split(x, 3, axis=1)),
    OpSample("split", lambda x: sg.split(x, [1, -2]), [_u(5, 2)],
             lambda x: np.split(x, [1, -2]), dynamic=(0,), id="split-indices-dynamic"),
    OpSample("split", lambda x: sg.split(x, [2], axis=-1)[1], [_u(2, 5)],
             lambda x: np.split(x, [2], axis=-1)[1], id="split-one-piece-used"),
    OpSample("pad", lambda x: sg.pad(x, ((1, 0), (2, 1))), [_u(2, 3)],
             lambda x: np.pad(x, ((1, 0), (2, 1)))),
    OpSample("pad", lambda x: sg.pad(x, 1, constant_values=0.5), [_u(3, 2)],
             lambda x: np.pad(x, 1, constant_values=0.5), dynamic=(0,), id="pad-dynamic"),
    OpSample("slice", lambda x: x[1:, ::-2], [_u(3, 5)], lambda x: x[1:, ::-2]),
    OpSample("slice", lambda x: x[..., None, -1], [_u(4, 2, 3)], lambda x: x[..., None, -1],
             dynamic=(0,), id="slice-ellipsis-newaxis-dynamic"),
    OpSample("slice", lambda x: x[-2, 1:3], [_u(3, 4)], lambda x: x[-2, 1:3], id="slice-int"),
]

# internal ops that other VJPs build (run-time shapes come from integer "reference" inputs)
_ref34 = _R.integers(0, 2, (3, 4))
SAMPLES += [
    OpSample("broadcast_like", shape_ops.broadcast_like, [_u(1, 4), _ref34],
             lambda x, r: np.broadcast_to(x, r.shape), dynamic=(1,)),
    OpSample("reshape_like", shape_ops.reshape_like, [_u(2, 6), _ref34],
             lambda x, r: x.reshape(r.shape), dynamic=(1,)),
    OpSample("split_like", lambda g, a, b: bind(shape_ops.split_like_p, [g, a, b], {"axis": 0}),
             [_u(5, 2), _R.integers(0, 2, (2, 2)), _R.integers(0, 2, (3, 2))],
             lambda g, a, b: tuple(np.split(g, [2])), dynamic=(1, 2)),
    OpSample("slice_scatter",
             lambda g, r: shape_ops.slice_scatter(g, r, ((1, 3, None), (None, None, 2))),
             [_u(2, 2), _ref34], lambda g, r: _scatter(g, r.shape, np.s_[1:3, ::2]),
             dynamic=(1,)),
    OpSample("slice_scatter",
             lambda g, r: shape_ops.slice_scatter(g, r, (-1, (None, None, -1))),
             [_u(4), _ref34], lambda g, r: _scatter(g, r.shape, np.s_[-1, ::-1]),
             id="slice_scatter-static"),
    OpSample("size", lambda x: bind(reduction.size_p, [x], {"axis": (0, 1), "dtype": "float64"}),
             [_u(3, 2, 2)], lambda x: np.float64(6), grad=False, grad2=False, dynamic=(0,)),
]


def _assign_tanh(x):
    """``assign(tanh(x), p)`` to a parameter of ``x``'s type: the parameter's next value."""
    return sg.assign(sg.tanh(x), sg.parameter("p", list(x.shape), x.dtype, init=0.0))


SAMPLES += [
    OpSample("assign", _assign_tanh, [_u(3, 4)], np.tanh),
]
