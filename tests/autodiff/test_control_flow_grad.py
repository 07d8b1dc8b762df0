"""``grad`` through cond, while_loop and scan: the contract's options inside regions, grad
inside a body function, residual memory, and transactions. (First and second derivatives of
every control-flow sample against finite differences are in test_numeric.py.)"""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import GradError
from symgrad.ir.graph import walk_defined, walk_ops


def _run(prog, fetches, **feeds):
    return sg.compile(prog, fetches, backend="interpreter")(**feeds)


def _rnn(T, batch=4, hidden=5, features=3):
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [T, batch, features], "float64")
        w = sg.parameter("w", [hidden, hidden], "float64", init=np.eye(hidden) * 0.5)
        u = sg.parameter("u", [features, hidden], "float64", init=np.ones((features, hidden)))
        h, _ = sg.scan(lambda h, x: (sg.tanh(h @ w + x @ u), None),
                       sg.zeros([batch, hidden], "float64"), xs)
        loss = sg.mean(h * h)
    return prog, xs, w, u, loss


def test_cond_sends_cotangents_through_the_taken_branch_only():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        w = sg.data("w", [2], "float64")
        y = sg.cond(sg.sum(x) > 0.0, lambda a: a * a, lambda a: a * w, x)
        gx, gw = ir_backward.grad(sg.sum(y), [x, w])
    x_v, w_v = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    _, got_x, got_w = _run(prog, [y, gx, gw], x=x_v, w=w_v)
    np.testing.assert_allclose(got_x, 2 * x_v)
    np.testing.assert_allclose(got_w, [0.0, 0.0])
    _, got_x, got_w = _run(prog, [y, gx, gw], x=-x_v, w=w_v)
    np.testing.assert_allclose(got_x, w_v)
    np.testing.assert_allclose(got_w, -x_v)


def test_no_grad_vars_and_stop_gradient_inside_a_body():
    inner = []

    def body(c, x):
        a = sg.sin(c * x)
        inner.append(a)
        return a + c * 0.5, None

    for block in ("no_grad_vars", "stop_gradient"):
        inner.clear()
        prog = sg.Program()
        with sg.program_guard(prog):
            c0 = sg.data("c0", [2], "float64")
            xs = sg.data("xs", [3, 2], "float64")
            c, _ = sg.scan(body, c0, xs)
            if block == "stop_gradient":
                inner[0].stop_gradient = True
                (g,) = ir_backward.grad(sg.sum(c), [c0])
            else:
                (g,) = ir_backward.grad(sg.sum(c), [c0], no_grad_vars=[inner[0]])
        (got,) = _run(prog, [g], c0=np.array([0.3, 0.4]), xs=np.ones((3, 2)))
        np.testing.assert_allclose(got, [0.125, 0.125])   # only the c * 0.5 path: 0.5 ** 3


def test_paths_cut_inside_regions_follow_allow_unused_and_unused():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        k = sg.data("k", [], "float64")
        y, _ = sg.scan(lambda c, _: (c * sg.cast(sg.cast(k, "int64"), "float64"), None), x,
                       length=3)
        loss = sg.sum(y)
        with pytest.raises(GradError, match=r"inputs\[0\]"):
            ir_backward.grad(loss, [k])
        none, = ir_backward.grad(loss, [k], allow_unused=True)
        zeros, = ir_backward.grad(loss, [k], allow_unused=True, unused="zeros")
    assert none is None and zeros is not None
    assert (_run(prog, [zeros], x=np.ones(2), k=np.array(2.0))[0] == 0).all()


def test_integer_carries_and_the_predicate_carry_no_gradient():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        n0 = sg.constant(np.int64(0))
        n, v = sg.while_loop(lambda n, v: n < 3, lambda n, v: [n + 1, v * 2.0], [n0, x])
        with pytest.raises(GradError, match="integer"):
            ir_backward.grad(sg.sum(v), [n0])
        p = sg.data("p", [], "float64")
        y = sg.cond(p > 0.0, lambda a: a * 2.0, lambda a: a, x)
        with pytest.raises(GradError, match="integer or bool"):
            ir_backward.grad(sg.sum(y), [p])


