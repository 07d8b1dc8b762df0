"""Higher derivatives through a checkpointed loop stay bit-identical to ``checkpoint=None``'s
when the program holding the first derivative is copied before the next ``grad``: cloned
(``Program.clone``), saved and loaded (``ir.serialize``), or built under ``vmap``. What makes
them so (a loop's store-all twin, ``Operation.twin_of``; the segments' ``ys`` summed on the
stacks, ``Operation.passes_cotangents``) is part of the IR, which every copy carries."""
import json

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ir.serialize import fetches_from_json, program_from_json, program_to_json

RNG = np.random.default_rng(11)
T = 7
FEEDS = {"xs": RNG.normal(size=(T, 2, 3)), "w": RNG.normal(size=(3, 3)) * 0.5,
         "h0": RNG.normal(size=(2, 3))}


def _step(w):
    def step(h, x):     # the backward reads exp's result, a y: its cotangents meet on the stack
        return sg.tanh(h @ w) * sg.exp(x), sg.exp(x * h)
    return step


def _first(policy):
    """A checkpointed scan and its first derivatives (``create_graph=True``)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [T, 2, 3], "float64")
        w = sg.data("w", [3, 3], "float64")
        h0 = sg.data("h0", [2, 3], "float64")
        h, ys = sg.scan(_step(w), h0, xs, checkpoint=policy)
        loss = sg.sum(h * h) + sg.sum(ys * ys)
        wrt = [w, h0, xs]
        grads = ir_backward.grad(loss, wrt, create_graph=True)
    return prog, wrt, grads


def _higher(prog, wrt, grads, order):
    with sg.program_guard(prog):
        fetches = list(grads)
        for level in range(2, order + 1):
            norm = sum(sg.sum(g * g) for g in grads)
            grads = ir_backward.grad(norm, wrt, create_graph=level < order)
            fetches += grads
    return sg.compile(prog, fetches, backend="numpy")(**FEEDS)


def _cloned(prog, values):
    copy, value_map = prog.clone()
    return copy, [value_map[v] for v in values]


def _loaded(prog, values):
    arrays = {}

    def sink(array):
        arrays[str(len(arrays))] = array
        return str(len(arrays) - 1)
    document = json.loads(json.dumps(program_to_json(prog, sink, fetches=values)))
    copy = program_from_json(document, arrays.__getitem__, sg.ops.op_table())
    return copy, fetches_from_json(document, copy)


@pytest.mark.parametrize("copy", [_cloned, _loaded], ids=["clone", "save_load"])
@pytest.mark.parametrize("policy", [3, ("binomial", 2)])
def test_derivatives_of_a_copied_program_are_bit_identical(policy, copy):
    results = []
    for p in (None, policy):
        prog, wrt, grads = _first(p)
        prog, values = copy(prog, wrt + grads)
        results.append(_higher(prog, values[:3], values[3:], order=3))
    for index, (a, b) in enumerate(zip(*results)):
        np.testing.assert_array_equal(b, a, err_msg=f"fetch {index}")


@pytest.mark.parametrize("policy", [3, ("binomial", 2)])
def test_derivatives_of_a_vmapped_first_derivative_are_bit_identical(policy):
    """``vmap`` batches the checkpointed backward and its twin alike (per-example gradients
    of a checkpointed loop), then a second ``grad`` differentiates the batched twin."""
    from symgrad.autodiff.vmap import vmap

    def build(p):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = sg.data("xs", [T, 2, 3], "float64")
            w = sg.data("w", [3, 3], "float64")
            h0 = sg.data("h0", [2, 3], "float64")

            def per_example(h, x):      # one row of h0, and of each step's xs
                last, ys = sg.scan(lambda c, xt: (sg.tanh(c @ w) * sg.exp(xt),
                                                  sg.exp(xt * c)), h, x, checkpoint=p)
                return ir_backward.grad(sg.sum(last * last) + sg.sum(ys * ys), [w],
                                        create_graph=True)[0]
            g = vmap(per_example, in_axes=(0, 1))(h0, xs)
            (gg,) = ir_backward.grad(sg.sum(g * g), [w])
        return sg.compile(prog, [g, gg], backend="numpy")(**FEEDS)
    plain, got = build(None), build(policy)
    for a, b in zip(plain, got):
        np.testing.assert_array_equal(b, a)
