"""Random programs (elementwise, broadcast, reduction ops; fetches including gradients):
the NumPy and C backends, fused and unfused, agree with the interpreter."""
import functools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import c_backend
from symgrad.passes import DEFAULT_PIPELINE

UNARY = [sg.tanh, sg.sin, sg.cos, sg.negative, lambda v: sg.exp(-v * v), sg.sigmoid,
         lambda v: sg.log1p(v * v), sg.abs, sg.square]
BINARY = [sg.add, sg.subtract, sg.multiply, lambda a, b: a / (1.0 + b * b), sg.maximum,
          lambda a, b: sg.where(a > b, a, b * 0.5)]
REDUCE = [lambda v: sg.sum(v, axis=0, keepdims=True), lambda v: sg.mean(v, axis=1, keepdims=True),
          lambda v: sg.max(v, axis=1, keepdims=True), lambda v: sg.sum(v, axis=(0, 1), keepdims=True)]


@st.composite
def programs(draw):
    steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.integers(0, 100),
                                    st.integers(0, 100)), min_size=1, max_size=14))
    fetch_picks = draw(st.lists(st.integers(0, 100), min_size=1, max_size=3))
    with_grad = draw(st.booleans())
    dynamic = draw(st.booleans())
    return steps, fetch_picks, with_grad, dynamic


def apply_steps(steps, pool, full):
    """Append to ``pool`` one Value per random step (unary, binary or reduction of earlier pool
    Values); a reduction of a 1-d Value first adds ``full`` to make it 2-d."""
    for kind, i, j, k in steps:
        a = pool[i % len(pool)]
        if kind == 0:
            pool.append(UNARY[k % len(UNARY)](a))
        elif kind == 1:
            pool.append(BINARY[k % len(BINARY)](a, pool[j % len(pool)]))
        else:
            pool.append(REDUCE[k % len(REDUCE)](a if a.ndim == 2 else a + full))
    return pool


def _build(steps, fetch_picks, with_grad, dynamic):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None if dynamic else 9, 4], "float64")
        b = sg.data("b", [4], "float64")
        pool = apply_steps(steps, [x, b, x * 0.5], x)
        fetches = [pool[3 + p % (len(pool) - 3)] for p in fetch_picks] if len(pool) > 3 else [pool[2]]
        if with_grad:
            loss = sg.sum(fetches[0])
            fetches += ir_backward.grad(loss, [x, b], allow_unused=True, unused="zeros")
    return prog, fetches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([True, False]), st.sampled_from([8, 65536]))
def test_random_programs_match_the_interpreter(case, fusion, chunk):
    prog, fetches = _build(*case)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((9, 4)), "b": rng.standard_normal(4)}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = sg.compile(prog, fetches, backend="numpy", fusion=fusion, chunk_size=chunk)(**feeds)
    passed = sg.compile(prog, fetches, backend="interpreter", passes=DEFAULT_PIPELINE,
                        fusion=fusion)(**feeds)
    for e, g, p in zip(expected, got, passed):
        np.testing.assert_allclose(p, e, rtol=1e-9, atol=1e-12)
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


# --- the C backend: seeded random programs, compiled in one batch --------------------------------
def random_steps(rng, max_size):
    """Steps as the ``programs`` strategy draws them, from a seeded ``random.Random``."""
    return [(rng.randint(0, 2), rng.randint(0, 100), rng.randint(0, 100), rng.randint(0, 100))
            for _ in range(rng.randint(1, max_size))]


def _c_cases(count=48):
    rng = random.Random(17)
    cases = []
    for index in range(count):
        case = (random_steps(rng, 14), [rng.randint(0, 100) for _ in range(rng.randint(1, 3))],
                rng.random() < 0.5, rng.random() < 0.5)
        cases.append((case, index % 2 == 0))
    return cases


@functools.lru_cache(maxsize=None)
def _c_programs():
    with c_backend.deferred():
        return [(case, _build(*case), fusion,
                 sg.compile(*_build(*case), backend="c", fusion=fusion))
                for case, fusion in _c_cases()]


@pytest.mark.parametrize("index", range(len(_c_cases())))
def test_random_programs_on_c_match_the_interpreter(index):
    case, (prog, fetches), fusion, compiled = _c_programs()[index]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((9, 4)), "b": rng.standard_normal(4)}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for e, g in zip(expected, compiled(**feeds)):
        assert g.shape == e.shape and g.dtype == e.dtype, case
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, err_msg=str(case))
