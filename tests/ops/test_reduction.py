"""Reductions: forward against NumPy (axes, keepdims, dtypes, unknown dims), build-time errors,
the NumPy emitters, and the structure of their VJPs."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ops import REGISTRY
from symgrad.ops.reduction import expand_back

from .samples_structure import SAMPLES
from .test_shape import check_numpy_emitters, run

RNG = np.random.default_rng(5)
SHAPES = [(5,), (3, 4), (2, 3, 4)]
AXES = [None, 0, -1, (0, -1)]


def _cases():
    for shape in SHAPES:
        for axis in AXES:
            if axis == (0, -1) and len(shape) == 1:
                continue
            for keepdims in (False, True):
                yield shape, axis, keepdims


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "logsumexp"])
def test_reductions_match_numpy(name, dtype):
    if name == "logsumexp":
        def reference(x, axis, keepdims):
            return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    else:
        reference = getattr(np, name)
    for shape, axis, keepdims in _cases():
        x = RNG.uniform(-1, 1, shape).astype(dtype)
        for dynamic in ((), (0,)):
            (got,), (value,), _ = run(
                lambda v: getattr(sg, name)(v, axis=axis, keepdims=keepdims), x, dynamic=dynamic)
            want = reference(x, axis=axis, keepdims=keepdims)
            assert got.dtype == want.dtype == value.dtype
            assert got.shape == want.shape and len(value.shape) == want.ndim
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_reduced_static_shapes():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 4])
        assert sg.sum(x, axis=1).shape == (None, 4)
        assert sg.max(x, axis=(0, 2), keepdims=True).shape == (1, 3, 1)
        assert sg.mean(x).shape == ()
        assert sg.argmax(x, axis=-1).shape == (None, 3)
        assert sg.argmin(x, keepdims=True).shape == (1, 1, 1)
        assert x.sum(axis=-1, keepdims=True).shape == (None, 3, 1)


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "uint8"])
def test_integer_accumulation_follows_numpy(dtype):
    x = RNG.integers(0, 3, (3, 4)).astype(dtype)
    for name in ("sum", "prod", "mean"):
        (got,), (value,), prog = run(lambda v: getattr(sg, name)(v, axis=0), x)
        want = getattr(np, name)(x, axis=0)
        np.testing.assert_allclose(got, want)
        if dtype != "uint8":  # NumPy gives uint64 there, which symgrad does not support
            assert value.dtype == want.dtype
        assert value.dtype == (np.dtype("float64") if name == "mean" else np.dtype("int64"))
    (got,), (value,), _ = run(lambda v: sg.max(v, axis=1), x)
    assert value.dtype == x.dtype and (got == x.max(axis=1)).all()


def test_float_attrs_carry_no_dtype():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.sum(sg.data("x", [2, 3], "float32"), axis=-1)
        n = sg.sum(sg.data("i", [2, 3], "int32"))
    assert y.op.attrs == {"axis": (1,), "keepdims": False}
    assert n.op.attrs == {"axis": (0, 1), "keepdims": False, "dtype": "int64"}


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name):
    x = RNG.permutation(24).reshape(2, 3, 4).astype("float32")
    for axis in (None, 0, -1, 1):
        for keepdims in (False, True):
            (got,), (value,), _ = run(lambda v: getattr(sg, name)(v, axis=axis,
                                                                  keepdims=keepdims),
                                      x, dynamic=(0,))
            want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
            assert value.dtype == np.dtype("int64") and got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
    assert REGISTRY[name].vjp is None


def test_logsumexp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-np.inf, -np.inf]])
    (got,), _, _ = run(lambda v: sg.logsumexp(v, axis=1), x)
    np.testing.assert_allclose(got[:2], [1000 + np.log(2), -1000 + np.log1p(np.exp(-1))])
    assert got[2] == -np.inf


def test_logsumexp_rejects_bool():
    with sg.program_guard(sg.Program()):
        with pytest.raises(sg.DTypeError, match="logsumexp"):
            sg.logsumexp(sg.data("b", [3], "bool"))


def test_fusible_reductions_declare_how_they_combine():
    facts = {name: REGISTRY[name].reduction for name in
             ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "logsumexp")}
    assert {name for name, f in facts.items() if f is None} == {"argmax", "argmin", "logsumexp"}
    assert {name: f.combine.name for name, f in facts.items() if f is not None} == {
        "sum": "add", "mean": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}
    assert facts["mean"].mean and not facts["sum"].mean
    assert facts["sum"].widens and facts["mean"].widens and not facts["prod"].widens
    f32, i32 = np.dtype("float32"), np.dtype("int32")
    assert facts["sum"].accumulator(f32, f32) == np.float64
    assert facts["sum"].accumulator(f32, f32, accumulate_float64=False) == np.float32
    assert facts["sum"].accumulator(i32, np.dtype("int64")) == np.int64
    assert facts["max"].accumulator(i32, i32) == np.int32
    assert facts["max"].identity_value(f32) == -np.inf
    assert facts["min"].identity_value(np.dtype("int8")) == 127
    assert facts["max"].identity_value(np.dtype(bool)) is False
    assert facts["prod"].identity_value(f32) == 1.0


@pytest.mark.parametrize("axis", [2, -3, (0, 0), (0, 5)])
def test_bad_axis_is_a_build_error(axis):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 3])
        with pytest.raises(sg.ShapeError, match=r"sum: .*float32\[2, 3\]"):
            sg.sum(x, axis=axis)
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 3])
        with pytest.raises(sg.ShapeError, match="argmax"):
            sg.argmax(x, axis=2)


def test_mean_vjp_uses_run_time_count_for_unknown_dims():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        y = sg.mean(x, axis=0)
        with prog.backward_of(y.op):
            gx, = REGISTRY["mean"].vjp(y.op, [sg.ones_like(y)])
        static = sg.mean(x, axis=1)
        with prog.backward_of(static.op):
            gs, = REGISTRY["mean"].vjp(static.op, [sg.ones_like(static)])
    names = [op.name for op in prog.ops]
    assert names.count("size") == 1  # only the reduction over the unknown dim needs one
    fn = sg.compile(prog, [gx, gs], backend="interpreter")
    for n in (2, 5):
        got_x, got_s = fn(x=np.ones((n, 3)))
        np.testing.assert_allclose(got_x, np.full((n, 3), 1.0 / n))
        np.testing.assert_allclose(got_s, np.full((n, 3), 1.0 / 3))


@pytest.mark.parametrize("inner", [
    lambda y: sg.sum(y, axis=1),
    lambda y: sg.sum(sg.mean(y, axis=2), axis=1),
    lambda y: sg.max(y, axis=(1, 2), keepdims=True),
], ids=["sum", "mean-of-mean", "max-keepdims"])
def test_mean_counts_read_the_earliest_value_of_their_dims(inner):
    """The gradient of mean(reduction(...)) reads the batch size off ``x``: a forward reduction
    is neither computed nor stored just so that ``size`` can read its shape."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 4], "float32")
        loss = sg.mean(inner(sg.exp(x) * 2.0))
        gx, = sg.ir_backward.grad(loss, [x])
    compiled = sg.compile(prog, [gx], backend="numpy")
    ops = [inner_op for op in compiled.program.ops
           for inner_op in ([op] + [o for block in op.blocks for o in block.ops])]
    size, = [op for op in ops if op.name == "size"]
    assert size.inputs[0].op.name == "data"
    forward_reductions = [op for op in ops if op.opdef.category == "reduction"
                          and op.forward_op is None]
    assert [op.name for op in forward_reductions] == (["max"] if "max" in str(prog) else [])
    x_value = RNG.uniform(-1, 1, (5, 3, 4)).astype("float32")
    want, = sg.compile(prog, [gx], backend="interpreter")(x=x_value)
    np.testing.assert_allclose(compiled(x=x_value)[0], want, rtol=1e-6)


