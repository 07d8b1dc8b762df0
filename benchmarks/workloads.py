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


def mlp_program(init):
    """W1: dense layers with tanh, softmax cross-entropy on integer labels; fetches the loss
    and the gradients of every weight and bias."""
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
        grads = ir_backward.grad(loss, params)
    return prog, [loss] + list(grads)


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
