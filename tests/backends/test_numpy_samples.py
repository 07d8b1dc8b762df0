"""Every op sample (and its gradients) through the NumPy backend, fusion on and off, against
the interpreter."""
import numpy as np
import pytest

import symgrad as sg
from tests.ops.samples import ALL_SAMPLES

TOLERANCE = {"float64": 1e-6, "float32": 1e-4}


def _check(sample, dtype, with_grad, fusion):
    prog, fetches = sample.program(dtype, with_grad)
    feeds = sample.feeds(dtype)
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    got = sg.compile(prog, fetches, backend="numpy", fusion=fusion, chunk_size=16)(**feeds)
    rtol = TOLERANCE[dtype]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * max(sample.atol, 1e-6) * 100)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_and_grad_float64(sample, fusion):
    _check(sample, "float64", with_grad=sample.grad, fusion=fusion)


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_sample_forward_float32_fused(sample):
    _check(sample, "float32", with_grad=False, fusion=True)
