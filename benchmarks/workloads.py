"""The programs the CPU and GPU benchmarks both time (built once here, timed there)."""
from __future__ import annotations

import numpy as np

import symgrad as sg
from symgrad import ir_backward

MLP_SIZES = [784, 512, 512, 10]


def mlp_init(seed=0):
    """``[(w, b), ...]`` float32 parameters of the 784-512-512-10 MLP."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
            for a, b in zip(MLP_SIZES, MLP_SIZES[1:])]


def _mlp(init):
    """The W1 MLP's forward and loss: ``(program, params, loss)``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, MLP_SIZES[0]], "float32")
        labels = sg.data("labels", [None], "int64")
        params, h = [], x
        for i, (w, b) in enumerate(init):
            wv = sg.parameter(f"w{i}", w.shape, "float32", init=w)
            bv = sg.parameter(f"b{i}", b.shape, "float32", init=b)
            params += [wv, bv]
            h = sg.nn.linear(h, wv, bv)
            if i < len(init) - 1:
                h = sg.tanh(h)
        loss = sg.nn.softmax_cross_entropy(h, labels)
    return prog, params, loss


def mlp_program(init):
    """W1: dense layers with tanh, softmax cross-entropy on integer labels; fetches the loss
    and the gradients of every weight and bias."""
    prog, params, loss = _mlp(init)
    with sg.program_guard(prog):
        grads = ir_backward.grad(loss, params)
    return prog, [loss] + list(grads)


ADAM = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}


def mlp_adam_program(init):
    """W7: the W1 MLP with ``sg.optimizer.Adam(**ADAM).minimize(loss)``: one call is one
    training step (forward, backward, update of the state); fetches the loss."""
    prog, _, loss = _mlp(init)
    sg.optimizer.Adam(**ADAM).minimize(loss)
    return prog, [loss]


def w2_program(n=None):
    """W2: ``sum(tanh(x*1.5+0.5)*sin(x) + exp(-x*x)*0.3 + log1p(x*x))`` over float32 ``x`` of
    ``n`` elements (None: known at run time); returns ``(program, loss, grad_x)``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [n], "float32")
        loss = sg.sum(sg.tanh(x * 1.5 + 0.5) * sg.sin(x) + sg.exp(-x * x) * 0.3
                      + sg.log1p(x * x))
        gx, = ir_backward.grad(loss, [x])
    return prog, loss, gx


RNN_BATCH, RNN_HIDDEN, RNN_INPUT = 32, 128, 64


def rnn_init(seed=0):
    """``(W [H, H], U [I, H], b [H])`` float32 weights of the W6 tanh RNN."""
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / np.sqrt(RNN_HIDDEN)).astype("float32"),
            (rng.standard_normal((RNN_INPUT, RNN_HIDDEN)) / np.sqrt(RNN_INPUT)).astype("float32"),
            np.zeros(RNN_HIDDEN, "float32"))


def rnn_program(steps, init, unrolled=False):
    """W6: ``h_t = tanh(h_{t-1} W + x_t U + b)`` over ``steps`` inputs ``xs`` [T, batch,
    input] from ``h0`` [batch, hidden], loss = mean of the final state squared; fetches the
    loss and the gradients of W, U and b. The recurrence is an ``sg.scan``, or (``unrolled``)
    a Python loop that copies the step ``steps`` times."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [steps, RNN_BATCH, RNN_INPUT], "float32")
        h0 = sg.data("h0", [RNN_BATCH, RNN_HIDDEN], "float32")
        W, U, b = (sg.parameter(name, a.shape, "float32", init=a)
                   for name, a in zip("WUb", init))

        def cell(h, x):
            return sg.tanh(h @ W + x @ U + b)

        if unrolled:
            h = h0
            for t in range(steps):
                h = cell(h, xs[t])
        else:
            h, _ = sg.scan(lambda h, x: (cell(h, x), None), h0, xs)
        loss = sg.mean(h * h)
        grads = ir_backward.grad(loss, [W, U, b])
    return prog, [loss] + list(grads)


def rnn_by_hand(xs, h0, W, U, b):
    """Hand-written NumPy backpropagation through time for W6: the forward keeps every state
    in one [T + 1, batch, hidden] array; returns ``(loss, dW, dU, db)``."""
    steps = xs.shape[0]
    hs = np.empty((steps + 1,) + h0.shape, h0.dtype)
    hs[0] = h0
    for t in range(steps):
        hs[t + 1] = np.tanh(hs[t] @ W + xs[t] @ U + b)
    h = hs[-1]
    loss = np.mean(h * h)
    g = (np.float32(2.0) / h.size) * h
    dW, dU, db = np.zeros_like(W), np.zeros_like(U), np.zeros_like(b)
    for t in range(steps - 1, -1, -1):
        g = g * (1 - hs[t + 1] * hs[t + 1])
        dW += hs[t].T @ g
        dU += xs[t].T @ g
        db += g.sum(0)
        g = g @ W.T
    return loss, dW, dU, db


W9_SIZES = [784, 128, 10]


def w9_init(seed=0):
    """``[(w, b), ...]`` float32 parameters of W9's 784-128-10 MLP."""
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
            for a, b in zip(W9_SIZES, W9_SIZES[1:])]


def w9_program(init, batch, per_example=True):
    """W9: a tanh MLP with softmax cross-entropy. ``per_example``: the gradients of every
    example's own loss, ``sg.vmap`` of ``grad`` (each gradient with a leading batch axis);
    else the gradient of the mean loss over the batch (the plain program, to compare compile
    times). Fetches the gradients of every weight and bias."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, W9_SIZES[0]], "float32")
        labels = sg.data("labels", [batch], "int64")
        params = []
        for i, (w, b) in enumerate(init):
            params += [sg.parameter(f"w{i}", w.shape, "float32", init=w),
                       sg.parameter(f"b{i}", b.shape, "float32", init=b)]

        def loss(inputs, classes):
            h = inputs
            for i in range(len(init)):
                h = sg.nn.linear(h, params[2 * i], params[2 * i + 1])
                if i < len(init) - 1:
                    h = sg.tanh(h)
            return sg.nn.softmax_cross_entropy(h, classes)

        if per_example:
            grads = sg.vmap(lambda xi, li: ir_backward.grad(loss(xi[None], li[None]), params))(
                x, labels)
        else:
            grads = ir_backward.grad(loss(x, labels), params)
    return prog, list(grads)
