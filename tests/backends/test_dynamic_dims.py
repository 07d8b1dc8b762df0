"""Programs with symbolic dims on every backend against the interpreter: the regression
programs of the shape-model issue by name, at batch sizes 1, 2 and one equal to a static dim."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

BACKENDS = ["numpy", "c"]
BATCHES = [1, 2, 8, 6]   # 8: the static row length of the programs below


def regression_loss(kind):
    """``(program, fetches)``: a per-row quantity of ``h`` [?, 8] meeting ``t`` [?], reduced to
    a loss, with its gradient."""
    prog = sg.Program()
    with sg.program_guard(prog):
        h = sg.data("h", [None, 8], "float64")
        t = sg.data("t", [None], "float64")
        if kind == "sum_minus":
            r = sg.sum(h, axis=1) - t
        elif kind == "max_minus":
            r = sg.max(h, axis=1) - t
        elif kind == "sum_times":
            r = sg.sum(h, axis=1) * t
        else:   # row-wise cosine similarity against a second input
            g = sg.data("g", [None, 8], "float64")
            dot = sg.sum(h * g, axis=1)
            norms = sg.sqrt(sg.sum(h * h, axis=1) * sg.sum(g * g, axis=1))
            r = dot / norms - t
        loss = sg.mean(r * r)
        grads = ir_backward.grad(loss, [h])
    return prog, [loss] + grads


def _feeds(kind, batch, rng):
    feeds = {"h": rng.normal(size=(batch, 8)), "t": rng.normal(size=batch)}
    if kind == "cosine":
        feeds["g"] = rng.normal(size=(batch, 8))
    return feeds


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sum_minus", "max_minus", "sum_times", "cosine"])
def test_regression_programs_run_at_any_batch_size(kind, backend):
    prog, fetches = regression_loss(kind)
    oracle = sg.compile(prog, fetches, backend="interpreter")
    fn = sg.compile(prog, fetches, backend=backend)
    rng = np.random.default_rng(0)
    for batch in BATCHES:
        feeds = _feeds(kind, batch, rng)
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["interpreter"] + BACKENDS)
def test_disagreeing_batch_sizes_are_a_feed_error_before_anything_runs(backend):
    prog, fetches = regression_loss("sum_minus")
    fn = sg.compile(prog, fetches, backend=backend)
    with pytest.raises(sg.FeedError, match=r"op subtract .*\(6 in t\).*\(8 in h\)|"
                                           r"op subtract .*\(8 in h\).*\(6 in t\)"):
        fn(h=np.ones((8, 8)), t=np.ones(6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_named_batch_through_reshape_concatenate_and_softmax_cross_entropy(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 2, 4], "float64")
        extra = sg.data("extra", ["batch", 3], "float64")
        labels = sg.data("labels", ["batch"], "int64")
        w = sg.parameter("w", [11, 5], "float64", init=np.linspace(-1, 1, 55).reshape(11, 5))
        features = sg.concatenate([sg.reshape(x, [-1, 8]), extra], axis=1)
        logits = features @ w
        loss = sg.mean(sg.nn.softmax_cross_entropy(logits, labels))
        grads = ir_backward.grad(loss, [w, x])
    assert features.dims == (x.dims[0], 11) and str(prog).count("[batch, 11]") >= 1
    oracle = sg.compile(prog, [loss] + grads, backend="interpreter")
    fn = sg.compile(prog, [loss] + grads, backend=backend)
    rng = np.random.default_rng(1)
    for batch in (1, 2, 5, 11):
        feeds = {"x": rng.normal(size=(batch, 2, 4)), "extra": rng.normal(size=(batch, 3)),
                 "labels": rng.integers(0, 5, size=batch)}
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_over_a_dynamic_length_with_a_symbolic_carry(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", ["steps", "batch", 3], "float64")
        h0 = sg.data("h0", ["batch", 3], "float64")
        w = sg.parameter("w", [3, 3], "float64", init=np.eye(3) * 0.5)
        h, _ = sg.scan(lambda h, x: (sg.tanh(h @ w + x), None), h0, xs)
        loss = sg.sum(h * h)
        grads = ir_backward.grad(loss, [w, h0])
    assert h.dims == h0.dims
    oracle = sg.compile(prog, [loss] + grads, backend="interpreter")
    fn = sg.compile(prog, [loss] + grads, backend=backend)
    rng = np.random.default_rng(2)
    for steps, batch in ((0, 2), (1, 1), (4, 3)):
        feeds = {"xs": rng.normal(size=(steps, batch, 3)), "h0": rng.normal(size=(batch, 3))}
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