def test_grad_inside_a_body_function():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [4, 2], "float64")

        def body(c, x):
            (slope,) = ir_backward.grad(sg.sum(sg.sin(c * x)), [c], create_graph=True)
            return c - 0.1 * slope, None      # a gradient step inside the loop

        c, _ = sg.scan(body, sg.ones([2], "float64"), xs)
        (g,) = ir_backward.grad(sg.sum(c), [xs])
    prog.verify()
    xs_v = np.linspace(0.1, 0.8, 8).reshape(4, 2)

    def forward(xs_v):
        c = np.ones(2)
        for x in xs_v:
            c = c - 0.1 * x * np.cos(c * x)
        return c.sum()

    got_c, got_g = _run(prog, [c, g], xs=xs_v)
    assert np.isclose(got_c.sum(), forward(xs_v))
    numeric = np.zeros_like(xs_v)
    for i in np.ndindex(xs_v.shape):
        d = np.zeros_like(xs_v)
        d[i] = 1e-6
        numeric[i] = (forward(xs_v + d) - forward(xs_v - d)) / 2e-6
    np.testing.assert_allclose(got_g, numeric, rtol=1e-6)


def test_rnn_backward_keeps_one_t_by_batch_by_hidden_residual():
    prog, xs, w, u, loss = _rnn(T=7)
    (forward,) = [op for op in prog.ops if op.name == "scan"]
    final = forward.results[0]
    ir_backward.grad(loss, [w, u])
    (scan_op,) = [op for op in prog.ops if op.name == "scan" and not op.is_backward]
    stacked = [v.shape for v in scan_op.results[1:]]
    assert stacked == [(7, 4, 5)]          # the incoming h of every step, nothing else
    # a new forward op took the loop's place, with its result Values; the op is unchanged
    assert scan_op is not forward and scan_op.results[0] is final and final.op is scan_op
    assert forward not in prog.ops and len(forward.results) == 1
    assert len(forward.blocks[0].yields) == 1
    ops = set(walk_ops(prog.ops))          # backward ops name the ops in the program
    assert all(op.forward_op in ops for op in ops if op.forward_op is not None)
    prog.verify()


def test_program_size_and_compile_do_not_grow_with_the_sequence():
    sizes = []
    for T in (3, 300):
        prog, xs, w, u, loss = _rnn(T)
        grads = ir_backward.grad(loss, [w, u])
        sizes.append(str(prog).replace(str(T), "T").count("\n"))
        fn = sg.compile(prog, [loss] + grads, backend="numpy")
        assert f"range({T})" in fn.source and f"np.empty(({T}, 4, 5)" in fn.source
    assert sizes[0] == sizes[1]


def test_a_forward_only_compile_after_grad_records_no_residuals():
    prog, xs, w, u, loss = _rnn(T=5)
    ir_backward.grad(loss, [w, u])
    forward = sg.compile(prog, [loss], backend="numpy")
    (scan_op,) = [op for op in forward.program.ops if op.name == "scan"]
    assert len(scan_op.results) == 1 and "np.empty((5" not in forward.source


def _failing_op(name):
    """A custom op (the identity) whose backward raises ``RuntimeError("no gradient
    today")``."""
    def backward(inputs, outputs, grads):
        raise RuntimeError("no gradient today")

    return sg.custom_op(name, lambda a: a * 1.0, lambda t: t, backward)


def test_a_failed_grad_leaves_the_forward_loop_as_it_was():
    boom = _failing_op("boom_in_loop")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        y, _ = sg.scan(lambda c, _: (boom(sg.tanh(c)) * c, None), x, length=3)
        loss = sg.sum(y)
    (scan_op,) = [op for op in prog.ops if op.name == "scan"]
    before, results, next_id = str(prog), len(scan_op.results), prog._next_id
    with pytest.raises(RuntimeError, match="no gradient today"):
        ir_backward.grad(loss, [x])
    assert str(prog) == before and len(scan_op.results) == results
    assert prog._next_id == next_id and len(scan_op.blocks[0].yields) == 1
    prog.verify()


def _nested_loops():
    """A scan whose body runs a while loop, then a custom op that fails to differentiate."""
    boom = _failing_op("boom_after_loops")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        w = sg.parameter("w", [2], "float64", init=np.array([0.3, 0.6]))

        def step(c, _):
            _, inner = sg.while_loop(lambda n, v: n < 2, lambda n, v: [n + 1, v * v * 0.5 + w],
                                     [sg.constant(np.int64(0)), c])
            return sg.tanh(inner), inner
        c, ys = sg.scan(step, boom(x), length=3)
        loss = sg.sum(c * c) + sg.sum(ys)
    return prog, x, w, loss


def test_a_grad_failing_after_the_loops_vjps_leaves_them_as_they_were():
    prog, x, w, loss = _nested_loops()
    before, ops, next_id = str(prog), list(prog.ops), prog._next_id
    results = [list(op.results) for op in ops]
    with pytest.raises(RuntimeError, match="no gradient today"):
        ir_backward.grad(loss, [x, w])      # the loops' VJPs emit new ops; boom's fails
    assert str(prog) == before and prog.ops == ops and prog._next_id == next_id
    assert all(v.op is op for op, values in zip(ops, results) for v in values)
    prog.verify()
    with prog.transaction():                # merged, then undone by an enclosing transaction
        with pytest.raises(RuntimeError):
            with prog.transaction():
                (g,) = ir_backward.grad(loss, [w])
                assert prog.ops[:len(ops)] != ops
                raise RuntimeError("undo it")
    assert str(prog) == before and prog.ops == ops and prog._next_id == next_id
    assert all(v.op is op and v.index == i for op, values in zip(ops, results)
               for i, v in enumerate(values))


