"""OpSamples of the control-flow ops ``cond``, ``while_loop`` and ``scan`` (``fori_loop``
builds one of the last two); see tests/ops/samples.py.

Each sample's function reads a Value of the enclosing program (a capture) besides its
operands, so gradients to captures are checked too. Inputs are float64 and keep the branch
and the trip count away from their switching points (central differences must not cross
them).
"""
import numpy as np

import symgrad as sg

from .samples import OpSample

_R = np.random.default_rng(31)


def _u(*shape, low=-1.0, high=1.0):
    return _R.uniform(low, high, size=shape)


# --- cond ------------------------------------------------------------------------------------------
def _cond(x, w):
    return sg.cond(sg.sum(x) > 0.0, lambda a: sg.sin(a) * w, lambda a: a * a - w, x)


def _cond_np(x, w):
    return np.sin(x) * w if x.sum() > 0 else x * x - w


def _cond_pair(x, w):
    """Two outputs (a tuple), one branch passing an operand through."""
    return sg.cond(sg.sum(w) < 0.0, lambda a, b: (a * b, a), lambda a, b: (sg.exp(a), a - b * b),
                   x, w)


def _cond_pair_np(x, w):
    return (x * w, x) if w.sum() < 0 else (np.exp(x), x - w * w)


# --- scan ----------------------------------------------------------------------------------------
def _rnn(xs, w, h0):
    def step(h, x):
        h = sg.tanh(h @ w + x)
        return h, h * 2.0
    return sg.scan(step, h0, xs)


def _rnn_np(xs, w, h0):
    ys = []
    h = h0
    for x in xs:
        h = np.tanh(h @ w + x)
        ys.append(h * 2.0)
    return h, np.stack(ys)


def _pair_reverse(xs, c):
    """Two carries (a tuple), reverse order, a per-step output."""
    def step(carry, x):
        a, b = carry
        a = sg.sin(a * x + b)
        return (a, b + a * c), a * b
    (a, b), ys = sg.scan(step, (sg.zeros([2], "float64"), sg.ones([2], "float64")), xs,
                         reverse=True)
    return a, b, ys


def _pair_reverse_np(xs, c):
    a, b = np.zeros(2), np.ones(2)
    ys = [None] * len(xs)
    for t in range(len(xs) - 1, -1, -1):
        a = np.sin(a * xs[t] + b)
        b = b + a * c
        ys[t] = a * b
    return a, b, np.stack(ys)


def _nested(xs, m):
    def outer(c, row):
        def inner(d, e):
            return d * sg.cos(e) + m, None
        d, _ = sg.scan(inner, c, row)
        return d, sg.sum(d)
    return sg.scan(outer, sg.ones([], "float64") * 0.5, xs)


def _nested_np(xs, m):
    c = 0.5
    ys = []
    for row in xs:
        for e in row:
            c = c * np.cos(e) + m
        ys.append(c)
    return np.float64(c), np.array(ys)


def _fori(x, w):
    return sg.fori_loop(0, 3, lambda i, v: sg.sin(v * w) + sg.cast(i, v.dtype), x)


def _fori_np(x, w):
    for i in range(3):
        x = np.sin(x * w) + i
    return x


# --- while_loop --------------------------------------------------------------------------------
def _while(x, w):
    def body(n, v):
        return [n * 1.5 + 0.25, sg.tanh(v * w) + v]
    _, v = sg.while_loop(lambda n, v: n < 3.0, body, [sg.constant(0.0, "float64"), x])
    return v


def _while_np(x, w):
    n = 0.0
    while n < 3.0:
        n, x = n * 1.5 + 0.25, np.tanh(x * w) + x
    return x


def _while_data(x):
    """Trip count decided by the data (6 steps for these inputs)."""
    _, v = sg.while_loop(lambda k, v: sg.sum(v) < 8.0,
                         lambda k, v: [k + 1, v * 1.25 + 0.1], [sg.constant(np.int64(0)), x])
    return v


def _while_data_np(x):
    while x.sum() < 8.0:
        x = x * 1.25 + 0.1
    return x


def _fori_dynamic(x, n):
    return sg.fori_loop(sg.constant(np.int64(1)), sg.cast(n, "int64"),
                        lambda i, v: v * sg.cos(v), x)


def _fori_dynamic_np(x, n):
    for _ in range(1, int(n)):
        x = x * np.cos(x)
    return x


# --- x ** k with k a block argument (the VJP of power looks for a constant exponent) -----------
def _power_carry(x, k):
    """The exponent a carry."""
    (v, _), _ = sg.scan(lambda c, _: ((c[0] ** c[1], c[1] * 0.75), None), (x, k), length=2)
    return v


def _power_carry_np(x, k):
    for _ in range(2):
        x, k = x ** k, k * 0.75
    return x


def _power_slice(x, ks):
    """The exponent a scanned slice."""
    return sg.scan(lambda c, k: (c ** k, c * k), x, ks)


def _power_slice_np(x, ks):
    ys = []
    for k in ks:
        ys.append(x * k)
        x = x ** k
    return x, np.stack(ys)


def _power_while(x, k):
    """The exponent a while loop variable."""
    _, v, _ = sg.while_loop(lambda i, v, e: i < 2, lambda i, v, e: [i + 1, v ** e, e + 0.5],
                            [sg.constant(np.int64(0)), x, k])
    return v


