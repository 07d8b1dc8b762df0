"""Shape ops: forward against NumPy (static and unknown dims, float32 and float64), build-time
errors, basic indexing, split's multiple results, the internal helpers other VJPs use, and
the NumPy emitters."""
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends.dim_code import DimNames
from symgrad.backends.host import lowering as numpy_lowering
from symgrad.backends.host.ops_text import numpy_emitter
from symgrad.ops.core import evaluate_vjp
from symgrad.backends.interpreter import execute
from symgrad.ops import INJECTIVE, REDUCTION, REGISTRY
from symgrad.ops.shape import broadcast_like, unbroadcast

from .samples_structure import SAMPLES

RNG = np.random.default_rng(7)


def run(build, *arrays, dynamic=()):
    """Build ``build(*data)`` in a fresh program (``dynamic``: indices of inputs whose first
    dim is unknown) and run it with the interpreter; returns (results, result Values, program)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        values = []
        for i, a in enumerate(arrays):
            shape = list(a.shape)
            if i in dynamic:
                shape[0] = None
            values.append(sg.data(f"x{i}", shape, a.dtype))
        out = build(*values)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return sg.compile(prog, outs, backend="interpreter")(*arrays), outs, prog


def check(build, reference, *arrays, dynamic=()):
    """``build`` agrees with ``reference`` on values, shapes and dtypes; the static result
    types agree with the arrays wherever a dim is known."""
    got, values, _ = run(build, *arrays, dynamic=dynamic)
    want = reference(*arrays)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for g, w, v in zip(got, want, values):
        assert g.shape == w.shape and g.dtype == w.dtype == v.dtype
        assert len(v.shape) == w.ndim
        assert all(d is None or d == n for d, n in zip(v.shape, w.shape)), (v.shape, w.shape)
        np.testing.assert_array_equal(g, w)
    return values


def check_numpy_emitters(sample):
    """Every reduction/shape op of ``sample``'s program, lowered with its NumPy emitter (as an
    expression and, for one-result ops, writing into a preallocated ``out``) and evaluated
    with NumPy and the op's helpers only, gives what the interpreter gives."""
    prog = sg.Program()
    with sg.program_guard(prog):
        sample.build(*sample.declare(sg))
    values = [v for op in prog.ops for v in op.results]
    feeds = {op.results[0]: sample.feeds()[op.attrs["name"]] for op in prog.ops
             if op.name == "data"}
    env = dict(zip(values, execute(prog.ops, values, feeds)))
    checked = 0
    for op in prog.ops:
        rule = numpy_lowering.LOWERINGS.rule(op.opdef)
        if op.opdef.category not in (INJECTIVE, REDUCTION) and op.name != "size" or rule is None:
            continue
        scope = {"np": np, **{f.__name__: f for f in rule.helpers}}
        names = DimNames()   # the run-time dims, bound as generated code binds them
        for value in list(op.inputs) + list(op.results):
            for axis, dim in enumerate(value.dims):
                if not names.known(dim):
                    names.bind(dim, f"d{len(names.names)}")
                    scope[f"d{len(names.names) - 1}"] = env[value].shape[axis]
        emit = numpy_emitter(op, names.code)
        args = []
        for i, value in enumerate(op.inputs):
            scope[f"a{i}"] = env[value]
            args.append(f"a{i}")
        result = eval(emit(args, op.attrs), scope)
        results = list(result) if len(op.results) > 1 else [result]
        for got, value in zip(results, op.results):
            np.testing.assert_array_equal(np.asarray(got), env[value])
        if len(op.results) == 1 and op.name not in ("split", "split_like"):
            scope["out"] = np.full_like(env[op.results[0]], 123)
            exec(emit(args, op.attrs, out="out"), scope)
            np.testing.assert_array_equal(scope["out"], env[op.results[0]])
        checked += 1
    assert checked


def _u(*shape, dtype="float64"):
    return RNG.uniform(-1, 1, shape).astype(dtype)


DTYPES = ["float32", "float64"]


# --- reshape -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [((2, 6), (3, 4)), ((2, 3, 4), (-1, 4)),
                                          ((6,), (1, 2, 3)), ((4, 3), (12,)), ((2, 2), (-1,))])
