"""Building cond, while_loop, scan and fori_loop: results, structures, and build-time errors
that name the op and the function, leaving the program unchanged."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import DTypeError, ProgramMismatchError, ScopeError, ShapeError
from tests.ops.samples import interpret


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")
    return prog, x, w


def _unchanged(prog, build, error, match):
    """``build()`` raises ``error`` matching ``match`` and leaves ``prog`` as it was."""
    before, next_id = str(prog), prog._next_id
    with sg.program_guard(prog), pytest.raises(error, match=match):
        build()
    assert str(prog) == before and prog._next_id == next_id


# --- results ------------------------------------------------------------------------------------
def test_cond_returns_the_structure_of_its_branches_and_captures_outer_values():
    def build(x, w):
        out = sg.cond(sg.sum(x) > 0.0, lambda a: {"n": 1} and [(a * w, a)],
                      lambda a: [(a - w, a * 2.0)], x)
        assert isinstance(out, list) and isinstance(out[0], tuple)
        return out[0]
    for sign in (1.0, -1.0):
        x, w = np.array([1.0, 2.0, 3.0]) * sign, np.array([0.5, 0.25, 2.0])
        _, (first, second) = interpret(build, x, w)
        np.testing.assert_allclose(first, x * w if sign > 0 else x - w)
        np.testing.assert_allclose(second, x if sign > 0 else x * 2.0)
    prog, x, w = _program()
    with sg.program_guard(prog):
        sg.cond(sg.sum(x) > 0.0, lambda a: a * w, lambda a: a, x)
    (op,) = [o for o in prog.ops if o.name == "cond"]
    assert op.inputs[2] is w and op.opdef.explicit_inputs(op.attrs) == 2   # w is captured


def test_cond_with_a_python_bool_builds_one_branch_only():
    prog, x, _ = _program()
    with sg.program_guard(prog):
        y = sg.cond(True, lambda a: a * 2.0, lambda a: sg.sqrt(a), x)
    assert [op.name for op in prog.ops][-1] == "multiply" and y.op.name == "multiply"
    assert "sqrt" not in str(prog)


def test_scan_stacks_ys_keeps_none_and_structure():
    def build(xs):
        def f(carry, x):
            a, (b,) = carry
            return (a + x, (b * x,)), (a, None)
        (a, (b,)), (ys, nothing) = sg.scan(f, (xs[0] * 0.0, (xs[0] * 0.0 + 1.0,)), xs)
        assert nothing is None
        return a, b, ys
    xs = np.arange(1.0, 13.0).reshape(4, 3)
    _, (a, b, ys) = interpret(build, xs)
    np.testing.assert_allclose(a, xs.sum(0))
    np.testing.assert_allclose(b, xs.prod(0))
    np.testing.assert_allclose(ys, np.concatenate([np.zeros((1, 3)), np.cumsum(xs, 0)[:-1]]))


def test_scan_with_length_and_no_xs_and_zero_steps():
    def build(x):
        ten, _ = sg.scan(lambda c, _: (c * 2.0, None), x, length=10)
        same, ys = sg.scan(lambda c, _: (c * 2.0, c), x, length=0)
        return ten, same, ys
    _, (ten, same, ys) = interpret(build, np.ones(2))
    np.testing.assert_allclose(ten, [1024.0, 1024.0])
    np.testing.assert_allclose(same, [1.0, 1.0])
    assert ys.shape == (0, 2)


def test_scan_over_a_run_time_length():
    def build(xs):
        return sg.scan(lambda c, x: (c + x, c), xs[0] * 0.0, xs)
    out, (total, ys) = interpret(build, np.ones((5, 2)), dynamic=(0,))
    assert out[1].shape == (None, 2)
    np.testing.assert_allclose(total, [5.0, 5.0])
    assert ys.shape == (5, 2)


def test_while_loop_and_fori_loop():
    def build(x):
        n, v = sg.while_loop(lambda n, v: sg.sum(v) < 100.0, lambda n, v: [n + 1, v * 2.0],
                             [sg.constant(np.int64(0)), x])
        static = sg.fori_loop(0, 4, lambda i, v: v + sg.cast(i, "float64"), x)
        dynamic = sg.fori_loop(sg.constant(np.int64(1)), n, lambda i, v: v * 2.0, x)
        return n, v, static, dynamic
    x = np.array([1.0, 2.0])
    _, (n, v, static, dynamic) = interpret(build, x)
    assert int(n) == 6 and np.allclose(v, x * 64)
    np.testing.assert_allclose(static, x + 6)
    np.testing.assert_allclose(dynamic, x * 32)


def test_fori_loop_builds_a_scan_for_static_bounds_and_a_while_loop_otherwise():
    prog, x, _ = _program()
    with sg.program_guard(prog):
        sg.fori_loop(0, 3, lambda i, v: v * 2.0, x)
        sg.fori_loop(0, sg.constant(np.int32(3)), lambda i, v: v * 2.0, x)
    assert [op.name for op in prog.ops if op.blocks] == ["scan", "while_loop"]


def test_loop_layouts_name_carries_xs_stacked_outputs_captures_and_trip_count():
    from symgrad import ir_backward
    from symgrad.ops.control_flow import loop_layout
    prog, x, w = _program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [4, 3], "float64")
        sg.scan(lambda c, s: (c * w + s, c), x, xs)
        (v,) = sg.while_loop(lambda v: sg.sum(v) < 10.0, lambda v: [v + w], [x])
        cond = sg.cond(sg.sum(x) > 0.0, lambda a: a, lambda a: a * 2.0, x)
    over_xs, loop = [op for op in prog.ops if op.blocks and op.name != "cond"]
    layout = loop_layout(over_xs)
    assert layout.inits == [x] and layout.xs == [xs] and layout.captures == [w]
    assert layout.length == 4 and layout.trip_count is None and not layout.reverse
    assert layout.carry_args == layout.body.args[:1] and len(layout.x_args) == 1
    assert layout.stacked_results == over_xs.results[1:] and layout.finals == over_xs.results[:1]
    with pytest.raises(TypeError, match="cannot count"):
        layout.grown_attrs(counted=True)
    layout = loop_layout(loop)
    assert layout.body is loop.blocks[1] and layout.xs == [] and layout.captures == [w]
    assert layout.trip_count is None and layout.can_count
    assert layout.grown_attrs(stacked=2, counted=True) == dict(
        loop.attrs, num_stacked=2, counted=True)
    assert loop_layout(cond.op) is None
    with sg.program_guard(prog):
        ir_backward.grad(sg.sum(v), [w])   # the reverse scan runs the counted trips
    assert not loop_layout(loop).counted     # unchanged: a counting copy took its place
    (loop,) = [op for op in prog.ops if op.name == "while_loop"]
    layout = loop_layout(loop)
    assert layout.counted and layout.trip_count is loop.results[-1] and v.op is loop
    (reverse,) = [op for op in prog.ops if op.name == "scan" and op is not over_xs]
    layout = loop_layout(reverse)
    assert layout.reverse and layout.length is None
    assert layout.has_length_input and layout.trip_count is loop.results[-1]


def test_regions_print_indented_with_arguments_yields_and_captures():
    prog, x, w = _program()
    with sg.program_guard(prog):
        sg.scan(lambda c, v: (sg.tanh(c * w + v), None), x, sg.stack([x, x]))
    text = str(prog)
    assert "= scan(%x, %" in text and "captures(%w)" in text
    lines = text.splitlines()
    body = next(i for i, line in enumerate(lines) if line.strip().startswith("body("))
    assert lines[body].startswith("    body(") and " : float64[3]" in lines[body]
    assert lines[body + 1].startswith("      %") and lines[body + 4].strip().startswith("yield")


# --- errors --------------------------------------------------------------------------------------
def test_cond_errors_name_the_op_and_the_branch():
    prog, x, w = _program()
    with sg.program_guard(prog):
        total = sg.sum(x)
        p = total > 0.0
        many = x > 0.0
    _unchanged(prog, lambda: sg.cond(p, lambda a: a, lambda a: a[:2], x),
               ShapeError, r"cond: false_fn gives float64\[2\] at position 0, but true_fn "
                           r"has float64\[3\]")
    _unchanged(prog, lambda: sg.cond(p, lambda a: a, lambda a: a > 0.0, x),
               DTypeError, "cond: false_fn gives bool")
    _unchanged(prog, lambda: sg.cond(p, lambda a: (a, a), lambda a: a, x),
               ShapeError, r"true_fn returns \(a Value, a Value\) but false_fn returns a Value")
    _unchanged(prog, lambda: sg.cond(total, lambda a: a, lambda a: a, x),
               DTypeError, "cond: pred must be a bool scalar, got float64")
    _unchanged(prog, lambda: sg.cond(many, lambda a: a, lambda a: a, x),
               ShapeError, r"cond: pred must be a bool scalar, got bool\[3\]")
    _unchanged(prog, lambda: sg.cond(p, lambda a: a * 2.0, lambda a: 1 / 0, x),
               ZeroDivisionError, "division by zero")


def test_while_loop_errors_name_the_function():
    prog, x, _ = _program()
    with sg.program_guard(prog):
        zero = sg.constant(np.int64(0))
    _unchanged(prog, lambda: sg.while_loop(lambda i, v: i < 3, lambda i, v: [i + 1, v[:1]],
                                           [zero, x]),
               ShapeError, r"while_loop: body_fn gives float64\[1\] at position 1, but "
                           r"loop_vars has float64\[3\]")
    _unchanged(prog, lambda: sg.while_loop(lambda i, v: i < 3, lambda i, v: [i + 1.5, v],
                                           [zero, x]),
               DTypeError, "while_loop: body_fn gives float64")
    _unchanged(prog, lambda: sg.while_loop(lambda i, v: i + 1, lambda i, v: [i, v],
                                           [zero, x]),
               DTypeError, "while_loop: cond_fn's result must be a bool scalar")
    _unchanged(prog, lambda: sg.while_loop(lambda i, v: i < 3, lambda i, v: [i], [zero, x]),
               ShapeError, "body_fn gives 1 Values but loop_vars has 2")
    with pytest.raises(TypeError, match="loop_vars must be a non-empty list"):
        sg.while_loop(lambda v: v, lambda v: v, x)


def test_scan_errors():
    prog, x, _ = _program()
    xs = None
    with sg.program_guard(prog):
        xs = sg.stack([x, x])
    _unchanged(prog, lambda: sg.scan(lambda c, v: (c[:2], None), x, xs), ShapeError,
               r"scan: f's carry gives float64\[2\] at position 0, but init has float64\[3\]")
    _unchanged(prog, lambda: sg.scan(lambda c, v: ((c, c), None), x, xs), ShapeError,
               "scan: f returns a carry of structure")
    _unchanged(prog, lambda: sg.scan(lambda c, v: c, x, xs), TypeError,
               r"scan: f must return a pair \(carry, y\)")
    _unchanged(prog, lambda: sg.scan(lambda c, v: (c, None), x, xs, length=5), ShapeError,
               "length=5 but xs have leading dim 2")
    _unchanged(prog, lambda: sg.scan(lambda c, v: (c, None), x, [xs, x]), ShapeError,
               "xs have different leading dims")
    with pytest.raises(TypeError, match="give xs or length"):
        sg.scan(lambda c, v: (c, None), x)


def test_values_of_a_region_cannot_leak_out():
    prog, x, _ = _program()
    leaked = []

    def keep(a):
        leaked.append(sg.exp(a))
        return a

    with sg.program_guard(prog):
        sg.cond(sg.sum(x) > 0.0, keep, lambda a: a, x)
        with pytest.raises(ScopeError, match="was built inside a region"):
            sg.tanh(leaked[0])
        with pytest.raises(ScopeError, match="was built inside a region"):
            sg.cond(sg.sum(x) > 0.0, lambda a: leaked[0], lambda a: a, x)


def test_data_and_parameters_belong_to_the_global_block():
    prog, x, _ = _program()
    with sg.program_guard(prog), pytest.raises(ScopeError, match="global block"):
        sg.cond(sg.sum(x) > 0.0, lambda a: a + sg.data("late", [3], "float64"),
                lambda a: a, x)
    assert "late" not in str(prog)


def test_values_of_another_program_are_refused():
    prog, x, _ = _program()
    other, y, _ = _program()
    with sg.program_guard(prog), pytest.raises(ProgramMismatchError):
        sg.cond(sg.sum(x) > 0.0, lambda a: a, lambda a: a, y)
