"""matmul: NumPy semantics for every rank combination, dynamic dims, errors."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.core import evaluate_vjp
from tests.ops.samples import interpret

RNG = np.random.default_rng(1)

RANK_CASES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)),
    ((1, 2, 3), (5, 3, 4)),
    ((6, 1, 2, 3), (5, 3, 4)),
]


@pytest.mark.parametrize("sa, sb", RANK_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_matches_numpy(sa, sb, dtype):
    a = RNG.standard_normal(sa).astype(dtype)
    b = RNG.standard_normal(sb).astype(dtype)
    value, got = interpret(lambda x, y: x @ y, a, b)
    ref = np.matmul(a, b)
    assert value.shape == ref.shape and got.dtype == ref.dtype == value.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.filterwarnings("ignore::symgrad.PromotionWarning")   # float64 ones widen, as meant
def test_matmul_promotes_and_accepts_arrays():
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    value, got = interpret(lambda x: sg.matmul(x, np.ones((3, 2))), a)
    assert value.dtype == np.float64
    np.testing.assert_allclose(got, a @ np.ones((3, 2)), rtol=1e-6)
    value, got = interpret(lambda x: np.eye(2, dtype=np.float32) @ x, a)
    np.testing.assert_allclose(got, a)


def test_matmul_dynamic_batch():
    a = RNG.standard_normal((4, 2, 3))
    b = RNG.standard_normal((3, 5))
    value, got = interpret(lambda x, y: x @ y, a, b, dynamic=(0,))
    assert value.shape == (None, 2, 5)
    np.testing.assert_allclose(got, a @ b)
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [None, None], "float32")
        assert (x @ sg.data("w", [7, 2], "float32")).shape == (None, 2)


@pytest.mark.parametrize("sa, sb, message", [
    ((2, 3), (4, 5), r"inner dims differ: \[2, 3\] @ \[4, 5\]"),
    ((3,), (4,), r"inner dims differ: \[3\] @ \[4\]"),
    ((2, 2, 3), (3, 3, 4), r"batch dims cannot be broadcast: \[2, 2, 3\] @ \[3, 3, 4\]"),
    ((), (3,), "rank >= 1"),
])
def test_matmul_shape_errors(sa, sb, message):
    with sg.program_guard(sg.Program()):
        a, b = sg.data("a", sa, "float32"), sg.data("b", sb, "float32")
        with pytest.raises(sg.ShapeError, match="matmul") as info:
            sg.matmul(a, b)
    assert info.match(message)


def test_matmul_vjp_shapes():
    """The VJP gives each operand a gradient of its own shape for every rank combination."""
    for sa, sb in RANK_CASES:
        with sg.program_guard(sg.Program()):
            a, b = sg.data("a", sa, "float64"), sg.data("b", sb, "float64")
            y = a @ b
            ga, gb = evaluate_vjp(y.op, [y])
        assert ga.shape == sa and gb.shape == sb, (sa, sb)


def test_a_contracted_dim_of_one_is_an_outer_product_multiply():
    """``[..., n, 1] @ [..., 1, m]`` is built as a broadcast multiply (each element one product,
    as in the matmul): the per-example weight gradients under vmap lower to one fused loop
    that writes each gradient once, not a GEMM with k = 1 per example."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 5, 1)), rng.normal(size=(4, 1, 3))
    with sg.program_guard(sg.Program()) as prog:
        x, y = sg.data("x", [4, 5, 1], "float64"), sg.data("y", [4, 1, 3], "float64")
        out = x @ y
        w = sg.data("w", [5, 3], "float64")
        grads = sg.vmap(lambda row: sg.ir_backward.grad(sg.sum(sg.tanh(row @ w)), [w])[0])(
            sg.data("rows", [4, 5], "float64"))
    assert out.op.name == "multiply" and out.shape == (4, 5, 3)
    assert [op.name for op in prog.ops].count("matmul") == 1        # the forward row @ w
    got = sg.compile(prog, [out], backend="interpreter")(x=a, y=b)[0]
    np.testing.assert_array_equal(got, a @ b)
    assert grads.shape == (4, 5, 3)
