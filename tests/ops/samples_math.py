"""OpSamples of cumsum, cumprod (and linear_recurrence, which its VJP is built from), erf,
arctan2, einsum, leaky_relu and the compositions var, std and layer_norm (see
tests/ops/samples.py).

``cumprod`` inputs stay away from zero except in the samples named ``zero`` (up to three zeros
in a slice: first and second derivatives are exact there too); ``leaky_relu``
inputs away from its kink; ``arctan2`` points away from the origin.
"""
import math

import numpy as np

import symgrad as sg
from symgrad.ops.cumulative import linear_recurrence

from .samples import OpSample

_R = np.random.default_rng(41)


def _u(*shape, lo=-2.0, hi=2.0):
    return _R.uniform(lo, hi, size=shape)


def _away_from_zero(*shape):
    return _R.uniform(0.3, 1.5, size=shape) * _R.choice([-1.0, 1.0], size=shape)


def _layer_norm(x, w=None, b=None, eps=1e-5):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


_one_zero = np.array([[1.2, 0.0, -0.8, 1.1], [0.7, -1.3, 0.9, 0.0]])
_two_zeros = np.array([[0.9, 0.0, 1.4, 0.0, -0.6]])
# row r holds r zeros (first and last positions included)
_zeros_per_row = np.array([[0.9, -1.2, 1.4, 0.7, -0.6, 1.1],
                           [1.3, 0.8, 0.0, -0.9, 1.2, 0.6],
                           [0.0, 1.1, -0.7, 1.3, 0.0, 0.9],
                           [1.2, 0.0, 0.8, 0.0, -1.1, 0.0]])


def _linear_recurrence(a, b, axis, reverse=False):
    """NumPy reference of the ``linear_recurrence`` op, element by element."""
    a, h = np.moveaxis(a, axis, 0), np.moveaxis(b.copy(), axis, 0)
    n = len(h)
    for i in (range(n - 2, -1, -1) if reverse else range(1, n)):
        h[i] = h[i] + (a[i + 1] * h[i + 1] if reverse else a[i] * h[i - 1])
    return np.moveaxis(h, 0, axis)
_erf = np.vectorize(math.erf)

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 2)], "matmul"),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)], "batched"),
    ("ij,jk", [(2, 3), (3, 4)], "implicit"),
    ("aB,Bc", [(2, 3), (3, 2)], "implicit-mixed-case"),
    ("ii", [(3, 3)], "trace"),
    ("ii->i", [(3, 3)], "diagonal"),
    ("iij,j->ij", [(2, 2, 3), (3,)], "repeated-with-other"),
    ("i,j->ij", [(3,), (2,)], "outer"),
    ("ij->", [(2, 3)], "sum"),
    ("ij->j", [(3, 2)], "letter-only-here"),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 2)], "ellipsis-broadcast"),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 3)], "three-operands"),
    ("ij,jk->ik", [(2, 1), (3, 2)], "broadcast-letter"),
]

