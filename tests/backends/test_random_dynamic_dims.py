"""Random programs with a symbolic batch dim (hypothesis for NumPy, a seeded batch for C)
against the interpreter at batch sizes 1, 2 and 8 (a static dim of the programs): row and
column reductions meeting other dynamic inputs, reshape with -1, concatenation along the
dynamic axis, slicing, softmax cross-entropy, and gradients."""
import functools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import c_backend

BATCHES = (1, 2, 8)
UNARY = [sg.tanh, sg.sin, lambda v: v * v, sg.sigmoid, lambda v: sg.exp(-v * v)]
BINARY = [sg.add, sg.subtract, sg.multiply, sg.maximum]


def _matrix_steps(m, t, b, labels, kind):
    """A [batch] value from the [batch, 8] value ``m`` by step ``kind``."""
    return [
        lambda: sg.sum(m, axis=1) - t,                                 # row reduction meets t
        lambda: sg.max(m, axis=1) * t,
        lambda: sg.sum(sg.reshape(sg.reshape(m, [-1]), [-1, 8]) * b, axis=1),   # reshape -1
        lambda: sg.sum(m[:, 2:5], axis=1),                              # slicing
        lambda: sg.nn.softmax_cross_entropy(m, labels, reduction="none"),
        lambda: sg.mean(m, axis=1) + sg.sum(sg.concatenate([m, m * 0.5], axis=0) * b)
        / (1.0 + sg.sum(m * m)),                                        # concatenation
        lambda: sg.sum(m - sg.mean(m, axis=0) * b, axis=1),            # column reduction
    ][kind % 7]()


def build(steps):
    """``(program, fetches)``: a pool of [batch, 8] and [batch] Values grown by ``steps``, a
    loss over the last of each, and its gradients."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 8], "float64")
        t = sg.data("t", ["batch"], "float64")
        labels = sg.data("labels", ["batch"], "int64")
        b = sg.data("b", [8], "float64")
        matrices, vectors = [x, sg.tanh(x)], [t]
        for kind, i, j, k in steps:
            m = matrices[i % len(matrices)]
            if kind == 0:
                matrices.append(UNARY[k % len(UNARY)](m))
            elif kind == 1:
                other = matrices[j % len(matrices)] if k % 2 else b
                matrices.append(BINARY[k % len(BINARY)](m, other))
            elif kind == 2:
                vectors.append(_matrix_steps(m, t, b, labels, k))
            else:
                v = vectors[j % len(vectors)]
                matrices.append(m * sg.expand_dims(sg.tanh(v), 1))
        loss = sg.sum(matrices[-1]) * 0.1 + sg.sum(vectors[-1] * vectors[-1])
        grads = ir_backward.grad(loss, [x, t, b], allow_unused=True, unused="zeros")
    assert matrices[-1].dims == x.dims and vectors[-1].dims == t.dims
    return prog, [loss] + grads


def feeds_for(batch, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 8)), "t": rng.standard_normal(batch),
            "labels": rng.integers(0, 8, batch), "b": rng.standard_normal(8)}


def check(compiled, prog, fetches):
    oracle = sg.compile(prog, fetches, backend="interpreter")
    for batch in BATCHES:
        feeds = feeds_for(batch)
        for got, want in zip(compiled(**feeds), oracle(**feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


STEPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 50),
                           st.integers(0, 50)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS, st.booleans())
def test_random_programs_with_a_symbolic_batch_on_numpy(steps, fusion):
    prog, fetches = build(steps)
    check(sg.compile(prog, fetches, backend="numpy", fusion=fusion), prog, fetches)


def _c_cases(count=12):
    rng = random.Random(5)
    return [[(rng.randint(0, 3), rng.randint(0, 50), rng.randint(0, 50), rng.randint(0, 50))
             for _ in range(rng.randint(2, 8))] for _ in range(count)]


@functools.lru_cache(maxsize=None)
def _c_programs():
    with c_backend.deferred():
        return [(build(steps), sg.compile(*build(steps), backend="c")) for steps in _c_cases()]


@pytest.mark.parametrize("index", range(len(_c_cases())))
def test_random_programs_with_a_symbolic_batch_on_c(index):
    (prog, fetches), compiled = _c_programs()[index]
    check(compiled, prog, fetches)
