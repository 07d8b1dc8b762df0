"""Source ops as a new user meets them: parameters built without ``init``, Values built
outside any ``program_guard``, and NumPy arrays that widen a float32 graph."""
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.ops import initializers, source


def _init(value):
    return value.op.attrs["init"]


def test_a_parameter_without_init_gets_glorot_weights_and_zero_biases():
    with sg.program_guard(sg.Program()):
        w = sg.parameter("w", [784, 256])
        conv = sg.parameter("conv", [16, 3, 5, 5], "float64")
        b = sg.parameter("b", [256])
        scalar = sg.parameter("scale", [])
        steps = sg.parameter("steps", [2, 3], "int64")
    limit = np.sqrt(6 / (784 + 256))
    assert _init(w).dtype == np.float32 and np.abs(_init(w)).max() <= limit
    assert _init(w).std() == pytest.approx(limit / np.sqrt(3), rel=0.02)   # U(-a, a)
    conv_limit = np.sqrt(6 / ((16 + 3) * 25))
    assert _init(conv).dtype == np.float64 and np.abs(_init(conv)).max() <= conv_limit
    assert _init(conv).std() == pytest.approx(conv_limit / np.sqrt(3), rel=0.05)
    for zero in (b, scalar, steps):
        assert not _init(zero).any()


def test_the_default_draw_is_seeded_by_the_name():
    def build(names):
        with sg.program_guard(sg.Program()):
            return [_init(sg.parameter(name, [4, 3])) for name in names]

    first, second = build(["w1", "w2"])
    again, = build(["w1"])
    np.testing.assert_array_equal(first, again)          # rebuilding gives the same values
    assert not np.array_equal(first, second)             # two parameters differ
    np.testing.assert_array_equal(first, initializers.default_init("w1", (4, 3), "float32"))


def test_initializers_can_be_passed_as_init():
    glorot = initializers.glorot_uniform(seed=3)
    with sg.program_guard(sg.Program()):
        w = sg.parameter("w", [5, 2], init=glorot)
        b = sg.parameter("b", [2], init=sg.initializers.zeros)
    np.testing.assert_array_equal(_init(w), glorot((5, 2), "float32"))
    assert not _init(b).any()
    with pytest.raises(ValueError, match="rank 2 or more"):
        glorot((5,), "float32")


def test_compiled_programs_start_from_the_default_init():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4])
        w = sg.parameter("w", [4, 3])
        y = x @ w
    x_value = np.ones((2, 4), "float32")
    got, = sg.compile(prog, [y], backend="numpy")(x=x_value)
    np.testing.assert_allclose(got, x_value @ _init(w), rtol=1e-6)


def test_values_built_outside_program_guard_give_an_actionable_error():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3])
    stray = sg.parameter("stray_weight_of_test_source", [3])   # no guard: the default program
    assert stray.program is sg.default_main_program() and stray.program is not prog
    with pytest.raises(sg.ProgramMismatchError) as info:
        x * stray
    message = str(info.value)
    assert f"program #{stray.program.uid} is the default program" in message
    assert "outside any `with sg.program_guard(prog):` block" in message
    with pytest.raises(sg.ProgramMismatchError, match="is the default program"):
        sg.compile(prog, [sg.tanh(stray)])
    with pytest.raises(sg.ProgramMismatchError) as info:   # two guarded programs: no hint
        x + _other_program_value()
    assert "default program" not in str(info.value)


def _other_program_value():
    with sg.program_guard(sg.Program()):
        return sg.data("x", [3])


@pytest.fixture
def fresh_promotion_warnings(monkeypatch):
    monkeypatch.setattr(source, "_warned_promotions", set())


@pytest.mark.parametrize("operand", [np.ones(3), np.float64(2.0), [1.0, 2.0, 3.0]],
                         ids=["array", "numpy scalar", "list"])
def test_a_float64_operand_widening_a_float32_graph_warns_once(operand,
                                                               fresh_promotion_warnings):
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [3], "float32")
        with pytest.warns(sg.PromotionWarning, match="float64 array operand promotes "
                                                     "float32 Values to float64") as caught:
            y = x * operand
        assert caught[0].filename == __file__                 # points at the user's line
        assert y.dtype == np.float64                          # NumPy's promotion, kept
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert (x + operand).dtype == np.float64          # once per pair of dtypes


def test_operands_that_keep_the_dtype_do_not_warn(fresh_promotion_warnings):
    with sg.program_guard(sg.Program()), warnings.catch_warnings():
        warnings.simplefilter("error")
        x = sg.data("x", [3], "float32")
        i = sg.data("i", [3], "int32")
        assert (x * np.ones(3, "float32")).dtype == np.float32
        assert (x * 2.0).dtype == np.float32                  # Python scalars are weak
        assert (x * sg.constant(np.ones(3), dtype="float64")).dtype == np.float64   # explicit
        assert (i * np.ones(3)).dtype == np.float64           # no float32 graph to widen