def _power_while_np(x, k):
    for _ in range(2):
        x, k = x ** k, k + 0.5
    return x


# --- loops that run no step: gradients of what the body reads are zeros ------------------------
def _no_step_scan(x, w):
    return sg.scan(lambda c, _: (c * w, sg.sin(c) * w), x, length=0)


def _no_step_scan_np(x, w):
    return x, np.empty((0,) + x.shape)


def _no_step_scan_xs(x, xs):
    return sg.scan(lambda c, e: (c * e, c + e), x, xs)


def _no_step_scan_xs_np(x, xs):
    return x, np.empty((0,) + x.shape)


def _no_step_fori(x, w):
    return sg.fori_loop(5, 2, lambda i, v: v * w, x)


def _no_step_fori_dynamic(x, w):
    return sg.fori_loop(sg.constant(np.int64(5)), sg.constant(np.int64(2)),
                        lambda i, v: v * w, x)


def _no_step_while(x, w):
    return sg.while_loop(lambda v: sg.sum(v) > 100.0, lambda v: [v * w], [x])[0]


def _binomial_gradient(xs, w, h0):
    """The gradient of an RNN scanned with ``checkpoint=("binomial", 2)``, built with
    ``create_graph=True``: a ``reverse_loop`` op, whose own VJP the derivative checks run."""
    def step(h, x):
        h = sg.tanh(h @ w + x)
        return h, h * 2.0
    h, ys = sg.scan(step, h0, xs, checkpoint=("binomial", 2))
    loss = sg.sum(h * h) + sg.sum(sg.sin(ys))
    return tuple(sg.ir_backward.grad(loss, [w, h0], create_graph=True))


def _binomial_gradient_np(xs, w, h0):
    hs, h = [h0], h0
    for x in xs:
        h = np.tanh(h @ w + x)
        hs.append(h)
    dh, dw = 2.0 * h, np.zeros_like(w)
    for t in range(len(xs), 0, -1):
        dz = (dh + 2.0 * np.cos(2.0 * hs[t])) * (1.0 - hs[t] ** 2)
        dw += np.outer(hs[t - 1], dz)
        dh = w @ dz
    return dw, dh


SAMPLES = [
    OpSample("cond", _cond, [_u(3, low=0.1), _u(3)], _cond_np, id="cond-then"),
    OpSample("cond", _cond, [_u(3, low=-1.0, high=-0.1), _u(3)], _cond_np, id="cond-else"),
    OpSample("cond", _cond_pair, [_u(2, 3), _u(3, low=-1.0, high=-0.1)], _cond_pair_np,
             id="cond-pair"),
    OpSample("scan", _rnn, [_u(5, 3), _u(3, 3) * 0.5, _u(3)], _rnn_np, id="scan-rnn"),
    OpSample("scan", _rnn, [_u(4, 3), _u(3, 3) * 0.5, _u(3)], _rnn_np, dynamic=(0,),
             id="scan-rnn-dynamic"),
    OpSample("scan", _pair_reverse, [_u(4, 2), _u(2)], _pair_reverse_np, id="scan-reverse"),
    OpSample("scan", _nested, [_u(3, 2), _u()], _nested_np, id="scan-nested"),
    OpSample("scan", _fori, [_u(3), _u(3)], _fori_np, id="scan-fori"),
    OpSample("while_loop", _while, [_u(3), _u(3)], _while_np, id="while"),
    OpSample("while_loop", _while_data, [_u(3, low=0.2, high=0.6)], _while_data_np,
             id="while-data"),
    OpSample("while_loop", _fori_dynamic, [_u(2), np.array(4.5)], _fori_dynamic_np,
             id="while-fori"),
    OpSample("scan", _power_carry, [_u(3, low=0.5, high=1.5), np.array(1.3)], _power_carry_np,
             id="scan-power-carry"),
    OpSample("scan", _power_slice, [_u(3, low=0.5, high=1.5), _u(2, low=0.5, high=2.0)],
             _power_slice_np, id="scan-power-slice"),
    OpSample("while_loop", _power_while, [_u(3, low=0.5, high=1.5), np.array(0.8)],
             _power_while_np, id="while-power-var"),
    OpSample("scan", _no_step_scan, [_u(3), _u(3)], _no_step_scan_np, id="scan-no-step"),
    OpSample("scan", _no_step_scan_xs, [_u(3), _u(0, 3)], _no_step_scan_xs_np,
             id="scan-no-step-xs"),
    OpSample("scan", _no_step_scan_xs, [_u(3), _u(0, 3)], _no_step_scan_xs_np, dynamic=(1,),
             id="scan-no-step-xs-dynamic"),
    OpSample("scan", _no_step_fori, [_u(3), _u(3)], lambda x, w: x, id="scan-fori-no-step"),
    OpSample("while_loop", _no_step_fori_dynamic, [_u(3), _u(3)], lambda x, w: x,
             id="while-fori-no-step"),
    OpSample("while_loop", _no_step_while, [_u(3), _u(3)], lambda x, w: x, id="while-no-step"),
    OpSample("reverse_loop", _binomial_gradient, [_u(5, 3), _u(3, 3) * 0.5, _u(3)],
             _binomial_gradient_np, grad2=False, id="reverse-loop-binomial"),
]