def test_max_vjp_splits_ties_evenly():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    prog = sg.Program()
    with sg.program_guard(prog):
        v = sg.data("x", [2, 3], "float64")
        y = sg.max(v, axis=1)
        g, = REGISTRY["max"].vjp(y.op, [sg.constant(np.array([1.0, 3.0]))])
    got, = sg.compile(prog, [g], backend="interpreter")(x)
    np.testing.assert_allclose(got, [[0, 0.5, 0.5], [1, 1, 1]])


def test_prod_vjp_with_zeros():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 4.0, 0.0], [1.0, 2.0, 5.0]])
    prog = sg.Program()
    with sg.program_guard(prog):
        v = sg.data("x", [3, 3], "float64")
        y = sg.prod(v, axis=-1, keepdims=True)
        g, = REGISTRY["prod"].vjp(y.op, [sg.ones_like(y)])
    got, = sg.compile(prog, [g], backend="interpreter")(x)
    np.testing.assert_allclose(got, [[0, 6, 0], [0, 0, 0], [10, 5, 2]])


def test_expand_back_static_and_dynamic():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 2])
        assert expand_back(sg.sum(x, axis=(1, 2)), x, (1, 2), False).shape == (None, 3, 2)
        back = expand_back(sg.sum(x, axis=0), x, (0,), False)
        assert back.shape == (None, 3, 2) and back.op.name == "broadcast_like"
    ops = [op.name for op in prog.ops]
    assert ops.count("broadcast_to") == 1 and ops.count("broadcast_like") == 1


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.op in {
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "logsumexp", "size"}],
    ids=lambda s: s.id)
def test_numpy_emitters_match_reference(sample):
    check_numpy_emitters(sample)