SAMPLES = [
    OpSample("cumsum", lambda x: sg.cumsum(x, axis=1), [_u(3, 4)],
             lambda x: np.cumsum(x, axis=1)),
    OpSample("cumsum", sg.cumsum, [_u(2, 3)], np.cumsum, id="cumsum-flat"),
    OpSample("cumsum", lambda x: sg.cumsum(x, axis=0), [_u(4, 2)],
             lambda x: np.cumsum(x, axis=0), dynamic=(0,), id="cumsum-dynamic"),
    OpSample("cumsum", lambda x: sg.cumsum(x, axis=-1), [_R.integers(-3, 3, (2, 4))],
             lambda x: np.cumsum(x, axis=-1), grad=False, grad2=False, id="cumsum-int"),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=1), [_away_from_zero(3, 4)],
             lambda x: np.cumprod(x, axis=1)),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=0), [_away_from_zero(4, 2)],
             lambda x: np.cumprod(x, axis=0), dynamic=(0,), id="cumprod-dynamic"),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=1), [_one_zero],
             lambda x: np.cumprod(x, axis=1), id="cumprod-one-zero"),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=1), [_two_zeros],
             lambda x: np.cumprod(x, axis=1), id="cumprod-two-zeros"),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=1), [_zeros_per_row],
             lambda x: np.cumprod(x, axis=1), id="cumprod-zero-to-three-zeros"),
    OpSample("cumprod", lambda x: sg.cumprod(x, axis=0), [_zeros_per_row.T],
             lambda x: np.cumprod(x, axis=0), dynamic=(0,), id="cumprod-zeros-dynamic"),
    OpSample("linear_recurrence", lambda a, b: linear_recurrence(a, b, 1),
             [_zeros_per_row, _u(4, 6)], lambda a, b: _linear_recurrence(a, b, 1)),
    OpSample("linear_recurrence", lambda a, b: linear_recurrence(a, b, 1, reverse=True),
             [_zeros_per_row, _u(4, 6)], lambda a, b: _linear_recurrence(a, b, 1, True),
             id="linear_recurrence-reverse"),
    OpSample("linear_recurrence", lambda a, b: linear_recurrence(a, b, 0, reverse=True),
             [_u(5, 2), _u(5, 2)], lambda a, b: _linear_recurrence(a, b, 0, True),
             dynamic=(0, 1), id="linear_recurrence-reverse-dynamic"),
    OpSample("linear_recurrence", lambda a, b: linear_recurrence(a, b, 0), [_u(1), _u(1)],
             lambda a, b: _linear_recurrence(a, b, 0), id="linear_recurrence-one-element"),
    OpSample("erf", sg.erf, [np.array([-3.1, -2.6, -1.2, -0.3, 0.0, 0.4, 1.7, 2.4, 2.7, 3.5])],
             _erf, id="erf-both-ranges"),
    OpSample("erf", sg.erf, [_u(3, 4, lo=-3, hi=3)], _erf, dynamic=(0,), id="erf-dynamic"),
    OpSample("arctan2", sg.arctan2, [_away_from_zero(3, 4), _away_from_zero(4)], np.arctan2),
    OpSample("arctan2", lambda y: sg.arctan2(y, -1.0), [_u(2, 3)],
             lambda y: np.arctan2(y, -1.0), id="arctan2-scalar-x"),
    OpSample("leaky_relu", lambda x: sg.nn.leaky_relu(x, 0.2), [_away_from_zero(3, 4)],
             lambda x: np.where(x > 0, x, 0.2 * x), dynamic=(0,)),
    OpSample("leaky_relu", sg.nn.leaky_relu, [_away_from_zero(5)],
             lambda x: np.where(x > 0, x, 0.01 * x), id="leaky_relu-default"),
    # compositions
    OpSample("mean", sg.var, [_u(3, 4)], np.var, id="var-all"),
    OpSample("sum", lambda x: sg.var(x, axis=0, ddof=1), [_u(4, 3)],
             lambda x: np.var(x, axis=0, ddof=1), dynamic=(0,), id="var-ddof-dynamic"),
    OpSample("sqrt", lambda x: sg.std(x, axis=-1, keepdims=True), [_u(2, 5)],
             lambda x: np.std(x, axis=-1, keepdims=True), id="std-keepdims"),
    # (sin: the sum of squares of a layer norm is nearly constant, its gradient ~0)
    OpSample("mean", lambda x: sg.sin(sg.nn.layer_norm(x)), [_u(3, 5)],
             lambda x: np.sin(_layer_norm(x)), dynamic=(0,), id="layer_norm-plain"),
    OpSample("mean", sg.nn.layer_norm, [_u(2, 3, 4), _u(4), _u(4)], _layer_norm,
             id="layer_norm-weight-bias"),
]

SAMPLES += [
    OpSample("einsum", lambda *xs, s=spec: sg.einsum(s, *xs), [_u(*shape) for shape in shapes],
             lambda *xs, s=spec: np.einsum(s, *xs), id=f"einsum-{tag}")
    for spec, shapes, tag in EINSUM
]
SAMPLES.append(OpSample("einsum", lambda a, b: sg.einsum("bi,ij->bj", a, b),
                        [_u(3, 2), _u(2, 4)], lambda a, b: a @ b, dynamic=(0,),
                        id="einsum-dynamic"))
