"""einsum: subscripts parsed to one letter per dim, gradients built from einsums, bfloat16,
errors (the forward of its samples is checked against np.einsum in test_math_ops.py)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import ShapeError
from symgrad.ops.contraction import parse
from tests.ops.samples import interpret

@pytest.mark.parametrize("subscripts,ranks,explicit", [
    ("ij,jk", [2, 2], "ij,jk->ik"),
    ("ba", [2], "ba->ab"),
    ("Ba,aB", [2, 2], "Ba,aB->"),
    ("ii", [2], "ii->"),
    ("...ij,...jk", [3, 2], "aij,jk->aik"),
    ("i...,i", [3, 1], "iab,i->ab"),
    (" ij -> ji ", [2], "ij->ji"),
    ("...->...", [0], "->"),
])
def test_parse_gives_one_letter_per_dim(subscripts, ranks, explicit):
    assert parse(subscripts, ranks) == explicit


def test_gradients_are_einsums_to_any_order():
    a, b = np.random.default_rng(0).standard_normal((2, 3, 3))

    def build(x, y):
        z = sg.einsum("ij,jk->ik", x, y)
        gx, = ir_backward.grad(sg.sum(z * z), [x], create_graph=True)
        hy, = ir_backward.grad(sg.sum(gx), [y])
        return gx, hy
    (gx, hy), (gxv, hyv) = interpret(build, a, b)
    np.testing.assert_allclose(gxv, 2 * (a @ b) @ b.T)
    assert gx.op.name == "einsum"
    names = {op.name for op in gx.program.ops}
    assert "matmul" not in names and "einsum" in names


def test_bfloat16_operands_compute_in_float32():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    out, got = interpret(lambda x: sg.einsum("ij,kj->ik", x, x), a.astype("bfloat16"))
    assert out.dtype == got.dtype == np.dtype("bfloat16")
    np.testing.assert_allclose(got.astype(np.float32), a @ a.T, rtol=1e-2)


@pytest.mark.parametrize("subscripts,shapes,match", [
    ("ij,jk", [(2, 3), (4, 5)], r"einsum: subscript 'j' has size 3 in one place and 4 in "
                                r"operand 1 \(\[4, 5\]\) \(inputs: float32\[2, 3\], float32"),
    ("ij", [(2, 3), (3,)], "subscripts 'ij' name 1 operands, got 2"),
    ("ijk", [(2, 3)], "operand 0 has rank 2 but its subscripts 'ijk' name 3 dims"),
    ("i1", [(2, 3)], "invalid subscript '1'"),
    ("ij->ii", [(2, 3)], "output subscript 'i' appears more than once"),
    ("ij->k", [(2, 3)], "output subscript 'k' names no operand dim"),
    ("...i->i", [(2, 3)], "drops the ellipsis, which stands for 1 dims"),
    ("ii", [(2, 3)], "subscript 'i' has size 2 in one place and 3"),
])
def test_errors_name_the_op_and_shapes(subscripts, shapes, match):
    with sg.program_guard(sg.Program()):
        values = [sg.data(f"x{i}", list(s)) for i, s in enumerate(shapes)]
        with pytest.raises(ShapeError, match=match):
            sg.einsum(subscripts, *values)
