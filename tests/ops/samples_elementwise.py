"""OpSamples of the elementwise and activation ops (see tests/ops/samples.py).

Inputs are float64, placed away from non-differentiable points (kinks, ties, jumps) and domain
edges, so central differences are meaningful. Ops with bool/int results use ``grad=False``.
"""
import math

import numpy as np

import symgrad as sg
from symgrad.ops import activation

from .samples import OpSample

_R = np.random.default_rng(11)


def _u(shape, lo, hi):
    """Uniform float64 in [lo, hi)."""
    return _R.uniform(lo, hi, size=shape)


def _away_from_zero(shape, lo=0.2, hi=2.0):
    """Uniform magnitudes in [lo, hi) with random signs."""
    return _u(shape, lo, hi) * _R.choice([-1.0, 1.0], size=shape)


def _fractional(shape):
    """Values whose fractional part is in (0.1, 0.4) or (0.6, 0.9): away from integers and
    halves, where floor/ceil/round jump."""
    whole = _R.integers(-3, 3, size=shape).astype(np.float64)
    frac = _u(shape, 0.1, 0.4) + 0.5 * _R.integers(0, 2, size=shape)
    return whole + frac


def _no_ties(shape):
    """Two arrays that differ everywhere by at least 0.1."""
    a = _u(shape, -2, 2)
    return a, a + _away_from_zero(shape, 0.1, 1.0)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _bools(shape):
    return _R.integers(0, 2, size=shape).astype(bool)


_a34, _b34 = _no_ties((3, 4))
_eq_a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
_eq_b = np.array([1.0, 0.0, 3.0])

