"""Random programs with control flow: random steps (elementwise, broadcast, reductions) inside
a scan body, the branches of a cond or a while body, with captures and gradients. The NumPy
and C backends, fused and unfused, agree with the interpreter, and so does the interpreter after
the whole pass pipeline."""
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
from tests.backends.test_numpy_random import apply_steps, random_steps

STEPS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.integers(0, 100),
                           st.integers(0, 100)), min_size=1, max_size=8)


def _squash(carry, value):
    """A Value shaped like ``carry`` made from ``carry`` and any ``value`` of the pool."""
    return carry * 0.5 + sg.tanh(sg.mean(value))


def _scan(x, b, steps, others):
    def body(carry, row):
        pool = apply_steps(steps, [carry, row, b], carry[:, None] * row[None, :])
        return _squash(carry, pool[-1]), pool[-1] * 1.0
    carry, ys = sg.scan(body, b, x, reverse=bool(len(others) % 2))
    return carry + sg.sum(ys)


def _cond(x, b, steps, others):
    def branch(chosen):
        def function(v):
            pool = apply_steps(chosen, [v, b, x[0]], x)
            return _squash(v, pool[-1])
        return function
    return sg.cond(sg.sum(x) > 0.0, branch(steps), branch(others), b * 2.0)


def _while(x, b, steps, others):
    def body(i, v):
        pool = apply_steps(steps, [v, b, sg.cast(i, "float64") * x[0]], x)
        return [i + 1, _squash(v, pool[-1])]
    _, v = sg.while_loop(lambda i, v: i < len(others), body, [sg.constant(np.int64(0)), b])
    return v


REGIONS = [_scan, _cond, _while]


def _build(kind, steps, others, dynamic, with_grad):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None if dynamic and kind != 2 else 9, 4], "float64")
        b = sg.data("b", [4], "float64")
        out = REGIONS[kind](x, b, steps, others)
        fetches = [out]
        if with_grad:
            fetches += ir_backward.grad(sg.sum(out * out), [x, b], allow_unused=True,
                                        unused="zeros")
    return prog, fetches


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2), STEPS, STEPS, st.booleans(), st.booleans(),
       st.sampled_from([True, False]))
def test_random_region_programs_match_the_interpreter(kind, steps, others, dynamic, with_grad,
                                                     fusion):
    prog, fetches = _build(kind, steps, others, dynamic, with_grad)
    prog.verify()
    rng = np.random.default_rng(len(steps))
    feeds = {"x": rng.standard_normal((9, 4)), "b": rng.standard_normal(4)}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = sg.compile(prog, fetches, backend="numpy", fusion=fusion, chunk_size=8)(**feeds)
    passed = sg.compile(prog, fetches, backend="interpreter", passes=DEFAULT_PIPELINE,
                        fusion=fusion)
    passed.program.verify()
    for e, g, p in zip(expected, got, passed(**feeds)):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(p, e, rtol=1e-9, atol=1e-12)


# --- the C backend: seeded random programs, compiled in one batch --------------------------------
def _c_cases(count=36):
    rng = random.Random(29)
    return [(rng.randint(0, 2), random_steps(rng, 8), random_steps(rng, 8), rng.random() < 0.5,
             rng.random() < 0.5, index % 2 == 0) for index in range(count)]


@functools.lru_cache(maxsize=None)
def _c_programs():
    with c_backend.deferred():
        return [(case, _build(*case[:5]), sg.compile(*_build(*case[:5]), backend="c",
                                                     fusion=case[5]))
                for case in _c_cases()]


@pytest.mark.parametrize("index", range(len(_c_cases())))
def test_random_region_programs_on_c_match_the_interpreter(index):
    case, (prog, fetches), compiled = _c_programs()[index]
    rng = np.random.default_rng(len(case[1]))
    feeds = {"x": rng.standard_normal((9, 4)), "b": rng.standard_normal(4)}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for e, g in zip(expected, compiled(**feeds)):
        assert g.shape == e.shape and g.dtype == e.dtype, case
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, err_msg=str(case))