def test_reshape(shape, target, dtype):
    x = _u(*shape, dtype=dtype)
    check(lambda v: sg.reshape(v, target), lambda a: a.reshape(target), x)
    if -1 in target and target[0] == -1:
        check(lambda v: v.reshape(*target), lambda a: a.reshape(target), x, dynamic=(0,))


def test_reshape_unknown_dims():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 4])
        assert sg.reshape(x, (-1, 12)).shape == (None, 12)
        assert sg.reshape(x, [None, 2, 6]).shape == (None, 2, 6)
        assert sg.reshape(x, (24,)).shape == (24,)
        with pytest.raises(sg.ShapeError, match=r"reshape: .*not a multiple of 12"):
            sg.reshape(x, (5, 5))


@pytest.mark.parametrize("target,match", [((5,), "6 elements != 5"), ((-1, -1), "one -1"),
                                          ((-1, 4), "blocks of 4"), ((2, -3), "negative")])
def test_reshape_errors_name_op_and_shapes(target, match):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 3])
        with pytest.raises(sg.ShapeError, match=rf"reshape: cannot reshape \[2, 3\].*{match}"):
            sg.reshape(x, target)


# --- transpose -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)])
def test_transpose(axes, dtype):
    x = _u(2, 3, 4, dtype=dtype)
    check(lambda v: sg.transpose(v, axes), lambda a: np.transpose(a, axes), x)
    check(lambda v: sg.transpose(v, axes), lambda a: np.transpose(a, axes), x, dynamic=(0,))


def test_transpose_method_forms_and_vjp_inverse():
    x = _u(2, 3, 4)
    check(lambda v: v.T, lambda a: a.T, x)
    check(lambda v: v.transpose(2, 0, 1), lambda a: a.transpose(2, 0, 1), x)
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.transpose(sg.data("x", [2, 3, 4]), (2, 0, 1))
        g, = evaluate_vjp(y.op, [y])
    assert g.op.attrs["axes"] == (1, 2, 0) and g.shape == (2, 3, 4)


@pytest.mark.parametrize("axes", [(0, 1), (0, 0, 1), (0, 1, 3)])
def test_transpose_bad_axes(axes):
    with sg.program_guard(sg.Program()):
        with pytest.raises(sg.ShapeError, match=r"transpose: .*permutation.*\[2, 3, 4\]"):
            sg.transpose(sg.data("x", [2, 3, 4]), axes)


# --- broadcast_to / expand_dims / squeeze ------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((), (2, 2)), ((4,), (3, 4)),
                                          ((1, 1), (1, 5))])
def test_broadcast_to(shape, target, dtype):
    x = _u(*shape, dtype=dtype)
    check(lambda v: sg.broadcast_to(v, target), lambda a: np.broadcast_to(a, target), x)


def test_broadcast_to_keeps_unknown_dims():
    x = _u(3, 1, 2)
    values = check(lambda v: sg.broadcast_to(v, (2, -1, 4, 2)),
                   lambda a: np.broadcast_to(a, (2, 3, 4, 2)), x, dynamic=(0,))
    assert values[0].shape == (2, None, 4, 2)


@pytest.mark.parametrize("shape,target", [((3,), (4,)), ((2, 3), (3,)), ((3,), (-1, 3))])
def test_broadcast_to_errors(shape, target):
    with sg.program_guard(sg.Program()):
        with pytest.raises(sg.ShapeError, match="broadcast_to: "):
            sg.broadcast_to(sg.data("x", list(shape)), target)


@pytest.mark.parametrize("axis", [0, -1, (0, 2), (-1, 1)])
def test_expand_dims(axis):
    x = _u(2, 3)
    check(lambda v: sg.expand_dims(v, axis), lambda a: np.expand_dims(a, axis), x, dynamic=(0,))


@pytest.mark.parametrize("axis", [None, 1, -1, (1, 3)])
def test_squeeze(axis):
    x = _u(2, 1, 3, 1)
    check(lambda v: sg.squeeze(v, axis), lambda a: np.squeeze(a, axis), x, dynamic=(0,))


