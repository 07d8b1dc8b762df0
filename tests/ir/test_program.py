import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ProgramMismatchError, ShapeError, VerificationError


def build_small():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        w = sg.parameter("w", [3], "float32", init=np.arange(3))
        y = sg.tanh(x * w + 2.0)
    return prog, x, w, y


def test_values_know_their_types_and_names():
    prog, x, w, y = build_small()
    assert x.shape == (None, 3) and x.dtype == np.float32 and x.name == "x"
    assert w.shape == (3,) and w.name == "w"
    assert y.name is None and y.op.name == "tanh" and y.op.inputs[0].op.name == "add"
    assert not y.stop_gradient
    assert prog.inputs == [x] and prog.parameters == [w]
    assert prog.ops is prog.global_block().ops


def test_feedable_lists_data_then_parameters_as_signatures_do():
    prog, x, w, y = build_small()
    with sg.program_guard(prog):
        z = sg.data("z", [3], "float32")
    assert prog.inputs == [x, z] and prog.parameters == [w]
    assert prog.feedable == [x, z, w]
    compiled = sg.compile(prog, [y], backend="interpreter")
    assert [s.name for s in compiled.signature] == [v.name for v in prog.feedable]
    assert [s.kind for s in compiled.signature] == ["data", "data", "parameter"]
    assert compiled.input_names == [v.name for v in prog.inputs]


def test_minus_one_means_unknown():
    with sg.program_guard(sg.Program()):
        assert sg.data("x", [-1, 2]).shape == (None, 2)


def test_weak_python_scalars_keep_float32():
    prog, x, w, y = build_small()
    assert y.dtype == np.float32
    two = y.op.inputs[0].op.inputs[1]
    assert two.op.name == "constant" and two.dtype == np.float32 and two.stop_gradient


def test_constant_defaults():
    with sg.program_guard(sg.Program()):
        assert sg.constant(2.0).dtype == np.float32
        assert sg.constant(2).dtype == np.int64
        assert sg.constant(np.ones(3)).dtype == np.float64
        assert sg.constant(np.ones(3), dtype="float16").dtype == np.float16
        assert sg.constant(1.5).shape == ()


def test_printer_shows_one_op_a_line_with_types_and_names():
    prog, x, w, y = build_small()
    text = str(prog)
    lines = text.splitlines()
    assert len(lines) == len(prog.ops) + 2
    assert "%x = data() : float32[?0, 3]" in text
    assert f"%{y.id} = tanh(%{y.op.inputs[0].id}) : float32[?0, 3]" in text
    assert "init=" in text


def test_printer_quotes_odd_names():
    with sg.program_guard(sg.Program()) as prog:
        sg.data('x"; import os; "', [2])
    assert '%"x\\"; import os; \\""' in str(prog)


def test_bool_and_hash_semantics():
    prog, x, w, y = build_small()
    with pytest.raises(TypeError):
        bool(x)
    with pytest.raises(TypeError):
        if x == w:  # builds an op, then bool() raises
            pass
    assert len({x, w, y}) == 3
    table = {x: 1}
    assert table[x] == 1


def test_mixing_programs_is_a_value_error():
    _, x, _, _ = build_small()
    _, x2, _, _ = build_small()
    with pytest.raises(ProgramMismatchError) as info:
        x + x2
    assert isinstance(info.value, ValueError)


def test_ops_go_into_the_inputs_program_whatever_guard_is_active():
    prog, x, w, y = build_small()
    other = sg.Program()
    with sg.program_guard(other):
        z = sg.tanh(y)
    assert z.program is prog and not other.ops


def test_duplicate_input_names_rejected():
    with sg.program_guard(sg.Program()):
        sg.data("x", [1])
        with pytest.raises(ValueError, match="already has an input"):
            sg.parameter("x", [1], init=np.zeros(1))


def test_parameter_init_forms():
    with sg.program_guard(sg.Program()):
        assert np.all(sg.parameter("a", [2], init=None).op.attrs["init"] == 0)
        assert np.all(sg.parameter("b", [2], init=3.0).op.attrs["init"] == 3)
        c = sg.parameter("c", [2, 2], "float64", init=lambda s, d: np.ones(s, d))
        assert c.op.attrs["init"].dtype == np.float64
        with pytest.raises(ShapeError, match="init has shape"):
            sg.parameter("d", [3], init=np.zeros(2))
        with pytest.raises(ShapeError, match="fully known"):
            sg.parameter("e", [None], init=np.zeros(2))


def test_shape_error_names_op_shapes_and_user_line():
    prog, x, w, y = build_small()
    with pytest.raises(ShapeError) as info:
        x * np.ones((4, 5), "float32")
    message = str(info.value)
    assert message.startswith("multiply:")
    assert "[?, 3]" in message and "[4, 5]" in message
    assert "test_program.py:" in message


def test_verifier_accepts_built_programs_and_rejects_broken_ones():
    prog, x, w, y = build_small()
    prog.verify()
    prog.ops[-1].results[0].shape = (7,)
    with pytest.raises(VerificationError, match="shape rule"):
        prog.verify()
    prog2, *_ = build_small()
    prog2.ops.insert(0, prog2.ops.pop())  # use before definition
    with pytest.raises(VerificationError, match="before it is defined"):
        prog2.verify()


def test_clone_is_deep_and_preserves_ids():
    prog, x, w, y = build_small()
    copy, mapping = prog.clone()
    assert str(copy).splitlines()[1:] == str(prog).splitlines()[1:]
    assert mapping[y] is not y and mapping[y].id == y.id
    assert copy.inputs == [mapping[x]]
    copy.verify()


def test_clone_keeps_only_the_given_ops_and_their_sources():
    from symgrad.ir.graph import ancestors_of

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        unused = sg.data("unused", [3], "float64")
        w = sg.parameter("w", [3], "float64", init=np.ones(3))
        y = sg.tanh(x * w)
        sg.exp(unused)
    copy, mapping = prog.clone(keep=ancestors_of([y]))
    assert [op.name for op in copy.ops] == ["data", "parameter", "multiply", "tanh"]
    assert copy.inputs == [mapping[x]] and copy.parameters == [mapping[w]]
    assert unused not in mapping and mapping[y].id == y.id
    copy.verify()


def test_transaction_rolls_back():
    prog, x, w, y = build_small()
    before = str(prog)
    with pytest.raises(RuntimeError):
        with prog.transaction():
            sg.exp(y) if hasattr(sg, "exp") else sg.tanh(y)
            raise RuntimeError("boom")
    assert str(prog) == before
    z = sg.tanh(y)
    assert z.id == y.id + 1


def test_find_by_name():
    prog, x, *_ = build_small()
    assert prog.find("x") is x
    with pytest.raises(KeyError):
        prog.find("nope")


def test_operators_build_ops():
    prog, x, w, y = build_small()
    for expr, name in [(lambda: x + w, "add"), (lambda: x * w, "multiply"), (lambda: -x, "negative"),
                       (lambda: 1.0 + x, "add"), (lambda: 2.0 * x, "multiply")]:
        assert expr().op.name == name
