"""Every op sample (and its gradients) through the NumPy and C backends, fusion on and off,
against the interpreter. The C programs of the whole module are compiled together, in one
batch (``c_backend.deferred``), the first time a C test runs."""
import functools

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import c_backend
from tests.ops.samples import ALL_SAMPLES

TOLERANCE = {"float64": 1e-6, "float32": 1e-4}
BACKENDS = ["numpy", "c"]
VARIANTS = [("float64", True), ("float64", False), ("float32", True)]   # (dtype, fusion)


def _build(sample, dtype, fusion, backend):
    with_grad = sample.grad and dtype == "float64"
    prog, fetches = sample.program(dtype, with_grad)
    return prog, fetches, sg.compile(prog, fetches, backend=backend, fusion=fusion,
                                     chunk_size=16)


@functools.lru_cache(maxsize=None)
def _c_programs():
    """Every sample's C programs, compiled in one batch."""
    with c_backend.deferred():
        return {(sample.id, dtype, fusion): _build(sample, dtype, fusion, "c")
                for sample in ALL_SAMPLES for dtype, fusion in VARIANTS}


def _check(sample, dtype, fusion, backend):
    if backend == "c":
        prog, fetches, compiled = _c_programs()[sample.id, dtype, fusion]
    else:
        prog, fetches, compiled = _build(sample, dtype, fusion, backend)
    feeds = sample.feeds(dtype)
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = compiled(**feeds)
    rtol = TOLERANCE[dtype]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * max(sample.atol, 1e-6) * 100)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_and_grad_float64(sample, fusion, backend):
    _check(sample, "float64", fusion, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_float32_fused(sample, backend):
    _check(sample, "float32", True, backend)