def test_squeeze_and_expand_dims_errors():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 1, 3])
        with pytest.raises(sg.ShapeError, match=r"squeeze: cannot squeeze axis 2 .*size is 3"):
            sg.squeeze(x, 2)
        with pytest.raises(sg.ShapeError, match="squeeze: axis 3 is out of range"):
            sg.squeeze(x, 3)
        with pytest.raises(sg.ShapeError, match="expand_dims: axis 5 is out of range"):
            sg.expand_dims(x, 5)
        assert sg.squeeze(sg.data("y", [None, 3]), 0).shape == (3,)  # checked at run time


# --- concatenate / stack / split -------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis, dtype):
    a, b = _u(2, 3, dtype=dtype), _u(2, 3, dtype=dtype)
    check(lambda x, y: sg.concatenate([x, y], axis=axis),
          lambda x, y: np.concatenate([x, y], axis=axis), a, b)
    check(lambda x, y: sg.concatenate((x, y), axis=axis),
          lambda x, y: np.concatenate([x, y], axis=axis), a, b, dynamic=(0, 1))


def test_concatenate_promotes_and_merges_dims():
    a, b = _u(2, 3, dtype="float32"), RNG.integers(0, 5, (1, 3))
    check(lambda x, y: sg.concatenate([x, y]), lambda x, y: np.concatenate([x, y]), a, b)
    with sg.program_guard(sg.Program()):
        x, y = sg.data("x", [None, 3]), sg.data("y", [2, None])
        assert sg.concatenate([x, y]).shape == (None, 3)
        assert sg.concatenate([y, y]).shape == (4, None)


@pytest.mark.parametrize("build,match", [
    (lambda x, y, s: sg.concatenate([x, y]),
     r"concatenate: shapes differ outside axis 0: \[2, 3\], \[2, 4\]"),
    (lambda x, y, s: sg.concatenate([x, s]), "concatenate: .*one rank"),
    (lambda x, y, s: sg.concatenate([s, s]), "concatenate: zero-dimensional"),
    (lambda x, y, s: sg.concatenate([x, x], axis=2), "concatenate: axis 2 is out of range"),
    (lambda x, y, s: sg.concatenate([]), "at least one"),
    (lambda x, y, s: sg.stack([x, y]), r"stack: .*\[2, 3\], \[2, 4\]"),
    (lambda x, y, s: sg.stack([x, x], axis=3), "stack: axis 3 is out of range"),
])
def test_join_errors(build, match):
    with sg.program_guard(sg.Program()):
        x, y, s = sg.data("x", [2, 3]), sg.data("y", [2, 4]), sg.data("s", [])
        with pytest.raises(sg.ShapeError, match=match):
            build(x, y, s)
        with pytest.raises(TypeError, match="list or tuple"):
            sg.concatenate(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis, dtype):
    a, b, c = (_u(2, 3, dtype=dtype) for _ in range(3))
    check(lambda x, y, z: sg.stack([x, y, z], axis=axis),
          lambda x, y, z: np.stack([x, y, z], axis=axis), a, b, c, dynamic=(1,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec,axis", [(3, 0), (2, 1), ([1, 4], 0), ([2, -1], -1), ([-4, -1], 0),
                                       ([], 0), (1, 1), ([0, 0, 6], 0)])
def test_split(spec, axis, dtype):
    x = _u(6, 4, dtype=dtype)
    values = check(lambda v: sg.split(v, spec, axis=axis), lambda a: np.split(a, spec, axis=axis),
                   x)
    assert len(values) == len(np.split(x, spec, axis=axis))
    check(lambda v: sg.split(v, spec, axis=axis), lambda a: np.split(a, spec, axis=axis), x,
          dynamic=(0,))


def test_split_results_and_errors():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6])
        pieces = sg.split(x, [2, -1], axis=0)
        assert isinstance(pieces, list) and [p.shape for p in pieces] == [
            (2, 6), (None, 6), (1, 6)]
        assert [p.shape for p in sg.split(x, 3, axis=1)] == [(None, 2)] * 3
        assert len(prog.ops) == 3  # one op with several results per split
        # points past a known dim clip as in NumPy
        assert [p.shape for p in sg.split(sg.data("s", [5]), [2, 9])] == [(2,), (3,), (0,)]
        with pytest.raises(sg.ShapeError, match=r"split: axis 1 of \[\?, 6\] does not split"):
            sg.split(x, 4, axis=1)
        with pytest.raises(sg.ShapeError, match="split: number of sections must be positive"):
            sg.split(x, 0, axis=1)


