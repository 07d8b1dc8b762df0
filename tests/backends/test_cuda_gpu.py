"""The CUDA backend on a device (pytest marker ``cuda``; skipped without CuPy or a GPU):
every op sample and its gradients against the interpreter, random programs, CuPy feeds,
and the AOT round trip with cubins."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from tests.backends.test_cuda_codegen import bias_program, w2_program
from tests.ops.samples import ALL_SAMPLES

cupy = pytest.importorskip("cupy")
try:
    HAS_DEVICE = cupy.cuda.runtime.getDeviceCount() > 0
except Exception:   # no driver
    HAS_DEVICE = False
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_DEVICE, reason="no CUDA device")]

# float32: NVRTC's math functions are within a few ulp of NumPy's (no fast-math, no FMA
# contraction), so a result that cancels terms of size 1 can differ from NumPy's by a few ulp of
# 1 (atol_scale below).
TOLERANCE = {"float64": 1e-6, "float32": 1e-4}


def _check(prog, fetches, feeds, rtol, atol_scale=1e-6, **options):
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = sg.compile(prog, fetches, backend="cuda", **options)(**feeds)
    for e, g in zip(expected, got):
        assert isinstance(g, cupy.ndarray)
        g = cupy.asnumpy(g)
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * max(atol_scale, 1e-6) * 100)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_and_grad_float64(sample, fusion):
    prog, fetches = sample.program("float64", with_grad=sample.grad)
    _check(prog, fetches, sample.feeds("float64"), TOLERANCE["float64"], sample.atol,
           fusion=fusion)


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_float32_fused(sample):
    prog, fetches = sample.program("float32")
    _check(prog, fetches, sample.feeds("float32"), TOLERANCE["float32"], sample.atol)


@pytest.mark.parametrize("n", [1, 1000, 300_000])
def test_w2_gradient(n):
    x = np.linspace(-3, 3, n, dtype="float32")
    # the gradient's terms (tanh, sin, cos, exp, log1p of x) are of size 1 and cancel to 1e-3
    # near its zeros: seen on an H100, 1.9e-7 apart there, under 2 ulp of the terms
    _check(*w2_program(), {"x": x}, 1e-4, atol_scale=1e-4)


def test_dynamic_batch_reuses_kernels_and_accepts_cupy_feeds():
    prog, fetches = bias_program()
    compiled = sg.compile(prog, fetches, backend="cuda", return_numpy=True)
    reference = sg.compile(prog, fetches, backend="interpreter")
    module = None
    for batch in (3, 64, 5000):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype("float32")
        got, = compiled(x=cupy.asarray(x))
        assert isinstance(got, np.ndarray)
        module = module or compiled._executable.module
        assert compiled._executable.module is module
        np.testing.assert_allclose(got, reference(x=x)[0], rtol=1e-4, atol=1e-6)


# --- random programs ---------------------------------------------------------------------------
from hypothesis import given, settings, strategies as st   # noqa: E402

UNARY = [sg.tanh, sg.sin, sg.exp, lambda v: sg.log1p(v * v), sg.negative, sg.sigmoid,
         lambda v: v * 1.5 + 0.25]
BINARY = [sg.add, sg.subtract, sg.multiply, sg.maximum]
REDUCE = [sg.sum, sg.mean, sg.max]


@st.composite
def programs(draw):
    rows, cols = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "binary", "reduce"]),
                                    st.integers(0, 6), st.integers(0, 1)),
                          min_size=1, max_size=8))
    return rows, cols, steps


@settings(max_examples=30, deadline=None)
@given(programs())
def test_random_programs_and_gradients(spec):
    rows, cols, steps = spec
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, cols], "float64")
        b = sg.data("b", [cols], "float64")
        v = x
        for kind, which, axis in steps:
            if kind == "unary":
                v = UNARY[which % len(UNARY)](v)
            elif kind == "binary":
                v = BINARY[which % len(BINARY)](v, b if v.ndim == 2 else v)
            elif v.ndim == 2:
                v = REDUCE[which % len(REDUCE)](v, axis=axis, keepdims=which % 2 == 0)
        loss = sg.sum(v * v)
        gx, gb = ir_backward.grad(loss, [x, b], allow_unused=True, unused="zeros")
    rng = np.random.default_rng(rows * 100 + cols)
    feeds = {"x": rng.uniform(-1, 1, (rows, cols)), "b": rng.uniform(-1, 1, cols)}
    for fusion in (True, False):
        _check(prog, [v, gx, gb], feeds, 1e-6, fusion=fusion)


# --- ahead of time ------------------------------------------------------------------------------
def test_aot_round_trip_with_cubins(tmp_path):
    from symgrad.backends.cuda_backend import device_arch

    compiled = sg.compile(*w2_program(), backend="cuda")
    x = np.linspace(-2, 2, 4096, dtype="float32")
    expected = [cupy.asnumpy(r) for r in compiled(x=x)]
    path = compiled.save(str(tmp_path / "w2"))
    assert (tmp_path / "w2" / "cuda" / "host.py").exists()
    loaded = sg.load(path)
    for e, g in zip(expected, loaded(x=x)):
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=1e-4, atol=1e-6)
    arch = device_arch()
    cubins = compiled._executable.cubins([arch])
    fresh = sg.compile(*w2_program(), backend="cuda")
    fresh._executable.load(cubin=cubins[arch])
    for e, g in zip(expected, fresh(x=x)):
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=1e-6)
