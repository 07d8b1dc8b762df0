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


CNN_BATCH = 32


def cnn_init(seed=0):
    """``{name: array}`` float32 parameters of the W8 CNN: conv3x3 3->16 (``w1``, ``b1``),
    conv3x3 16->32 (``w2``, ``b2``), linear 2048->10 (``wd`` [2048, 10], ``bd``)."""
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((16, 3, 3, 3)) * 0.2).astype("float32"),
            "b1": np.zeros(16, "float32"),
            "w2": (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype("float32"),
            "b2": np.zeros(32, "float32"),
            "wd": (rng.standard_normal((2048, 10)) * 0.02).astype("float32"),
            "bd": np.zeros(10, "float32")}


def cnn_data(batch=CNN_BATCH, seed=1):
    """``(x [batch, 3, 32, 32] float32, labels [batch] int64)``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 3, 32, 32)).astype("float32"),
            rng.integers(0, 10, batch))


def cnn_loss(x, labels, p):
    """The W8 CNN's mean softmax cross-entropy: conv3x3 (padding 1) -> relu -> maxpool2 ->
    conv3x3 -> relu -> maxpool2 -> linear; ``p``: the parameters as Values."""
    nn = sg.nn
    h = nn.max_pool2d(nn.relu(nn.conv2d(x, p["w1"], p["b1"], padding=1)), 2, 2, 0)
    h = nn.max_pool2d(nn.relu(nn.conv2d(h, p["w2"], p["b2"], padding=1)), 2, 2, 0)
    logits = sg.reshape(h, [-1, 2048]) @ p["wd"] + p["bd"]
    return sg.mean(nn.softmax_cross_entropy(logits, labels))


def cnn_adam_program(init):
    """W8: the CNN with ``sg.optimizer.Adam(**ADAM).minimize(loss)`` (the parameters and the
    moments are program state; the batch dim is unknown when it is built): one call is one
    training step; fetches the loss."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 32, 32], "float32")
        labels = sg.data("labels", [None], "int64")
        p = {k: sg.parameter(k, v.shape, "float32", init=v) for k, v in init.items()}
        loss = cnn_loss(x, labels, p)
    sg.optimizer.Adam(**ADAM).minimize(loss)
    return prog, [loss]


def _im2col3x3(x):
    """``[N * H * W, C * 9]`` columns of 3x3 windows (padding 1) over ``x`` [N, C, H, W]
    (one strided view of the padded input, copied once by the reshape)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    s = padded.strides
    view = np.lib.stride_tricks.as_strided(padded, (n, h, w, c, 3, 3),
                                           (s[0], s[2], s[3], s[1], s[2], s[3]))
    return view.reshape(n * h * w, c * 9)


def _col2im3x3(cols, shape):
    """The adjoint of :func:`_im2col3x3`: ``cols`` [N * H * W, C * 9] summed into [N, C, H, W]."""
    n, c, h, w = shape
    cols = cols.reshape(n, h, w, c, 3, 3)
    padded = np.zeros((n, c, h + 2, w + 2), cols.dtype)
    for i in range(3):
        for j in range(3):
            padded[:, :, i:i + h, j:j + w] += cols[..., i, j].transpose(0, 3, 1, 2)
    return padded[:, :, 1:-1, 1:-1]


def _pool2(x):
    """2x2 max pooling of ``x`` [N, C, H, W]: the maxima and where they are (ties all get the
    gradient, as the pooling's reference)."""
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2)
    top = windows.max(axis=(3, 5))
    mask = windows == top[:, :, :, None, :, None]
    return top, mask / mask.sum(axis=(3, 5), keepdims=True, dtype=x.dtype)


def cnn_by_hand(p, x, labels):
    """Hand-written NumPy forward and backward of the W8 CNN (im2col through one strided view
    and one matmul per convolution); returns ``(loss, {name: gradient})``."""
    n = len(x)
    cols1 = _im2col3x3(x)
    a1 = (cols1 @ p["w1"].reshape(16, -1).T + p["b1"]).reshape(n, 32, 32, 16).transpose(0, 3, 1, 2)
    p1, share1 = _pool2(np.maximum(a1, 0))
    cols2 = _im2col3x3(p1)
    a2 = (cols2 @ p["w2"].reshape(32, -1).T + p["b2"]).reshape(n, 16, 16, 32).transpose(0, 3, 1, 2)
    p2, share2 = _pool2(np.maximum(a2, 0))
    features = p2.reshape(n, -1)
    z = features @ p["wd"] + p["bd"]
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    total = e.sum(1, keepdims=True)
    rows = np.arange(n)
    loss = np.mean(np.log(total[:, 0]) - z[rows, labels])
    dz = e / total
    dz[rows, labels] -= 1
    dz /= n
    grads = {"wd": features.T @ dz, "bd": dz.sum(0)}
    g = (dz @ p["wd"].T).reshape(p2.shape)
    g = (share2 * g[:, :, :, None, :, None]).reshape(a2.shape) * (a2 > 0)
    g2 = g.transpose(0, 2, 3, 1).reshape(-1, 32)
    grads["w2"], grads["b2"] = (g2.T @ cols2).reshape(32, 16, 3, 3), g2.sum(0)
    g = _col2im3x3(g2 @ p["w2"].reshape(32, -1), p1.shape)
    g = (share1 * g[:, :, :, None, :, None]).reshape(a1.shape) * (a1 > 0)
    g1 = g.transpose(0, 2, 3, 1).reshape(-1, 16)
    grads["w1"], grads["b1"] = (g1.T @ cols1).reshape(16, 3, 3, 3), g1.sum(0)
    return loss, grads


def w10_program(width=16):
    """W10's program: the small-body tanh recurrence over xs [T, width] (T known at run
    time), loss = sum(h_T ** 2); fetches the loss and the gradients of ``w`` and ``h0``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, width], "float64")
        h0 = sg.data("h0", [width], "float64")
        w = sg.data("w", [width], "float64")
        h, _ = sg.scan(lambda h, x: (sg.tanh(h * w + x), None), h0, xs)
        loss = sg.sum(h * h)
        fetches = [loss, *ir_backward.grad(loss, [w, h0])]
    return prog, fetches
