"""Program <-> JSON round trips (symgrad.ir.serialize)."""
import hashlib
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.errors import ArtifactError
from symgrad.ir import dims
from symgrad.ir.program import Block
from symgrad.ir.serialize import (decode_attr, encode_attr, fetches_from_json, program_from_json,
                                   program_to_json)
from symgrad.ops.core import get_op, op_table


class ArrayStore(dict):
    """Content-addressed array sink/source, so equal arrays get equal names."""

    def sink(self, array):
        name = hashlib.sha256(array.dtype.str.encode() + str(array.shape).encode()
                              + array.tobytes()).hexdigest()[:16]
        self[name] = np.array(array)
        return name


def round_trip(program):
    store = ArrayStore()
    text = json.dumps(program_to_json(program, store.sink), allow_nan=False)
    loaded = program_from_json(json.loads(text), store.__getitem__, op_table())
    return loaded, store


def body(program):
    """The printed program without its header line (which holds the program's uid)."""
    return str(program).split("\n", 1)[1]


def mlp_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4])
        w = sg.parameter("w", [4, 3], init=np.arange(12, dtype="float32").reshape(4, 3) / 10)
        b = sg.parameter("b", [3], dtype="float32", init=0.5, stop_gradient=True)
        h = sg.tanh(x @ w + b)
        h.name = "hidden"
        y = sg.sum(h[1:, ::2], axis=(0,), keepdims=True) * 2.0
        z = sg.cast(sg.argmax(h, axis=1), "float64")
    return prog, [y, z]


def test_round_trip_prints_and_verifies_identically():
    prog, _ = mlp_program()
    loaded, _ = round_trip(prog)
    loaded.verify()
    assert body(loaded) == body(prog)
    assert [v.name for v in loaded.inputs] == ["x"]
    assert [v.name for v in loaded.parameters] == ["w", "b"]
    assert loaded.find("b").stop_gradient and not loaded.find("w").stop_gradient
    assert loaded.find("hidden").id == prog.find("hidden").id
    assert loaded._next_id == prog._next_id


def test_round_trip_is_a_fixed_point_and_keeps_attr_types():
    prog, _ = mlp_program()
    loaded, store = round_trip(prog)
    assert program_to_json(loaded, ArrayStore().sink) == program_to_json(prog, ArrayStore().sink)
    for old, new in zip(prog.ops, loaded.ops):
        assert old.opdef is new.opdef and old.loc == new.loc
        for key, value in old.attrs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(new.attrs[key], value)
                assert new.attrs[key].dtype == value.dtype and not new.attrs[key].flags.writeable
            else:
                assert new.attrs[key] == value and type(new.attrs[key]) is type(value)


def test_loaded_program_compiles_to_the_same_results():
    prog, fetches = mlp_program()
    loaded, _ = round_trip(prog)
    ids = [v.id for v in fetches]
    by_id = {v.id: v for v in loaded.values()}
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    expected = sg.compile(prog, fetches, backend="interpreter")(x)
    got = sg.compile(loaded, [by_id[i] for i in ids], backend="interpreter")(x)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)


def test_backward_provenance_and_grad_links_survive():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], dtype="float64")
        y = sg.tanh(x)
        with prog.backward_of(y.op):
            g = sg.negative(y)
        with prog.backward_of(g.op):  # second order: provenance chains
            gg = sg.multiply(g, g)
    x.grad = gg
    loaded, _ = round_trip(prog)
    assert body(loaded) == body(prog)
    new_ops = loaded.ops
    assert new_ops[2].forward_op is new_ops[1] and new_ops[3].forward_op is new_ops[2]
    assert loaded.inputs[0].grad is new_ops[3].results[0]


def test_detached_forward_op_is_kept_for_provenance():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], dtype="float64")
        y = sg.tanh(x)
        with prog.backward_of(y.op):
            sg.negative(x)
    del prog.global_block().ops[1]  # a pass removed the forward op; provenance still names it
    loaded, _ = round_trip(prog)
    assert body(loaded) == body(prog)
    assert "# backward of %1 = tanh(%x)" in str(loaded)
    assert loaded.ops[1].forward_op not in loaded.ops
    loaded.verify()


def test_nested_blocks_round_trip():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2, 3])
        y = sg.tanh(x)
    outer = y.op
    inner = Block(prog, parent_op=outer)
    t = inner.append_op(get_op("negative"), [x], {}, [(x.shape, x.dtype)]).result
    inner.append_op(get_op("multiply"), [t, x], {}, [(x.shape, x.dtype)])
    second = Block(prog, parent_op=outer)
    second.append_op(get_op("add"), [x, x], {}, [(x.shape, x.dtype)])
    outer.blocks[:] = [inner, second]
    with sg.program_guard(prog):
        sg.add(y, x)
    loaded, _ = round_trip(prog)
    assert body(loaded) == body(prog)
    new_outer = loaded.ops[1]
    assert [[op.name for op in b.ops] for b in new_outer.blocks] == [["negative", "multiply"],
                                                                    ["add"]]
    assert all(b.parent_op is new_outer and b.program is loaded for b in new_outer.blocks)
    first = new_outer.blocks[0].ops
    assert first[1].inputs[0] is first[0].results[0]
    assert first[1].inputs[1] is loaded.inputs[0]
    assert loaded._next_id == prog._next_id


