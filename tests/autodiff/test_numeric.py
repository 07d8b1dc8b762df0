"""Every op's VJP, and the VJP of its VJP, against float64 central differences.

Iterates over ``tests.ops.samples.ALL_SAMPLES``: for each sample with ``grad=True`` the first
derivative of ``sum_j <out_j, r_j>`` (random ``r_j``) is compared with central differences of
the forward program; for ``grad2=True`` the derivative of ``sum_i <g_i, s_i>`` (``g`` built with
``create_graph=True``, random ``s_i``) is compared with central differences of ``g``. The same
checks run with each sample built inside a loop body, where its inputs are block arguments.
"""
import dataclasses

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ops import SOURCE, REGISTRY
from tests.ops.samples import ALL_SAMPLES

EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-6

# Registered ops with a VJP that need no gradient sample, and why.
EXEMPT = {
    "zeros_like": "its result does not depend on the input's values: the VJP returns None",
    "ones_like": "its result does not depend on the input's values: the VJP returns None",
}

GRAD_SAMPLES = [s for s in ALL_SAMPLES if s.grad]
GRAD2_SAMPLES = [s for s in GRAD_SAMPLES if s.grad2]


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class Case:
    """A sample's program: float64 inputs, its outputs, the float inputs to differentiate."""

    def __init__(self, sample, seed=0):
        self.sample = sample
        self.rng = np.random.default_rng(seed)
        self.prog = sg.Program()
        with sg.program_guard(self.prog):
            self.xs = sample.declare(sg, dtype="float64")
            outs = _as_tuple(sample.build(*self.xs))
        self.feeds = sample.feeds(dtype="float64")
        self.diff = [i for i, x in enumerate(self.xs) if x.dtype.kind == "f"]
        self.outs = [y for y in outs if y.dtype.kind == "f"]
        values = self.run(self.outs, self.feeds)
        with sg.program_guard(self.prog):
            self.r = [self.rng.standard_normal(v.shape) for v in values]
            self.seeds = [sg.constant(r) for r in self.r]

    def run(self, fetches, feeds):
        return sg.compile(self.prog, fetches, backend="interpreter")(**feeds)

    def central_differences(self, fetches, weights):
        """d/dx_i of sum_k <fetch_k(x), weights_k>, by central differences, for each i."""
        fn = sg.compile(self.prog, fetches, backend="interpreter")

        def f(feeds):
            return sum(float(np.sum(v * w)) for v, w in zip(fn(**feeds), weights))

        grads = []
        for i in self.diff:
            name = f"in{i}"
            base = self.feeds[name]
            g = np.zeros(base.shape)
            for index in np.ndindex(base.shape):
                plus, minus = base.copy(), base.copy()
                plus[index] += EPS
                minus[index] -= EPS
                g[index] = (f({**self.feeds, name: plus}) - f({**self.feeds, name: minus})) / (2 * EPS)
            grads.append(g)
        return grads


def _check(analytic, numeric, sample, what):
    for i, (a, n) in enumerate(zip(analytic, numeric)):
        scale = max(1.0, float(np.max(np.abs(n), initial=0.0)))
        np.testing.assert_allclose(a, n, rtol=RTOL, atol=ATOL * scale,
                                   err_msg=f"{sample.id}: {what} of input {i}")


def _first_derivative(sample):
    case = Case(sample)
    if not case.outs or not case.diff:
        pytest.skip("no float output or input")
    xs = [case.xs[i] for i in case.diff]
    grads = ir_backward.grad(case.outs, xs, grad_outputs=case.seeds,
                             allow_unused=True, unused="zeros")
    analytic = case.run(grads, case.feeds)
    numeric = case.central_differences(case.outs, case.r)
    _check(analytic, numeric, sample, "first derivative")


def _second_derivative(sample):
    case = Case(sample, seed=1)
    if not case.outs or not case.diff:
        pytest.skip("no float output or input")
    xs = [case.xs[i] for i in case.diff]
    grads = ir_backward.grad(case.outs, xs, grad_outputs=case.seeds, create_graph=True,
                             allow_unused=True, unused="zeros")
    first = case.run(grads, case.feeds)
    with sg.program_guard(case.prog):
        s = [case.rng.standard_normal(g.shape) for g in first]
        s_values = [sg.constant(v) for v in s]
    second = ir_backward.grad(grads, xs, grad_outputs=s_values, allow_unused=True,
                              unused="zeros")
    analytic = case.run(second, case.feeds)
    numeric = case.central_differences(grads, s)
    _check(analytic, numeric, sample, "second derivative")


@pytest.mark.parametrize("sample", GRAD_SAMPLES, ids=[s.id for s in GRAD_SAMPLES])
def test_first_derivative(sample):
    _first_derivative(sample)


@pytest.mark.parametrize("sample", GRAD2_SAMPLES, ids=[s.id for s in GRAD2_SAMPLES])
def test_second_derivative(sample):
    _second_derivative(sample)


def test_every_op_with_a_vjp_has_a_gradient_sample():
    covered = {s.op for s in GRAD_SAMPLES}
    missing = sorted(
        name for name, opdef in REGISTRY.items()
        if opdef.vjp is not None and opdef.category != SOURCE and not opdef.user_defined
        and name not in EXEMPT and name not in covered)
    assert not missing, f"ops with a VJP but no OpSample with grad=True: {missing}"


def _in_a_loop_body(sample):
    """``sample`` with its ops built in the body of a one-step ``scan`` whose carries are the
    inputs, so that every input its ops (and their VJPs) read is a block argument, which has
    no producing op; its outputs are the scan's stacked outputs."""
    def build(*xs):
        def body(carry, _):
            return carry, sample.build(*carry)
        return sg.scan(body, tuple(xs), length=1)[1]
    return dataclasses.replace(sample, build=build)


# The samples that can be built in a loop body: not those making parameters (which live in the
# global block), nor random ones (which need an explicit counter there)
IN_LOOP_SAMPLES = [s for s in GRAD_SAMPLES if s.op != "assign" and s.step is None
                   and not s.program("float64")[0].parameters]
# Second derivatives: the samples with an unknown dim (the seeds the test gives are arrays of
# known shape, which the loop's backward must fit to its carries' unknown dims)
IN_LOOP_GRAD2_SAMPLES = [s for s in IN_LOOP_SAMPLES if s.grad2 and s.dynamic]


@pytest.mark.parametrize("sample", IN_LOOP_SAMPLES, ids=[s.id for s in IN_LOOP_SAMPLES])
def test_first_derivative_with_block_arguments(sample):
    """Every VJP rule, and every helper it calls, works on block arguments (loop carries,
    scanned slices, branch operands), which have no producing op."""
    _first_derivative(_in_a_loop_body(sample))


@pytest.mark.parametrize("sample", IN_LOOP_GRAD2_SAMPLES,
                         ids=[s.id for s in IN_LOOP_GRAD2_SAMPLES])
def test_second_derivative_with_block_arguments(sample):
    _second_derivative(_in_a_loop_body(sample))