SAMPLES = [
    # arithmetic, with broadcasting and a dynamic first dim
    OpSample("add", sg.add, [_u((3, 4), -2, 2), _u((4,), -2, 2)], np.add, dynamic=(0,)),
    OpSample("add", lambda x: x + 2.5, [_u((2, 3), -2, 2)], lambda x: x + 2.5, id="add-scalar"),
    OpSample("subtract", sg.subtract, [_u((2, 3), -2, 2), _u((2, 1), -2, 2)], np.subtract),
    OpSample("subtract", lambda x: 1.0 - x, [_u((4,), -2, 2)], lambda x: 1.0 - x,
             id="subtract-rscalar"),
    OpSample("multiply", sg.multiply, [_u((3, 1), -2, 2), _u((1, 4), -2, 2)], np.multiply),
    OpSample("multiply", sg.multiply, [_u((5, 3), -2, 2), _u((5, 3), -2, 2)], np.multiply,
             dynamic=(0, 1), id="multiply-dynamic"),
    OpSample("divide", sg.divide, [_u((3, 4), -2, 2), _away_from_zero((4,), 0.5, 2.0)],
             np.divide, dynamic=(0,)),
    OpSample("divide", lambda x: 3.0 / x, [_away_from_zero((2, 2), 0.5, 2.0)],
             lambda x: 3.0 / x, id="divide-rscalar"),
    OpSample("power", sg.power, [_u((2, 3), 0.5, 2.0), _u((3,), -1.0, 2.0)], np.power),
    OpSample("power", lambda x: x ** 3, [_u((2, 3), -2, 2)], lambda x: x ** 3,
             id="power-const-exponent"),
    OpSample("power", lambda y: 2.0 ** y, [_u((4,), -1, 2)], lambda y: 2.0 ** y,
             id="power-const-base"),
    OpSample("negative", sg.negative, [_u((2, 3), -2, 2)], np.negative, dynamic=(0,)),
    OpSample("square", sg.square, [_u((2, 3), -2, 2)], np.square),
    OpSample("abs", sg.abs, [_away_from_zero((3, 4))], np.abs),
    OpSample("sign", sg.sign, [_away_from_zero((3, 4))], np.sign),
    OpSample("maximum", sg.maximum, [_a34, _b34], np.maximum, dynamic=(0, 1)),
    OpSample("maximum", sg.maximum, [_u((3, 1), -2, -1), _u((4,), 1, 2)], np.maximum,
             id="maximum-broadcast"),
    OpSample("minimum", sg.minimum, [_b34, _a34], np.minimum),
    OpSample("minimum", lambda x: sg.minimum(x, 0.5), [_away_from_zero((2, 3)) + 0.5],
             lambda x: np.minimum(x, 0.5), id="minimum-scalar"),
    # transcendental
    OpSample("exp", sg.exp, [_u((2, 3), -2, 2)], np.exp, dynamic=(0,)),
    OpSample("log", sg.log, [_u((2, 3), 0.3, 3.0)], np.log),
    OpSample("log1p", sg.log1p, [_u((2, 3), -0.5, 2.0)], np.log1p),
    OpSample("expm1", sg.expm1, [_u((2, 3), -2, 2)], np.expm1),
    OpSample("sqrt", sg.sqrt, [_u((2, 3), 0.3, 3.0)], np.sqrt),
    OpSample("sin", sg.sin, [_u((2, 3), -3, 3)], np.sin),
    OpSample("cos", sg.cos, [_u((2, 3), -3, 3)], np.cos),
    OpSample("tan", sg.tan, [_u((2, 3), -1.2, 1.2)], np.tan),
    OpSample("tanh", sg.tanh, [_u((2, 3), -2, 2)], np.tanh, dynamic=(0,)),
    OpSample("sinh", sg.sinh, [_u((2, 3), -2, 2)], np.sinh),
    OpSample("cosh", sg.cosh, [_u((2, 3), -2, 2)], np.cosh),
    OpSample("arcsin", sg.arcsin, [_u((2, 3), -0.9, 0.9)], np.arcsin),
    OpSample("arccos", sg.arccos, [_u((2, 3), -0.9, 0.9)], np.arccos),
    OpSample("arctan", sg.arctan, [_u((2, 3), -3, 3)], np.arctan),
    OpSample("sigmoid", sg.sigmoid, [_u((3, 4), -6, 6)], _sigmoid, dynamic=(0,)),
    # piecewise constant: zero gradient
    OpSample("floor", sg.floor, [_fractional((3, 4))], np.floor),
    OpSample("ceil", sg.ceil, [_fractional((3, 4))], np.ceil),
    OpSample("round", sg.round, [_fractional((3, 4))], np.round),
    # selection
    OpSample("where", sg.where, [_bools((3, 4)), _u((3, 4), -2, 2), _u((4,), -2, 2)], np.where),
    OpSample("where", lambda c, x: sg.where(c, x, 0.0), [_bools((2, 3)), _u((2, 3), -2, 2)],
             lambda c, x: np.where(c, x, 0.0), dynamic=(0, 1), id="where-scalar"),
    OpSample("clip", lambda x: sg.clip(x, -0.5, 0.5),
             [np.array([-1.3, -0.7, -0.3, 0.0, 0.2, 0.45, 0.8, 1.7])],
             lambda x: np.clip(x, -0.5, 0.5), id="clip-scalar-bounds"),
    OpSample("clip", sg.clip, [_u((3, 4), -2, 2), _u((4,), -1.05, -0.95), _u((3, 1), 0.95, 1.05)],
             np.clip, id="clip-value-bounds"),
    OpSample("clip", lambda x: sg.clip(x, None, 0.0), [_away_from_zero((2, 3))],
             lambda x: np.clip(x, None, 0.0), id="clip-upper-only"),
    # comparisons and logic: bool results
    OpSample("equal", sg.equal, [_eq_a, _eq_b], np.equal, grad=False),
    OpSample("not_equal", sg.not_equal, [_eq_a, _eq_b], np.not_equal, grad=False),
    OpSample("less", sg.less, [_a34, _b34], np.less, grad=False, dynamic=(0, 1)),
    OpSample("less_equal", sg.less_equal, [_eq_a, _eq_b], np.less_equal, grad=False),
    OpSample("greater", sg.greater, [_eq_a, _eq_b], np.greater, grad=False),
    OpSample("greater_equal", sg.greater_equal, [_eq_a, _eq_b], np.greater_equal, grad=False),
    OpSample("logical_and", sg.logical_and, [_bools((3, 4)), _bools((4,))], np.logical_and,
             grad=False),
    OpSample("logical_or", sg.logical_or, [_bools((3, 4)), _bools((3, 1))], np.logical_or,
             grad=False),
    OpSample("logical_not", sg.logical_not, [_bools((3, 4))], np.logical_not, grad=False,
             dynamic=(0,)),
    # dtype and constants
    OpSample("cast", lambda x: sg.cast(x, "float64"), [_u((2, 3), -2, 2)],
             lambda x: x.astype(np.float64),
             id="cast-float64"),
    OpSample("cast", lambda x: sg.cast(x, "float32"), [_u((2, 3), -2, 2)],
             lambda x: x.astype(np.float32), grad=False, id="cast-float32"),
    OpSample("cast", lambda x: x.astype("int32"), [_u((2, 3), -5, 5)],
             lambda x: x.astype(np.int32), grad=False, id="cast-int32"),
    OpSample("zeros_like", sg.zeros_like, [_u((3, 2), -1, 1)], np.zeros_like, grad=False,
             dynamic=(0,)),
    OpSample("ones_like", lambda x: sg.ones_like(x, dtype="int32"), [_u((3, 2), -1, 1)],
             lambda x: np.ones_like(x, dtype=np.int32), grad=False),
    # activations (symgrad.nn)
    OpSample("relu", activation.relu, [_away_from_zero((3, 4))], lambda x: np.maximum(x, 0),
             dynamic=(0,)),
    OpSample("gelu", activation.gelu, [_u((3, 4), -3, 3)], _gelu),
    OpSample("softplus", activation.softplus, [_u((3, 4), -5, 5)],
             lambda x: np.log1p(np.exp(x))),
]