def test_unknown_op_is_a_clear_error():
    prog, _ = mlp_program()
    store = ArrayStore()
    obj = program_to_json(prog, store.sink)
    obj["ops"][2]["op"] = "no_such_op"
    with pytest.raises(ArtifactError, match="no_such_op.*not registered"):
        program_from_json(obj, store.__getitem__, op_table())


@pytest.mark.parametrize("corrupt, match", [
    (lambda o: o.update(version=99), "version 99"),
    (lambda o: o.update(format="other"), "not a serialized symgrad program"),
    (lambda o: o["ops"][3]["inputs"].__setitem__(0, 999), "op matmul uses value #999"),
    (lambda o: o["ops"][3].pop("results"), "malformed"),
    (lambda o: o["ops"][1].update(id=0), "op id 0 appears twice"),
    (lambda o: o["ops"][3]["attrs"].update(bad={"$nope": 1}), "unknown attr tag"),
    (lambda o: o["ops"][3]["attrs"].update(bad={"$object": "os.system", "fields": {}}),
     r"unknown attr tag '\$object'"),
])
def test_malformed_descriptions_raise_artifact_error(corrupt, match):
    prog, _ = mlp_program()
    store = ArrayStore()
    obj = program_to_json(prog, store.sink)
    corrupt(obj)
    with pytest.raises(ArtifactError, match=match):
        program_from_json(obj, store.__getitem__, op_table())


def test_unserializable_attr_names_the_op():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.tanh(sg.data("x", [2]))
    y.op.attrs["callback"] = print
    with pytest.raises(TypeError, match="tanh.*builtin_function_or_method"):
        program_to_json(prog, ArrayStore().sink)


def test_attr_encoding_is_tagged_json():
    store = ArrayStore()
    value = {"t": (1, None, slice(None, 3, -1)), "d": np.dtype("int8"),
             "s": np.float32(1.5), "e": Ellipsis, 2: [float("-inf"), True, "x"]}
    encoded = encode_attr(value, store.sink)
    text = json.dumps(encoded, allow_nan=False)
    decoded = decode_attr(json.loads(text), store.__getitem__)
    assert decoded == value
    assert type(decoded["s"]) is np.float32 and isinstance(decoded["t"], tuple)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=5),
                    st.floats(allow_nan=False, width=64))
attr_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.lists(inner, max_size=3).map(tuple),
                                     st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=10)


@settings(max_examples=60, deadline=None)
@given(attr_values)
def test_attr_round_trip_property(value):
    text = json.dumps(encode_attr(value, None), allow_nan=False)
    assert decode_attr(json.loads(text), None) == value


def test_nan_attr_round_trips():
    decoded = decode_attr(json.loads(json.dumps(encode_attr(float("nan"), None))), None)
    assert math.isnan(decoded)


def test_fused_program_round_trips_and_runs_the_same():
    from symgrad.passes import DEFAULT_PIPELINE

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4])
        w = sg.parameter("w", [4, 3], init=np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3))
        y = sg.sum(sg.exp(sg.tanh(x @ w) * 2.0 + 1.0), axis=1)
        z = sg.tanh(x) * 3.0
    compiled = sg.compile(prog, [y, z], backend="interpreter", passes=DEFAULT_PIPELINE)
    assert any(op.name == "fusion" for op in compiled.program.ops)
    store = ArrayStore()
    obj = json.loads(json.dumps(program_to_json(compiled.program, store.sink, compiled.fetches)))
    loaded = program_from_json(obj, store.__getitem__, op_table())
    loaded.verify()
    assert body(loaded) == body(compiled.program)
    fused = [op for op in loaded.ops if op.name == "fusion"]
    for op in fused:
        (block,) = op.blocks
        assert block.parent_op is op and not block.args
        assert all(v.op.block is block for v in block.yields)
        assert [v.id for v in block.yields] == [v.id for v in op.results]
    fetches = fetches_from_json(obj, loaded)
    assert [v.id for v in fetches] == [v.id for v in compiled.fetches]
    x = np.random.default_rng(3).standard_normal((2, 4)).astype("float32")
    for e, g in zip(compiled(x), sg.compile(loaded, fetches, backend="interpreter")(x)):
        assert e.tobytes() == g.tobytes()