def test_split_vjp_materialises_zeros_only_for_missing_cotangents():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        a, b, c = sg.split(x, [1, 3], axis=1)
        before = len(prog.ops)
        g, = evaluate_vjp(a.op, [sg.ones_like(a), None, sg.ones_like(c)])
        added = [op.name for op in prog.ops[before:]]
        assert added.count("zeros_like") + added.count("full") == 1
        before = len(prog.ops)
        evaluate_vjp(a.op, [sg.ones_like(a), sg.ones_like(b), sg.ones_like(c)])
        added_all = [op.name for op in prog.ops[before:]]
        assert "zeros_like" not in added_all and "full" not in added_all
    got, = sg.compile(prog, [g], backend="interpreter")(np.zeros((3, 4)))
    np.testing.assert_array_equal(got, [[1, 0, 0, 1]] * 3)


def test_concatenate_vjp_pieces_for_unknown_sizes():
    prog = sg.Program()
    with sg.program_guard(prog):
        a, b, c = (sg.data(n, s, "float64") for n, s in [("a", [2, 3]), ("b", [None, 3]),
                                                          ("c", [1, 3])])
        y = sg.concatenate([a, b, c])
        grads = evaluate_vjp(y.op, [y])
        assert [g.shape for g in grads] == [(2, 3), (None, 3), (1, 3)]
        assert grads[0].op.name == "split" and grads[0].op.attrs["indices_or_sections"] == (2, -1)
        d = sg.data("d", [None, 3], "float64")
        y2 = sg.concatenate([b, a, d])
        grads2 = evaluate_vjp(y2.op, [y2])
        assert grads2[0].op.name == "split_like"
    fn = sg.compile(prog, grads + grads2, backend="interpreter")
    av, bv, cv, dv = _u(2, 3), _u(4, 3), _u(1, 3), _u(3, 3)
    got = fn(a=av, b=bv, c=cv, d=dv)
    for g, w in zip(got, [av, bv, cv, bv, av, dv]):
        np.testing.assert_array_equal(g, w)


# --- pad --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, (2,), (1, 2), ((1, 0),), ((0, 1), (2, 3)), [[1, 1], [0, 0]]])
def test_pad_forms(width, dtype):
    x = _u(2, 3, dtype=dtype)
    check(lambda v: sg.pad(v, width), lambda a: np.pad(a, width), x)
    check(lambda v: sg.pad(v, width, constant_values=-2.5),
          lambda a: np.pad(a, width, constant_values=-2.5), x, dynamic=(0,))


def test_pad_int_input():
    x = RNG.integers(0, 9, (2, 2))
    check(lambda v: sg.pad(v, 1, constant_values=7), lambda a: np.pad(a, 1, constant_values=7), x)


@pytest.mark.parametrize("width", [-1, ((1, 2), (3, 4), (5, 6)), (1, 2, 3), 1.5, ((1, -1), (0, 0))])
def test_pad_bad_width(width):
    with sg.program_guard(sg.Program()):
        with pytest.raises(sg.ShapeError, match=r"pad: pad_width .*float32\[2, 3\]"):
            sg.pad(sg.data("x", [2, 3]), width)


def test_pad_constant_must_be_a_scalar():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 3])
        with pytest.raises(TypeError, match="constant_values"):
            sg.pad(x, 1, constant_values=(1, 2))


# --- getitem ----------------------------------------------------------------------------------
INDICES = [
    np.s_[1], np.s_[-1], np.s_[1:3], np.s_[::-1], np.s_[::2, 1], np.s_[-3:-1, ::-2],
    np.s_[None], np.s_[..., 0], np.s_[:, None, 1:], np.s_[1, ..., None], np.s_[...],
    np.s_[0, 1, 2], np.s_[4:1:-2, :, -2:], np.s_[None, ..., None], np.s_[:0],
    np.s_[np.int64(2), -5:100], np.s_[()],
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem_matches_numpy(index, dtype):
    x = _u(5, 4, 3, dtype=dtype)
    check(lambda v: v[index], lambda a: a[index], x)
    check(lambda v: v[index], lambda a: a[index], x, dynamic=(0,))


def test_getitem_is_one_op_and_shapes_with_unknown_dims():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 3])
        assert x[0].shape == (4, 3)
        assert x[-1, 1:3].shape == (2, 3)
        assert x[1:, ::2, None].shape == (None, 2, 1, 3)
        assert x[..., 0].shape == (None, 4)
    assert [op.name for op in prog.ops] == ["data"] + ["slice"] * 4


