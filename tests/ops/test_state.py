"""``sg.assign``: building it, its errors, and ``program.assignments``."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import DTypeError, ProgramMismatchError, ScopeError, ShapeError
from symgrad.ops.state import assignments


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [3], init=1.0)
        b = sg.parameter("b", [], "float64", init=0.0)
    return prog, w, b


def test_assign_returns_the_next_value_and_records_the_assignment():
    prog, w, b = _program()
    with sg.program_guard(prog):
        new_w = sg.assign(w * 2.0, w)
        new_b = sg.assign(0.5, b)                 # a number becomes a constant of b's dtype
    assert new_w.op.name == "assign" and new_w.type_str == w.type_str
    assert new_b.op.inputs[0].dtype == np.float64
    assert prog.assignments == {w: new_w, b: new_b}
    assert "assign(" in str(prog)


def test_the_last_assign_wins_and_assignments_follow_parameter_order():
    prog, w, b = _program()
    with sg.program_guard(prog):
        sg.assign(0.5, b)
        sg.assign(w + 1.0, w)
        last = sg.assign(w * 3.0, w)
    assert list(assignments(prog)) == [w, b]
    assert assignments(prog)[w] is last


@pytest.mark.parametrize("make, error, pattern", [
    (lambda w, v: sg.assign(v["x"], w), ShapeError,
     r"assign: the value float32\[4\] must have the shape of the parameter float32\[3\]"),
    (lambda w, v: sg.assign(v["x64"], w), DTypeError,
     r"assign: .*float64\[3\].*float32\[3\]"),
    (lambda w, v: sg.assign(np.zeros(2), w), ShapeError, r"float32\[2\]"),
    (lambda w, v: sg.assign(w, v["doubled"]), TypeError,
     r"target must be a parameter .*'multiply'"),
    (lambda w, v: sg.assign(w, "w"), TypeError, r"target must be a parameter .*got str"),
    (lambda w, v: sg.assign(w, v["x"]), TypeError, r"target must be a parameter .*'data'"),
])
def test_bad_assigns_raise_clear_errors_and_leave_the_program_unchanged(make, error, pattern):
    prog, w, b = _program()
    with sg.program_guard(prog):
        values = {"x": sg.data("x", [4]), "x64": sg.data("x64", [3], "float64"),
                  "doubled": w * 2.0}
        before = str(prog)
        with pytest.raises(error, match=pattern):
            make(w, values)
    assert str(prog) == before


def test_assign_of_a_value_of_another_program():
    prog, w, _ = _program()
    other, v, _ = _program()
    with pytest.raises(ProgramMismatchError):
        sg.assign(v, w)


def test_assign_inside_a_region_is_refused():
    prog, w, b = _program()
    with sg.program_guard(prog):
        flag = sg.data("flag", [], "bool")
        with pytest.raises(ScopeError, match="global block.*return the value"):
            sg.cond(flag, lambda: sg.assign(w * 2.0, w), lambda: w)
        with pytest.raises(ScopeError, match="global block"):
            sg.fori_loop(0, 3, lambda i, v: sg.assign(v, w), w)


def test_gradients_flow_through_an_assign_result_to_its_value():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.parameter("w", [3], "float64", init=0.0)
        loss = sg.sum(sg.assign(x * x, w))
        gx, = ir_backward.grad(loss, [x])
    fn = sg.compile(prog, [gx], backend="interpreter")
    np.testing.assert_allclose(fn(x=np.array([1.0, 2.0, 3.0]))[0], [2.0, 4.0, 6.0])