def test_loaded_program_is_differentiated_again():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], dtype="float64")
        y = sg.sum(sg.tanh(x) * x)
        gx, = sg.ir_backward.grad(y, [x], create_graph=True)
    store = ArrayStore()
    obj = json.loads(json.dumps(program_to_json(prog, store.sink, [y, gx])))
    loaded = program_from_json(obj, store.__getitem__, op_table())
    new_y, new_gx = fetches_from_json(obj, loaded)
    assert any(op.forward_op is not None for op in loaded.ops)
    ggx, = sg.ir_backward.grad(sg.sum(new_gx), [loaded.inputs[0]])
    loaded.verify()
    value = np.array([0.1, -0.5, 2.0])
    got = sg.compile(loaded, [new_gx, ggx], backend="interpreter")(value)
    t = np.tanh(value)
    np.testing.assert_allclose(got[0], t + value * (1 - t ** 2), rtol=1e-12)
    np.testing.assert_allclose(got[1], 2 * (1 - t ** 2) - 2 * value * t * (1 - t ** 2),
                               rtol=1e-12)


def test_long_chain_needs_no_recursion():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", [2])
        for _ in range(1500):  # deeper than the default recursion limit
            y = sg.tanh(y)
    loaded, _ = round_trip(prog)
    assert len(loaded.ops) == 1501 and loaded.ops[-1].inputs[0] is loaded.ops[-2].results[0]


@pytest.mark.parametrize("first_id", [None, 10**9 - 1], ids=["any-count", "at-a-digit-boundary"])
def test_a_sum_of_anonymous_dims_loads_as_it_was_saved(monkeypatch, first_id):
    """However many symbols the process made before (the serial run of this file once made the
    original ``?0 + ?1`` and the loaded one ``?1 + ?0``), the sum saves and loads as itself."""
    if first_id is not None:   # the saved ?0 and ?1 straddle 10**9, the loaded ones do not
        monkeypatch.setattr(dims, "_anonymous_ids", itertools.count(first_id))
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.concatenate([sg.data("a", [None, 3]), sg.data("b", [None, 3])], axis=0)
    assert str(y.dims[0]) == "?0 + ?1"
    loaded, _ = round_trip(prog)
    loaded.verify()
    assert body(loaded) == body(prog)
    assert body(round_trip(loaded)[0]) == body(prog)


def _sample_ids():
    from tests.ops.samples import ALL_SAMPLES

    return ALL_SAMPLES


@pytest.mark.parametrize("sample", _sample_ids(), ids=lambda s: s.id)
def test_every_op_sample_round_trips(sample):
    """Every registered op's attrs survive the round trip: same text, same results."""
    prog = sg.Program()
    with sg.program_guard(prog):
        result = sample.build(*sample.declare(sg))
    fetches = list(result) if isinstance(result, (tuple, list)) else [result]
    store = ArrayStore()
    obj = json.loads(json.dumps(program_to_json(prog, store.sink, fetches), allow_nan=False))
    loaded = program_from_json(obj, store.__getitem__, op_table())
    loaded.verify()
    assert body(loaded) == body(prog)
    expected = sg.compile(prog, fetches, backend="interpreter")(**sample.feeds())
    got = sg.compile(loaded, fetches_from_json(obj, loaded), backend="interpreter")(
        **sample.feeds())
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
        assert g.dtype == e.dtype


def _twin_program():
    """Two ops computing the same numbers, the second marked as the first's twin, and a
    reshape marked ``passes_cotangents``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2, 3], "float64")
        a = sg.tanh(x)
        b = sg.tanh(x)
        b.op.twin_of = (a,)
        y = sg.reshape(a, [6])
        y.op.passes_cotangents = True
    return prog, a, b, y


def test_round_trip_keeps_twins_and_passes_cotangents():
    prog, a, b, y = _twin_program()
    loaded, _ = round_trip(prog)
    assert body(loaded) == body(prog)
    assert "twin of %1" in body(loaded) and "passes cotangents" in body(loaded)
    ops = loaded.ops
    (twin,) = [op for op in ops if op.twin_of is not None]
    assert twin.twin_of[0] is ops[1].results[0] and twin is ops[2]
    assert [op.passes_cotangents for op in ops] == [False, False, False, True]
    loaded.verify()


def test_clone_maps_twins_and_drops_one_whose_values_are_not_copied():
    from symgrad.ir.graph import ancestors_of

    prog, a, b, y = _twin_program()
    copy, value_map = prog.clone()
    assert value_map[b].op.twin_of == (value_map[a],)
    assert value_map[y].op.passes_cotangents
    keep = ancestors_of([b])           # a is not kept: the copy of b stands in for nothing
    part, value_map = prog.clone(keep=keep)
    assert a not in value_map and value_map[b].op.twin_of is None


def test_verifier_checks_twins():
    from symgrad.errors import VerificationError

    prog, a, b, y = _twin_program()
    prog.verify()
    b.op.twin_of = (a, a)
    with pytest.raises(VerificationError, match="twin_of has 2 entries for 1 results"):
        prog.verify()
    b.op.twin_of = (y,)
    with pytest.raises(VerificationError, match="twin_of names"):
        prog.verify()
    a.op.twin_of = (b,)                 # b comes after a
    b.op.twin_of = None
    with pytest.raises(VerificationError, match="not defined earlier"):
        prog.verify()