@pytest.mark.parametrize("index,error,match", [
    (np.s_[5], IndexError, "index 5 is out of bounds for axis 0 with size 5"),
    (np.s_[:, -5], IndexError, "index -5 is out of bounds for axis 1 with size 4"),
    (np.s_[0, 0, 0, 0], IndexError, "too many indices"),
    (np.s_[..., 1, ...], IndexError, "single ellipsis"),
    (np.s_[::0], ValueError, "step cannot be zero"),
    (np.s_[[True, False]], TypeError, "boolean mask"),
    (np.s_[[0, 1], [1, 2]], TypeError, "one integer-array index"),
    (np.s_[True], TypeError, "basic indexing"),
    (np.s_[1.5], TypeError, "basic indexing"),
    (np.s_[0:1.5], TypeError, "slice stop"),
])
def test_getitem_errors(index, error, match):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [5, 4, 3])
        with pytest.raises(error, match=match):
            x[index]


def test_getitem_int_out_of_range_is_an_index_error_naming_the_line():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [5, 4, 3])
        with pytest.raises(sg.IndexOutOfRangeError) as caught:
            line = sys._getframe().f_lineno + 1
            x[1, -5]
    assert str(caught.value) == ("getitem: index -5 is out of bounds for axis 1 with size 4 "
                                 f"(inputs: float32[5, 4, 3])\n  built at {__file__}:{line}")


def test_getitem_vjp_scatters_into_zeros():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        y = x[1:, ::-2]
        g, = evaluate_vjp(y.op, [sg.ones_like(y)])
        gg, = evaluate_vjp(g.op, [g])[:1]
    assert g.op.name == "slice_scatter" and g.shape == (None, 3)
    assert gg.op.name == "slice" and gg.op.attrs == y.op.attrs
    got, = sg.compile(prog, [g], backend="interpreter")(np.zeros((3, 3)))
    np.testing.assert_array_equal(got, [[0, 0, 0], [1, 0, 1], [1, 0, 1]])


# --- internal helpers ---------------------------------------------------------------------------
def test_unbroadcast():
    with sg.program_guard(sg.Program()):
        g = sg.data("g", [2, 3, 4], "float64")
        assert unbroadcast(g, g) is g
        assert unbroadcast(g, sg.data("a", [4], "float64")).shape == (4,)
        assert unbroadcast(g, sg.data("b", [3, 1], "float64")).shape == (3, 1)
        assert unbroadcast(g, sg.data("c", [1, 3, 4], "float64")).shape == (1, 3, 4)
        cast = unbroadcast(g, sg.data("d", [2, 3, 4], "float32"))
        assert cast.dtype == np.float32 and cast.op.name == "cast"
        u = unbroadcast(sg.data("h", [None, 3], "float64"), sg.data("e", [1, 3], "float64"))
        assert u.shape == (1, 3)
    # quarters: every sum is exact, whatever order the reduction adds in
    quarters = np.round(_u(2, 3, 4) * 8) / 4
    values = check(lambda gv, b: unbroadcast(gv, b), lambda gv, b: gv.sum(0).sum(1, keepdims=True),
                   quarters, _u(3, 1))
    assert values[0].shape == (3, 1)


def test_broadcast_like_picks_the_cheapest_form():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3])
        assert broadcast_like(x, x) is x
        s = broadcast_like(sg.data("r", [3]), x)          # new dim is known from nothing
        assert s.op.name == "broadcast_like" and s.shape == (None, 3)
        t = broadcast_like(sg.data("c", [1, 1]), sg.data("y", [2, 3]))
        assert t.op.name == "broadcast_to" and t.shape == (2, 3)
        k = broadcast_like(sg.data("k", [None, 1]), x)    # keeps x's unknown dim statically
        assert k.op.name == "broadcast_to" and k.op.attrs["shape"] == (-1, 3)


@pytest.mark.parametrize("sample", [s for s in SAMPLES if REGISTRY[s.op].category == INJECTIVE],
                         ids=lambda s: s.id)
def test_numpy_emitters_match_reference(sample):
    check_numpy_emitters(sample)
