"""Ops along one axis in an exported library: cumsum (forward, from the end, flattened, of
ints), cumprod and its gradient (a linear recurrence), argmax/argmin (NaNs, whole arrays)
are the C backend's and the interpreter's bits; an argmax of an empty line fails as NumPy's;
logsumexp (NaNs and infinities too) agrees to rounding."""

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .library_ctypes import exported

pytestmark = pytest.mark.slow   # builds a library with the C compiler: seconds


def along():
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 4], "float64")
        xf = sg.data("xf", ["n", 4], "float32")
        ints = sg.data("ints", ["n", 4], "int32")
        w = sg.parameter("w", [4], "float64", init=rng.standard_normal(4))
        sums = sg.cumsum(x * w, axis=1)
        products = sg.cumprod(x * w, axis=1)
        loss = sg.sum(sums * sums) + sg.sum(products)
        grads = ir_backward.grad(loss, [w, x])
        outputs = [sg.cumsum(xf, axis=0), sg.cumsum(ints, axis=1), sg.cumsum(xf),
                   sg.argmax(x, axis=1), sg.argmin(xf, axis=0), sg.argmax(x),
                   sg.argmin(ints, axis=1)]
        cube = sg.reshape(x, [-1, 2, 2])
        rounded = [sg.logsumexp(x * w, axis=1), sg.logsumexp(cube, axis=(0, 2), keepdims=True),
                   sg.logsumexp(xf, axis=0)]
    return prog, [loss] + list(grads) + [sums, products] + outputs + rounded


ROUNDED = 3   # the last outputs: logsumexp, its sum in another order and the C library's exp


def test_ops_along_an_axis(tmp_path, cblas):
    fn, oracle, _, library = exported(along(), tmp_path, "along")
    rng = np.random.default_rng(1)
    for n in (5, 1):
        x = rng.standard_normal((n, 4))
        x[rng.random((n, 4)) < 0.15] = np.nan
        x[rng.random((n, 4)) < 0.1] = np.inf
        feeds = {"x": x, "xf": rng.standard_normal((n, 4)).astype("float32"),
                 "ints": rng.integers(-5, 5, (n, 4)).astype("int32")}
        want = [np.asarray(a) for a in fn(**feeds)]
        code, got = library.run(feeds, [a.shape for a in want])
        assert code == 0, library.error()
        with np.errstate(all="ignore"):   # inf - inf in the NaN and infinity cases
            expected = oracle(**feeds)
        for k, (a, b, c) in enumerate(zip(want, got, expected)):
            if k >= len(want) - ROUNDED:
                rtol = 1e-6 if b.dtype == np.float32 else 1e-13
                np.testing.assert_allclose(b, a, rtol=rtol, err_msg=f"output {k}")
                np.testing.assert_allclose(b, c, rtol=rtol, err_msg=f"output {k}")
                continue
            assert np.array_equal(a, b, equal_nan=True), f"output {k}"
            assert np.array_equal(b, c, equal_nan=True), f"output {k}"
    empty = {"x": np.zeros((0, 4)), "xf": np.zeros((0, 4), "float32"),
             "ints": np.zeros((0, 4), "int32")}
    code, _ = library.run(empty, [np.shape(a) for a in fn(**feeds)])
    assert code == 2 and "attempt to get argmin of an empty sequence" in library.error()
    library.close()
