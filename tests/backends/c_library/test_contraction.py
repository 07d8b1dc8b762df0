"""einsum in an exported library: contractions, a three-operand product, a diagonal, a total
and a broadcast dim of 1, with their gradients, agree with the C backend and the interpreter
to rounding (their sums run in other orders)."""

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .conftest import one_blas_thread
from .library_ctypes import exported

pytestmark = pytest.mark.slow   # builds a library with the C compiler: seconds


def contractions():
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", ["n", 3], "float64")
        b = sg.data("b", [3, 4, 2], "float64")
        column = sg.data("column", ["n", 1], "float64")
        w = sg.parameter("w", [3, 3], "float64", init=rng.standard_normal((3, 3)))
        outputs = [sg.einsum("ij,jkl->ikl", a, b), sg.einsum("ij,jk,ik->i", a, w, a),
                   sg.einsum("ii->i", w), sg.einsum("ij->", a),
                   sg.einsum("ij,jk->ik", column, w)]
        loss = sum(sg.sum(p * p) for p in outputs)
        grads = ir_backward.grad(loss, [w, a])
    return prog, [loss] + list(grads) + outputs


def test_einsum_and_its_gradients(tmp_path, cblas):
    fn, oracle, _, library = exported(contractions(), tmp_path, "sums")
    rng = np.random.default_rng(1)
    for n in (5, 1):
        feeds = {"a": rng.standard_normal((n, 3)), "b": rng.standard_normal((3, 4, 2)),
                 "column": rng.standard_normal((n, 1))}
        with one_blas_thread():
            want = fn(**feeds)
            code, got = library.run(feeds, [np.shape(a) for a in want])
        assert code == 0, library.error()
        for k, (a, b, c) in enumerate(zip(want, got, oracle(**feeds))):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-13, err_msg=f"output {k}")
            np.testing.assert_allclose(b, c, rtol=1e-12, atol=1e-13, err_msg=f"output {k}")
    library.close()