def test_nested_loops_record_residuals_in_new_ops_and_run_once():
    prog, x, w, loss = _nested_loops()
    (forward,) = [op for op in prog.ops if op.name == "scan"]
    body = str(forward)
    (g,) = ir_backward.grad(loss, [w], create_graph=True)
    (gg,) = ir_backward.grad(sg.sum(g * g), [w])
    assert str(forward) == body and forward not in prog.ops
    (scan_op,) = [op for op in prog.ops if op.name == "scan" and not op.is_backward]
    (inner,) = [op for op in scan_op.blocks[0].ops if op.name == "while_loop"]
    assert inner.attrs["counted"]              # its new op, in the new outer body
    ids = [v.id for v in walk_defined(prog.ops)]
    assert len(set(ids)) == len(ids) == prog._next_id                  # dense, no duplicates
    prog.verify()
    x0, w0 = np.array([0.2, -0.1]), np.array([0.3, 0.6])
    source = sg.compile(prog, [loss, g, gg], backend="numpy").source
    # the inner loop runs once: its new op, not a copy; its backward, a reverse_loop (a while
    # loop's trip count varies between the scan's steps), recomputes its steps from the
    # initial carries the scan records, by the schedule helper the module embeds
    assert source.count("while True:") == 1 and "_sg_reverse_plan" in source
    (got_gg,) = _run(prog, [gg], x=x0, w=w0)
    numeric = np.zeros(2)
    for i in range(2):
        d = np.zeros(2)
        d[i] = 1e-6
        up, down = (_run(prog, [g], x=x0, w=w0 + s * d)[0] for s in (1, -1))
        numeric[i] = (np.sum(up * up) - np.sum(down * down)) / 2e-6
    np.testing.assert_allclose(got_gg, numeric, rtol=1e-5)


def test_while_loop_reverse_mode_runs_the_recorded_trip_count():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [], "float64")
        _, v = sg.while_loop(lambda n, v: v < 10.0, lambda n, v: [n + 1, v * v + 1.0],
                             [sg.constant(np.int64(0)), x])
        (g,) = ir_backward.grad(v, [x])
    for start in (0.5, 1.5, 2.5):          # 3, 2 and 2 trips
        value, got = _run(prog, [v, g], x=np.array(start))
        v_num, d = start, 1.0
        while v_num < 10.0:
            v_num, d = v_num * v_num + 1.0, d * 2 * v_num
        assert np.isclose(value, v_num) and np.isclose(got, d)


# Regions whose result has the unknown dims of x (w captured)
UNKNOWN_DIM_REGIONS = {
    "cond": lambda x, w: sg.cond(sg.sum(x) > 0.0, lambda a: a * w, lambda a: a, x),
    "scan": lambda x, w: sg.scan(lambda c, _: (c * w, None), x, length=2)[0],
    "while_loop": lambda x, w: sg.while_loop(lambda v: sg.sum(v) < 10.0, lambda v: [v * w],
                                             [x])[0],
}


@pytest.mark.parametrize("region", UNKNOWN_DIM_REGIONS)
def test_a_seed_of_known_shape_for_a_result_of_unknown_dims(region):
    """The seed's shape [2, 3] fits the result's [?, 3]; the region's backward fits the
    cotangent back to its carries' and branches' exact types."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        w = sg.data("w", [None, 3], "float64")
        y = UNKNOWN_DIM_REGIONS[region](x, w)
        grads = ir_backward.grad(y, [x, w], grad_outputs=[sg.constant(np.ones((2, 3)))])
    got = _run(prog, grads, x=np.ones((2, 3)), w=np.full((2, 3), 2.0))
    times = 2 if region == "scan" else 1          # y = x * w ** times
    np.testing.assert_allclose(got[0], np.full((2, 3), 2.0 ** times))
    np.testing.assert_allclose(got[1], np.full((2, 3), times * 2.0 ** (times - 1)))


def test_every_op_of_a_loop_backward_records_the_op_it_differentiates():
    """Also the sum of the cotangents of a block argument read twice (the carry ``c``), which
    has no producing op: it is recorded as backward of the loop."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        c, _ = sg.scan(lambda c, _: (c * sg.sin(c), None), x, length=3)
        ir_backward.grad(sg.sum(c), [x])
    forward, backward = [op for op in prog.ops if op.name == "scan"]
    inner = list(walk_ops(backward.blocks[0].ops))
    assert "add" in [op.name for op in inner]
    assert all(op.forward_op is not None for op in inner)


