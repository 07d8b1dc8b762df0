"""The W1 MLP training step (784-512-512-10, tanh, softmax cross-entropy, Adam) that
``train.c`` runs from C. ``build()`` returns ``(program, [loss])``: one call is one Adam
step. Export it with::

    symgrad export examples/c_embed/model.py --target c-library -o mlp_step --name mlp_step
"""
import numpy as np

import symgrad as sg

SIZES = [784, 512, 512, 10]
ADAM = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}


def build(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", SIZES[0]], dtype)
        labels = sg.data("labels", ["batch"], "int64")
        h = x
        for i, (a, b) in enumerate(zip(SIZES, SIZES[1:])):
            w = sg.parameter(f"w{i}", [a, b], dtype,
                             init=(rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype))
            bias = sg.parameter(f"b{i}", [b], dtype, init=np.zeros(b, dtype))
            h = sg.nn.linear(h, w, bias)
            if i < len(SIZES) - 2:
                h = sg.tanh(h)
        loss = sg.nn.softmax_cross_entropy(h, labels)
        sg.optimizer.Adam(**ADAM).minimize(loss)
    return prog, [loss]
