"""One test (or a few) per clause of the ``ir_backward.grad`` contract in DESIGN.md."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import GradError
from symgrad.ir.graph import ancestors_of

X = np.array([0.5, -1.0, 2.0])
W = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]])


def run(prog, fetches, **feeds):
    return sg.compile(prog, fetches, backend="interpreter")(**feeds)


def setup(dynamic=False):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None] if dynamic else [3], "float64")
        w = sg.parameter("w", [3, 2], "float64", init=W)
        h = sg.tanh(x @ w)
        loss = sg.sum(h * h)
    return prog, x, w, h, loss


def dloss_dx(x=X):
    h = np.tanh(x @ W)
    return (2 * h * (1 - h * h)) @ W.T


def snapshot(prog):
    return str(prog), prog.num_ops, prog._next_id


def assert_fails_cleanly(prog, error, match, fn):
    before = snapshot(prog)
    grads_before = [v.grad for v in prog.values()]
    with pytest.raises(error, match=match):
        fn()
    assert snapshot(prog) == before
    assert [v.grad for v in prog.values()] == grads_before


# --- outputs / inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda loss, x: ir_backward.grad(None, x), "outputs"),
    (lambda loss, x: ir_backward.grad("loss", x), "outputs"),
    (lambda loss, x: ir_backward.grad(loss, None), "inputs"),
    (lambda loss, x: ir_backward.grad([loss, None], x), r"outputs\[1\]"),
    (lambda loss, x: ir_backward.grad(loss, [x, "x"]), r"inputs\[1\]"),
    (lambda loss, x: ir_backward.grad(loss, 3.0), "inputs"),
    (lambda loss, x: ir_backward.grad(loss, {x}), "inputs"),
])
def test_non_values_are_type_errors_naming_the_argument(call, name):
    prog, x, w, h, loss = setup()
    assert_fails_cleanly(prog, TypeError, name, lambda: call(loss, x))


def test_values_of_two_programs_are_a_value_error():
    prog, x, w, h, loss = setup()
    other = sg.Program()
    with sg.program_guard(other):
        z = sg.data("z", [3], "float64")
    assert_fails_cleanly(prog, ValueError, "program", lambda: ir_backward.grad(loss, [x, z]))


def test_backward_goes_to_the_outputs_program_whatever_guard_is_active():
    prog, x, w, h, loss = setup()
    other = sg.Program()
    with sg.program_guard(other):
        gx, = ir_backward.grad(loss, x)
    assert other.num_ops == 0
    assert gx.program is prog
    np.testing.assert_allclose(run(prog, [gx], x=X)[0], dloss_dx())


def test_grad_with_no_program_guard_active():
    prog, x, w, h, loss = setup()
    gx, gw = ir_backward.grad(loss, [x, w])  # no guard: built from the Values' program
    assert gx.program is prog and gw.program is prog
    np.testing.assert_allclose(run(prog, [gx], x=X)[0], dloss_dx())


# --- seeds --------------------------------------------------------------------------------------
def test_result_sums_over_outputs_of_seeded_products():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        y2 = sg.sum(x * x)
        seed = sg.constant(np.float64(3.0))
    g, = ir_backward.grad([loss, y2], x, grad_outputs=[2.0, seed])
    np.testing.assert_allclose(run(prog, [g], x=X)[0], 2 * dloss_dx() + 3 * 2 * X)


def test_none_seed_means_ones_and_scalar_is_broadcast():
    prog, x, w, h, loss = setup(dynamic=True)
    g_none, = ir_backward.grad(h, x, grad_outputs=[None])
    g_two, = ir_backward.grad(h, x, grad_outputs=[2.0])
    hv = np.tanh(X @ W)
    ones = (1 - hv * hv) @ W.T
    a, b = run(prog, [g_none, g_two], x=X)
    np.testing.assert_allclose(a, ones)
    np.testing.assert_allclose(b, 2 * ones)


def test_seed_value_with_unknown_dim_matches():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2], "float64")
        s = sg.data("s", [None, 2], "float64")
        y = x * 3.0
    g, = ir_backward.grad(y, x, grad_outputs=[s])
    sv = np.arange(4.0).reshape(2, 2)
    np.testing.assert_allclose(run(prog, [g], x=np.ones((2, 2)), s=sv)[0], 3 * sv)


def test_seed_errors():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        wrong_shape = sg.data("s1", [3], "float64")
        wrong_dtype = sg.data("s2", [2], "float32")
    grad = ir_backward.grad
    assert_fails_cleanly(prog, ValueError, r"\[3\].*\[2\]",
                         lambda: grad(h, x, grad_outputs=[wrong_shape]))
    assert_fails_cleanly(prog, TypeError, "float32",
                         lambda: grad(h, x, grad_outputs=[wrong_dtype]))
    assert_fails_cleanly(prog, ValueError, "2 entries for 1",
                         lambda: grad(h, x, grad_outputs=[None, None]))
    assert_fails_cleanly(prog, TypeError, "grad_outputs",
                         lambda: grad(h, x, grad_outputs=wrong_shape))
    assert_fails_cleanly(prog, TypeError, "grad_outputs",
                         lambda: grad(h, x, grad_outputs={"h": None}))
    assert_fails_cleanly(prog, TypeError, r"grad_outputs\[0\]",
                         lambda: grad(h, x, grad_outputs=["ones"]))


def test_duplicate_outputs_sum_their_seeds():
    prog, x, w, h, loss = setup()
    g, = ir_backward.grad([loss, loss], x, grad_outputs=[2.0, 3.0])
    np.testing.assert_allclose(run(prog, [g], x=X)[0], 5 * dloss_dx())


def test_duplicate_inputs_each_get_the_gradient():
    prog, x, w, h, loss = setup()
    g1, g2 = ir_backward.grad(loss, [x, x])
    a, b = run(prog, [g1, g2], x=X)
    np.testing.assert_allclose(a, dloss_dx())
    np.testing.assert_allclose(b, dloss_dx())


def test_input_that_is_an_output_gets_its_seed_plus_what_flows_back():
    prog, x, w, h, loss = setup()
    g_loss, = ir_backward.grad(loss, loss, grad_outputs=[4.0])
    g_h, = ir_backward.grad([h, loss], h)  # seed ones + dloss/dh = 2h
    a, b = run(prog, [g_loss, g_h], x=X)
    assert a == 4.0
    np.testing.assert_allclose(b, 1 + 2 * np.tanh(X @ W))


def test_intermediate_inputs():
    prog, x, w, h, loss = setup()
    gh, gx = ir_backward.grad(loss, [h, x])
    a, b = run(prog, [gh, gx], x=X)
    np.testing.assert_allclose(a, 2 * np.tanh(X @ W))
    np.testing.assert_allclose(b, dloss_dx())


def test_value_used_several_times_sums_cotangents():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(x * x * x + x)
    g, = ir_backward.grad(y, x)
    np.testing.assert_allclose(run(prog, [g], x=X)[0], 3 * X ** 2 + 1)


# --- pruning and provenance ---------------------------------------------------------------------
def test_only_ops_on_a_path_are_differentiated_and_no_dead_ops():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        z = sg.data("z", [3], "float64")
        a = sg.exp(x)
        b = sg.sin(z)           # not on a path from x
        c = sg.power(a, 3.0)    # the exponent's gradient is not needed
        y = sg.sum(c * b)
    n = prog.num_ops
    g, = ir_backward.grad(y, x)
    appended = prog.ops[n:]
    assert all(op.forward_op is not None for op in appended)
    differentiated = {op.forward_op for op in appended}
    assert b.op not in differentiated and z.op not in differentiated
    assert ancestors_of([g]) >= set(appended)  # every appended op feeds the gradient
    assert not any(op.name == "log" for op in appended)  # d/d(exponent) was pruned
    zv = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(run(prog, [g], x=X, z=zv)[0], 3 * np.exp(3 * X) * np.sin(zv))
    prog.verify()


def test_every_backward_op_records_its_forward_op_in_the_printer():
    prog, x, w, h, loss = setup()
    ir_backward.grad(loss, [x, w])
    text = str(prog)
    assert "# backward of" in text and "= tanh(" in text


def test_multi_output_op_with_one_piece_used():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4], "float64")
        a, b = sg.split(x, 2)
        y = sg.sum(sg.exp(a))
    g, = ir_backward.grad(y, x)
    xv = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(run(prog, [g], x=xv)[0], [np.exp(0.1), np.exp(0.2), 0, 0])


# --- no_grad_vars, stop_gradient, integers ------------------------------------------------------
@pytest.mark.parametrize("kind", ["value", "list", "tuple", "set"])
def test_no_grad_vars_forms(kind):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        a = sg.sin(x)
        y = sg.sum(a * x)
    wrap = {"value": lambda v: v, "list": lambda v: [v], "tuple": lambda v: (v,),
            "set": lambda v: {v}}[kind]
    g, = ir_backward.grad(y, x, no_grad_vars=wrap(a))
    np.testing.assert_allclose(run(prog, [g], x=X)[0], np.sin(X))


@pytest.mark.parametrize("bad", ["x", ["x"], 3, {"x": 1}])
def test_no_grad_vars_rejects_strings_and_others(bad):
    prog, x, w, h, loss = setup()
    assert_fails_cleanly(prog, TypeError, "no_grad_vars",
                         lambda: ir_backward.grad(loss, x, no_grad_vars=bad))


def test_no_grad_vars_blocks_paths_and_listed_input_gets_none():
    prog, x, w, h, loss = setup()
    assert_fails_cleanly(prog, GradError, r"inputs\[0\].*%x.*no_grad_vars",
                         lambda: ir_backward.grad(loss, x, no_grad_vars=x))
    assert_fails_cleanly(prog, ValueError, "%x.*no_grad_vars",
                         lambda: ir_backward.grad(loss, x, no_grad_vars=[h]))
    gx, gw = ir_backward.grad(loss, [x, w], no_grad_vars=[x], allow_unused=True)
    assert gx is None and gw is not None


def test_stop_gradient_blocks_paths_through_a_value_but_not_its_own_gradient():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        a = sg.exp(x)
        a.stop_gradient = True
        y = sg.sum(a * x)
        c = sg.constant(np.array([1.0, 2.0, 3.0]))
        z = sg.sum(c * x)
    g, = ir_backward.grad(y, x)  # only the direct path: d/dx = a
    np.testing.assert_allclose(run(prog, [g], x=X)[0], np.exp(X))
    ga, = ir_backward.grad(y, a)  # listed: still gets its own gradient
    np.testing.assert_allclose(run(prog, [ga], x=X)[0], X)
    gc, = ir_backward.grad(z, c)  # a constant (stop_gradient=True) as input
    np.testing.assert_allclose(run(prog, [gc], x=X)[0], X)
    with sg.program_guard(prog):
        only_through_a = sg.sum(a)
    assert_fails_cleanly(prog, ValueError, "stop_gradient",
                         lambda: ir_backward.grad(only_through_a, x))


def test_integer_values_disconnect_paths():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        i = sg.data("i", [3], "int64")
        k = sg.argmax(x)
        mask = sg.cast(x > 0, "float64")
        as_int = sg.cast(x, "int32")
        y = sg.sum(sg.cast(k, "float64") + mask + sg.cast(as_int, "float64") + sg.cast(i, "float64"))
    assert_fails_cleanly(prog, ValueError, "%x.*integer or bool",
                         lambda: ir_backward.grad(y, x))
    assert_fails_cleanly(prog, ValueError, "%i.*dtype int64",
                         lambda: ir_backward.grad(y, i))
    assert ir_backward.grad(y, [x, i], allow_unused=True) == [None, None]
    with sg.program_guard(prog):
        only_argmax = sg.sum(sg.cast(sg.argmax(x), "float64"))
    assert_fails_cleanly(prog, ValueError, "%x.*integer or bool.*argmax",
                         lambda: ir_backward.grad(only_argmax, x))


def test_piecewise_constant_ops_stay_connected_with_zero_gradient():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(sg.floor(x) + sg.sign(x))
    g, = ir_backward.grad(y, x)
    np.testing.assert_array_equal(run(prog, [g], x=X)[0], np.zeros(3))


# --- unused inputs ------------------------------------------------------------------------------
def test_unused_input_error_names_the_input_and_why():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        other = sg.data("other", [3], "float64")
    assert_fails_cleanly(prog, GradError, r"inputs\[1\] \(%other : float64\[3\]\).*no path",
                         lambda: ir_backward.grad(loss, [x, other]))


def test_allow_unused_gives_none_or_zeros():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        other = sg.data("other", [None, 2], "float64")
    gx, go = ir_backward.grad(loss, [x, other], allow_unused=True)
    assert go is None and gx is not None
    gx, go = ir_backward.grad(loss, [x, other], allow_unused=True, unused="zeros")
    assert go.shape == (None, 2) and go.dtype == np.float64
    out = run(prog, [go], x=X, other=np.ones((5, 2)))[0]
    np.testing.assert_array_equal(out, np.zeros((5, 2)))
    with pytest.raises(ValueError, match="unused"):
        ir_backward.grad(loss, x, unused="nan")


# --- create_graph -------------------------------------------------------------------------------
def test_create_graph_false_returns_new_frozen_values():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        s = sg.data("s", [3], "float64")
        y = x * x * x
    g, = ir_backward.grad(y, x)
    assert g.stop_gradient
    gs, = ir_backward.grad(x, x, grad_outputs=[s])  # the caller's seed is never returned
    assert gs is not s and not s.stop_gradient and gs.stop_gradient
    np.testing.assert_allclose(run(prog, [gs], x=X, s=X + 1)[0], X + 1)
    with sg.program_guard(prog):
        z = sg.sum(g)
    assert_fails_cleanly(prog, ValueError, "create_graph=False",
                         lambda: ir_backward.grad(z, x))


def test_create_graph_true_gives_differentiable_gradients():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(x * x * x)
    g, = ir_backward.grad(y, x, create_graph=True)
    assert not g.stop_gradient
    h, = ir_backward.grad(sg.sum(g), x, create_graph=True)
    t, = ir_backward.grad(sg.sum(h), x)
    a, b, c = run(prog, [g, h, t], x=X)
    np.testing.assert_allclose(a, 3 * X ** 2)
    np.testing.assert_allclose(b, 6 * X)
    np.testing.assert_allclose(c, np.full(3, 6.0))


# --- only_inputs, retain_graph, grad_inputs, set_grad, retain_grad, loss_scale -----------------
def test_only_inputs_false_sets_grad_of_every_reached_leaf():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        frozen = sg.data("frozen", [3], "float64", stop_gradient=True)
        w = sg.parameter("w", [3], "float64", init=np.ones(3))
        unused = sg.parameter("unused", [3], "float64")
        c = sg.constant(np.full(3, 2.0))
        y = sg.sum(x * w * c * frozen)
    gx, = ir_backward.grad(y, x, only_inputs=False)
    assert x.grad is gx and w.grad is not None
    assert frozen.grad is None and c.grad is None and unused.grad is None
    fv = np.array([1.0, -1.0, 0.5])
    a, b = run(prog, [x.grad, w.grad], x=X, frozen=fv)
    np.testing.assert_allclose(a, 2 * fv)
    np.testing.assert_allclose(b, 2 * X * fv)


def test_retain_graph_is_accepted():
    prog, x, w, h, loss = setup()
    for flag in (True, False, None):
        g, = ir_backward.grad(loss, x, retain_graph=flag)
        np.testing.assert_allclose(run(prog, [g], x=X)[0], dloss_dx())


def test_grad_inputs_are_added_and_unreachable_input_gets_the_offset():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        off_x = sg.data("off_x", [3], "float64")
        other = sg.data("other", [2], "float64")
        off_o = sg.data("off_o", [2], "float64")
    gx, go = ir_backward.grad(loss, [x, other], grad_inputs=[off_x, off_o])
    a, b = run(prog, [gx, go], x=X, off_x=np.ones(3), off_o=np.array([5.0, 6.0]))
    np.testing.assert_allclose(a, dloss_dx() + 1)
    np.testing.assert_allclose(b, [5.0, 6.0])
    assert not off_o.stop_gradient
    g_cg, = ir_backward.grad(loss, other, grad_inputs=[off_o], create_graph=True)
    assert g_cg is off_o
    gx2, = ir_backward.grad(loss, x, grad_inputs=[None])
    np.testing.assert_allclose(run(prog, [gx2], x=X)[0], dloss_dx())
    assert_fails_cleanly(prog, ValueError, "grad_inputs",
                         lambda: ir_backward.grad(loss, x, grad_inputs=[off_x, off_x]))
    assert_fails_cleanly(prog, TypeError, "grad_inputs",
                         lambda: ir_backward.grad(loss, x, grad_inputs=off_x))


def test_set_grad_and_retain_grad():
    prog, x, w, h, loss = setup()
    gx, = ir_backward.grad(loss, x, set_grad=True)
    assert x.grad is gx and h.grad is None
    gx, = ir_backward.grad(loss, x, retain_grad=True)
    assert h.grad is not None and loss.grad is not None and x.grad is gx
    lv, hv, xv = run(prog, [loss.grad, h.grad, x.grad], x=X)
    assert lv == 1.0
    np.testing.assert_allclose(hv, 2 * np.tanh(X @ W))
    np.testing.assert_allclose(xv, dloss_dx())


def test_loss_scale_multiplies_every_seed():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        seed = sg.constant(np.float64(2.0))
    g1, = ir_backward.grad(loss, x, loss_scale=128)
    g2, = ir_backward.grad(loss, x, grad_outputs=[seed], loss_scale=0.5)
    g3, = ir_backward.grad(loss, x, grad_outputs=[3.0], loss_scale=2)
    a, b, c = run(prog, [g1, g2, g3], x=X)
    np.testing.assert_allclose(a, 128 * dloss_dx())
    np.testing.assert_allclose(b, dloss_dx())
    np.testing.assert_allclose(c, 6 * dloss_dx())
    assert_fails_cleanly(prog, TypeError, "loss_scale",
                         lambda: ir_backward.grad(loss, x, loss_scale="big"))


# --- failures leave the program unchanged -------------------------------------------------------
def test_failure_after_building_part_of_the_backward_rolls_back():
    prog, x, w, h, loss = setup()
    with sg.program_guard(prog):
        other = sg.data("other", [3], "float64")
    # x and w are differentiated (ops appended) before `other` is found unreachable.
    assert_fails_cleanly(prog, GradError, "other",
                         lambda: ir_backward.grad(loss, [x, w, other], retain_grad=True))


def test_failing_vjp_rule_rolls_back():
    prog, x, w, h, loss = setup()

    def broken(op, g):
        sg.exp(g[0])  # builds an op, then fails
        raise RuntimeError("broken rule")

    previous = sg.register_vjp("tanh", broken)
    try:
        assert_fails_cleanly(prog, RuntimeError, "broken rule",
                             lambda: ir_backward.grad(loss, x))
    finally:
        sg.register_vjp("tanh", previous)


def test_vjp_returning_a_wrong_type_is_reported():
    prog, x, w, h, loss = setup()
    previous = sg.register_vjp("tanh", lambda op, g: [sg.sum(g[0])])
    try:
        assert_fails_cleanly(prog, GradError, "VJP of .*tanh.*float64\\[\\]",
                             lambda: ir_backward.grad(loss, x))
    finally:
        sg.register_vjp("tanh", previous)


def test_empty_outputs_is_an_error():
    prog, x, w, h, loss = setup()
    assert_fails_cleanly(prog, ValueError, "empty", lambda: ir_backward.grad([], x))


# --- append_backward ----------------------------------------------------------------------------
def test_append_backward():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        b = sg.parameter("b", [3], "float64", init=np.ones(3))
        a = sg.parameter("a", [3], "float64", init=np.full(3, 2.0))
        frozen = sg.parameter("frozen", [3], "float64", stop_gradient=True)
        unused = sg.parameter("unused", [3], "float64")
        loss = sg.sum(x * a * b + frozen)
    pairs = ir_backward.append_backward(loss)
    assert [p for p, _ in pairs] == [b, a, frozen, unused]
    assert pairs[2][1] is None and pairs[3][1] is None
    gb, ga = pairs[0][1], pairs[1][1]
    assert b.grad is gb
    vb, va = run(prog, [gb, ga], x=X)
    np.testing.assert_allclose(vb, 2 * X)
    np.testing.assert_allclose(va, X)

    pairs = ir_backward.append_backward(loss, parameter_list=[a, b], no_grad_set={a})
    assert [p for p, _ in pairs] == [b, a] and pairs[1][1] is None
    pairs = ir_backward.append_backward(loss, parameter_list=["a"], no_grad_set=["b"])
    np.testing.assert_allclose(run(prog, [pairs[0][1]], x=X)[0], X)
    with pytest.raises(TypeError):
        ir_backward.append_backward("loss")