def test_only_inputs_false_sets_leaf_grads_through_a_scan():
    prog, xs, w, u, loss = _rnn(T=3)
    with sg.program_guard(prog):
        ir_backward.grad(loss, [w], only_inputs=False)
    assert w.grad is not None and u.grad is not None and xs.grad is not None


def test_registry_lists_the_region_vjps():
    rows = {row["op"]: row for row in sg.registry.registry_table()}
    for name in ("cond", "while_loop", "scan"):
        assert rows[name]["vjp"] and rows[name]["vjp_differentiable"]
        assert rows[name]["category"] == "region" and "numpy" in rows[name]["backends"]


def _int64(n):
    return sg.constant(np.int64(n))


# Loops that run no step, each reading ``w`` (and the scans over ``xs`` reading it) in the body
NO_STEP_LOOPS = {
    "scan-length-0": lambda x, w, xs: sg.scan(lambda c, _: (c * w, None), x, length=0)[0],
    "scan-over-empty-xs": lambda x, w, xs: sg.scan(lambda c, e: (c * e * w, None), x, xs)[0],
    "fori_loop-5-2": lambda x, w, xs: sg.fori_loop(5, 2, lambda i, v: v * w, x),
    "fori_loop-value-bounds": lambda x, w, xs: sg.fori_loop(_int64(5), _int64(2),
                                                            lambda i, v: v * w, x),
    "while_loop": lambda x, w, xs: sg.while_loop(lambda v: sg.sum(v) > 100.0,
                                                 lambda v: [v * w], [x])[0],
}


@pytest.mark.parametrize("backend", ["interpreter", "numpy", "c"])
@pytest.mark.parametrize("form,dynamic", [pytest.param(form, False, id=form)
                                          for form in NO_STEP_LOOPS] +
                         [pytest.param("scan-over-empty-xs", True, id="scan-over-dynamic-xs")])
def test_a_loop_that_runs_no_step_gives_zeros_to_what_its_body_reads(form, dynamic, backend):
    """As ``while_loop`` always did: the gradient of what the body reads is zeros, not an
    'unreachable' error (xs of unknown length: the trip count is known only at run time)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float32")
        w = sg.data("w", [3], "float32")
        xs = sg.data("xs", [None if dynamic else 0, 3], "float32")
        y = NO_STEP_LOOPS[form](x, w, xs)
        inputs = [x, w, xs] if "xs" in form else [x, w]
        grads = ir_backward.grad(sg.sum(y * y), inputs)
    feeds = {"x": np.array([1.0, 2.0, 3.0], "float32"), "w": np.ones(3, "float32"),
             "xs": np.zeros((0, 3), "float32")}
    got = sg.compile(prog, grads, backend=backend)(**feeds)
    expected = [2 * feeds["x"], np.zeros(3, "float32"), np.zeros((0, 3), "float32")]
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_dim_constraints_of_a_loop_body_follow_its_new_forward_op():
    from symgrad.errors import FeedError
    from symgrad.runtime.dims import _top_level
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        y = sg.data("y", [None], "float64")
        c, _ = sg.scan(lambda c, _: (sg.tanh(c * y), None), x, length=3)
        (g,) = ir_backward.grad(sg.sum(c), [x])
    assert prog.dim_constraints and all(_top_level(op) in prog.ops
                                        for _, op in prog.dim_constraints)
    with pytest.raises(FeedError, match="to be equal"):
        sg.compile(prog, [g], backend="numpy")(x=np.ones(3), y=np.ones(4))


def test_jvp_through_a_loop_numbers_the_new_forward_ops_values_densely():
    from symgrad.autodiff.functional import jvp
    prog, xs, w, u, loss = _rnn(T=4)
    with sg.program_guard(prog):
        (g,) = ir_backward.grad(loss, [w], create_graph=True)
        (t,) = jvp([g], [w], [sg.ones([5, 5], "float64")])
    ids = [v.id for v in walk_defined(prog.ops)]
    assert sorted(ids) == list(range(prog._next_id))
    prog.verify()
    feeds = {"xs": np.random.default_rng(3).normal(size=(4, 4, 3))}
    (got,) = _run(prog, [t], **feeds)
    w0 = np.eye(5) * 0.5
    up, down = (_run(prog, [g], **feeds, w=w0 + s * 1e-6)[0] for s in (1, -1))
    np.testing.assert_allclose(got, (up - down) / 2e-6, rtol=1e-5, atol=1e-7)
