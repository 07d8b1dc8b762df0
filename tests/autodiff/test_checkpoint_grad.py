"""``checkpoint=`` on scan, fori_loop and while_loop, and ``sg.checkpoint(fn)``: results and
gradients are bit-identical to storing every step, on the interpreter and numpy backends, with
random ops, a ``cond`` and a nested loop in the body, to every order (a checkpointed loop's
backward differentiates as the store-all one, its twin: ``Operation.twin_of``); the stored residuals
are per segment."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

RNG = np.random.default_rng(7)
T = 10
FEEDS = {"xs": RNG.normal(size=(T, 4, 3)), "w": RNG.normal(size=(5, 5)) * 0.5,
         "u": RNG.normal(size=(3, 5)), "h0": RNG.normal(size=(4, 5))}
# 3 and "sqrt" (4) leave a shorter last segment; ("binomial", s) follows revolve's schedule
POLICIES = [1, 3, 5, "sqrt", T, ("binomial", 1), ("binomial", 3), ("binomial", 12)]


def _rnn_step(w, u):
    def step(h, x):
        return sg.tanh(h @ w + x @ u), h * 2.0
    return step


def _dropout_step(w, u):
    """A step that draws a mask from the step counter it carries and branches on the data."""
    def step(carry, x):
        i, h = carry
        keep = sg.random.uniform([4, 5], dtype="float64", counter=i) < 0.7
        z = h @ w + x @ u
        z = sg.cond(sg.sum(z) > 0.0, lambda a: sg.tanh(a), lambda a: a * 0.5, z)
        return (i + np.int64(1), sg.where(keep, z, z * 0.0)), None
    return step


def _nested_step(w, u):
    """A step whose body runs a scan of its own (over the features of its slice)."""
    def step(h, x):
        inner, _ = sg.scan(lambda c, col: (sg.tanh(c @ w + sg.expand_dims(col, 1) * u[0]),
                                           None), h, sg.transpose(x))
        return inner, sg.sum(inner * inner, axis=1)
    return step


def _higher(fetches, grads, wrt, order):
    """``grads`` (the first derivatives, built with ``create_graph=order > 1``), then the
    derivatives of the sum of their squares, up to ``order``."""
    for level in range(2, order + 1):
        norm = sum(sg.sum(g * g) for g in grads)
        grads = ir_backward.grad(norm, wrt, create_graph=level < order)
        fetches = fetches + grads
    return fetches


def _program(step_of, policy, reverse=False, counted=False, order=1):
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [T, 4, 3], "float64")
        w = sg.data("w", [5, 5], "float64")
        u = sg.data("u", [3, 5], "float64")
        h0 = sg.data("h0", [4, 5], "float64")
        init = (sg.constant(np.int64(0)), h0) if counted else h0
        carry, ys = sg.scan(step_of(w, u), init, xs, reverse=reverse, checkpoint=policy)
        h = carry[1] if counted else carry
        loss = sg.mean(h * h) + (sg.sum(ys * ys) if ys is not None else 0.0)
        fetches = [h, loss] + ([ys] if ys is not None else [])
        wrt = [w, u, h0, xs]
        grads = ir_backward.grad(loss, wrt, create_graph=order > 1)
        fetches = _higher(fetches + grads, grads, wrt, order)
    return prog, fetches


def _assert_identical(step_of, policy, backend, order=1, **options):
    """Results and derivatives up to ``order``, bit for bit."""
    plain = sg.compile(*_program(step_of, None, order=order, **options),
                       backend=backend)(**FEEDS)
    got = sg.compile(*_program(step_of, policy, order=order, **options),
                     backend=backend)(**FEEDS)
    assert len(got) == len(plain)
    for index, (a, b) in enumerate(zip(got, plain)):
        assert a.shape == b.shape, (policy, index)
        np.testing.assert_array_equal(a, b, err_msg=f"{policy}, fetch {index}")


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_rnn_results_and_gradients_are_bit_identical(policy, reverse, backend):
    _assert_identical(_rnn_step, policy, backend, reverse=reverse)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_second_derivatives_are_bit_identical(policy, reverse, backend):
    """Segments (``k``, ``"sqrt"``: nested and consecutive scans) and run-time schedules
    (``("binomial", s)``: a reverse_loop) alike."""
    _assert_identical(_rnn_step, policy, backend, order=2, reverse=reverse)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("policy", [3, 5, "sqrt", ("binomial", 2)])
def test_third_derivatives_are_bit_identical(policy, backend):
    """Run-time schedules (a flat loop) and segments (3 and "sqrt" leave a shorter last
    segment, 5 does not), with respect to everything the loop reads, ``xs`` included."""
    _assert_identical(_rnn_step, policy, backend, order=3)


def _exp_step(w, u):
    """A step whose per-step output the backward reads (exp's VJP reads its result)."""
    def step(h, x):
        return sg.tanh(h @ w) * sg.exp(x @ u), sg.exp(x)
    return step


def _carry_out_step(w, u):
    """A step whose per-step output is its incoming carry."""
    def step(h, x):
        return sg.tanh(h @ w) * sg.exp(x @ u), h
    return step


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("policy", [3, 5])
def test_ys_that_the_backward_reads_keep_higher_derivatives_bit_identical(policy, reverse,
                                                                          backend):
    """Segments give the ``ys`` as a reshape (and concatenation) of the segment loops' stacks,
    which their backward reads as residuals: the cotangents of the ``ys`` are summed on the
    stacks (``Operation.passes_cotangents``), one sum per number as without segments (else the
    second derivatives of the carry-out step and the third ones of xs differ in the last
    bits)."""
    _assert_identical(_carry_out_step, policy, backend, order=2, reverse=reverse)
    _assert_identical(_exp_step, policy, backend, order=3, reverse=reverse)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("policy", [3, 5, "sqrt", ("binomial", 2)])
def test_random_masks_and_a_cond_in_the_body_recompute_the_same(policy, backend):
    _assert_identical(_dropout_step, policy, backend, counted=True)
    _assert_identical(_dropout_step, policy, backend, counted=True, order=2)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_a_nested_loop_in_the_body(backend):
    _assert_identical(_nested_step, 3, backend)
    _assert_identical(_nested_step, 4, backend, reverse=True, order=2)
    _assert_identical(_nested_step, ("binomial", 2), backend, reverse=True)
    _assert_identical(_nested_step, ("binomial", 2), backend, order=2)


def _segmented_in_a_body(step_of, inner, outer, reverse, order, backend):
    """A scan (``outer``'s checkpoint) whose body runs a scan over its slice of xs
    (``inner``'s checkpoint) and yields that scan's ys; derivatives up to ``order``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [2, 7, 3], "float64")
        w = sg.data("w", [3, 3], "float64")
        h0 = sg.data("h0", [3], "float64")

        def body(h, x):
            return sg.scan(step_of(w), h, x, reverse=reverse, checkpoint=inner)
        h, ys = sg.scan(body, h0, xs, checkpoint=outer)
        loss = sg.sum(h * h) + sg.sum(ys * ys)
        wrt = [w, h0, xs]
        grads = ir_backward.grad(loss, wrt, create_graph=order > 1)
        fetches = _higher([loss] + grads, grads, wrt, order)
    feeds = {"xs": RNG.normal(size=(2, 7, 3)), "w": RNG.normal(size=(3, 3)) * 0.5,
             "h0": RNG.normal(size=3)}
    return sg.compile(prog, fetches, backend=backend)(**feeds)


INNER_STEPS = {
    "carry_out": lambda w: lambda h, x: (sg.tanh(h @ w) * sg.exp(x), h),
    "exp_of_carry_and_x": lambda w: lambda h, x: (sg.tanh(h @ w + x), sg.exp(x * h)),
}


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("step", list(INNER_STEPS))
@pytest.mark.parametrize("inner, outer, reverse", [(3, None, False), (4, 2, True),
                                                   (("binomial", 2), None, False)])
def test_a_segmented_scan_in_a_loop_body_is_bit_identical_to_the_third_order(
        step, inner, outer, reverse, backend):
    """The ys of a segmented scan in a loop body are the enclosing loop's stacked outputs:
    its backward reads the segments' stacks out of them (through the inverse of their
    layout, ``regions._cut_part``) and its xs segments from the enclosing loop's xs slices
    (``regions._recut``), so each number's cotangent is summed on one stack, as without
    segments. A carry yielded as a y, and a y that the backward reads and that depends on
    the carry and the xs (``exp(x * h)``)."""
    state = RNG.bit_generator.state
    plain = _segmented_in_a_body(INNER_STEPS[step], None, None, reverse, 3, backend)
    RNG.bit_generator.state = state
    got = _segmented_in_a_body(INNER_STEPS[step], inner, outer, reverse, 3, backend)
    for index, (a, b) in enumerate(zip(got, plain)):
        np.testing.assert_array_equal(a, b, err_msg=f"fetch {index}")


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_fori_loop_checkpoint_is_bit_identical(backend):
    def build(policy):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [3], "float64")
            w = sg.data("w", [3], "float64")
            y = sg.fori_loop(0, 7, lambda i, v: sg.sin(v * w) + sg.cast(i, "float64"), x,
                             checkpoint=policy)
            loss = sg.sum(y * y)
            grads = ir_backward.grad(loss, [x, w], create_graph=True)
            fetches = _higher([y] + grads, grads, [x, w], 2)
        return sg.compile(prog, fetches, backend=backend)
    feeds = {"x": np.array([0.3, -1.2, 2.0]), "w": np.array([1.1, 0.4, -0.7])}
    plain = build(None)(**feeds)
    for policy in (2, "sqrt", 7, ("binomial", 2)):
        for a, b in zip(build(policy)(**feeds), plain):
            np.testing.assert_array_equal(a, b, err_msg=str(policy))


def test_the_forward_stores_one_carry_per_segment():
    """After grad, the checkpointed outer scan stacks its ys and the carry at each of its
    T // k segment starts, nothing per step; the last segment's scan its T % k steps."""
    prog, _ = _program(_rnn_step, 3)
    outer, tail = [op for op in prog.ops if op.name == "scan" and not op.attrs["reverse"]]
    assert outer.attrs["remat"] and outer.attrs["length"] == 3 and tail.attrs["length"] == 1
    assert [v.shape for v in outer.results] == [(4, 5), (3, 3, 4, 5), (3, 4, 5)]
    assert all(v.shape[0] == 1 for v in tail.results[1:])
    plain, _ = _program(_rnn_step, None)
    (loop,) = [op for op in plain.ops if op.name == "scan" and not op.attrs["reverse"]]
    assert [v.shape for v in loop.results] == [(4, 5), (T, 4, 5), (T, 4, 5)]


def _block_program(remat):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 3], "float64")
        w = sg.data("w", [3, 3], "float64")

        def block(a):
            h = sg.tanh(a @ w)
            noise = sg.random.uniform([4, 3], dtype="float64")
            return sg.sin(h @ w) * noise, h
        f = sg.checkpoint(block) if remat else block
        y, h = f(x)
        y, _ = f(y)
        loss = sg.sum(y * y) + sg.sum(h)
        grads = ir_backward.grad(loss, [x, w], create_graph=True)
        second = ir_backward.grad(sum(sg.sum(g * g) for g in grads), [x, w])
    return prog, [loss] + grads + second


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_checkpointed_function_recomputes_instead_of_storing(backend):
    feeds = {"x": RNG.normal(size=(4, 3)), "w": RNG.normal(size=(3, 3))}
    plain = sg.compile(*_block_program(False), backend=backend)(**feeds)
    prog, fetches = _block_program(True)
    got = sg.compile(prog, fetches, backend=backend)(**feeds)
    for a, b in zip(got, plain):          # the loss and the derivatives: bit for bit
        np.testing.assert_array_equal(a, b)
    # the first derivatives alone store nothing of the block (the store-all twin that the
    # second derivatives differentiate is pruned away)
    first = sg.compile(prog, fetches[:3], backend="numpy").program
    remat = [op for op in first.ops if op.name == "scan" and op.attrs.get("remat")]
    assert [len(op.results) for op in remat] == [2, 1]     # the second call's h is unread


def test_checkpointed_function_inside_a_loop_body():
    def build(remat):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [3], "float64")
            w = sg.data("w", [3], "float64")

            def block(i, v):
                return sg.tanh(v * w + sg.random.normal([3], dtype="float64", counter=i))
            f = sg.checkpoint(block) if remat else block
            y = sg.fori_loop(0, 5, f, x, checkpoint=2 if remat else None)
            fetches = [y] + ir_backward.grad(sg.sum(y * y), [x, w])
        return sg.compile(prog, fetches, backend="numpy")
    feeds = {"x": np.array([0.1, 0.2, -0.3]), "w": np.array([0.5, -1.0, 2.0])}
    for a, b in zip(build(True)(**feeds), build(False)(**feeds)):
        assert np.array_equal(a, b)


def _while_program(policy, counter=False, order=1):
    """A loop of a data-dependent trip count, with a random draw (counter carried) and a cond."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")

        def body(i, v):
            z = sg.tanh(v * w) + 0.3
            z = sg.cond(sg.sum(z) > 1.0, lambda a: a * 1.01, lambda a: a + 0.01, z)
            if counter:
                z = z + sg.random.uniform([3], dtype="float64", counter=i) * 0.01
            return [i + np.int64(1), v + z]
        n, v = sg.while_loop(lambda i, v: sg.sum(v) < 40.0, body,
                             [sg.constant(np.int64(0)), x], checkpoint=policy)
        loss = sg.sum(v * v)
        grads = ir_backward.grad(loss, [x, w], create_graph=order > 1)
        fetches = _higher([n, v] + grads, grads, [x, w], order)
    return prog, fetches


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("policy", [1, 3, 4, 100, "sqrt", ("binomial", 1), ("binomial", 3)])
def test_while_loop_checkpoint_is_bit_identical(policy, backend):
    feeds = {"x": np.array([0.1, 0.2, -0.3]), "w": np.array([0.5, -1.0, 2.0])}
    plain = sg.compile(*_while_program(None, True), backend=backend)(**feeds)
    assert 20 < int(plain[0]) < 100
    got = sg.compile(*_while_program(policy, True), backend=backend)(**feeds)
    for a, b in zip(got, plain):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("policy", [1, 3, "sqrt", ("binomial", 1), ("binomial", 3)])
def test_while_loop_second_derivatives_are_bit_identical(policy, backend):
    """Int policies (segments: nested while loops) and run-time schedules, with a cond and a
    random draw in the body."""
    feeds = {"x": np.array([0.1, 0.2, -0.3]), "w": np.array([0.5, -1.0, 2.0])}
    plain = sg.compile(*_while_program(None, True, order=2), backend=backend)(**feeds)
    got = sg.compile(*_while_program(policy, True, order=2), backend=backend)(**feeds)
    assert len(got) == len(plain) == 6
    for index, (a, b) in enumerate(zip(got, plain)):
        np.testing.assert_array_equal(a, b, err_msg=f"{policy}, fetch {index}")


def test_while_loop_checkpoint_stores_its_trip_count_only():
    """An int policy on a while loop is the segment schedule of a reverse_loop (the trip
    count is known when the loop ends): the forward counts its steps and stacks nothing."""
    prog, _ = _while_program(3)
    (loop,) = [op for op in prog.ops if op.name == "while_loop"]
    assert loop.attrs["plan"] == ("every", 3)
    assert loop.attrs["num_stacked"] == 0 and loop.attrs["counted"]
    (backward,) = [op for op in prog.ops if op.name == "reverse_loop"]
    assert any(value is loop.results[-1] for value in backward.inputs)   # the trip count


def test_fori_loop_with_value_bounds_checkpoints_its_while_loop():
    def build(policy):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [3], "float64")
            n = sg.data("n", [], "int64")
            y = sg.fori_loop(0, n, lambda i, v: sg.sin(v) * 1.1, x, checkpoint=policy)
            return sg.compile(prog, [y] + ir_backward.grad(sg.sum(y), [x]), backend="numpy")
    feeds = {"x": np.array([0.3, -1.2, 2.0]), "n": np.int64(9)}
    plain = build(None)(**feeds)
    for policy in (2, "sqrt", ("binomial", 3)):
        for a, b in zip(build(policy)(**feeds), plain):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("policy", [3, "sqrt", ("binomial", 2)])
@pytest.mark.parametrize("with_xs", [True, False])
def test_a_run_time_trip_count_follows_the_schedule_for_it(policy, with_xs, backend):
    """A scan whose trip count is known only at run time (xs of unknown leading dim, or a
    length Value) computes its schedule when it runs; the same program serves any T."""
    def build(policy):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = sg.data("xs", [None, 4, 3], "float64")
            w, u = sg.data("w", [5, 5], "float64"), sg.data("u", [3, 5], "float64")
            h0 = sg.data("h0", [4, 5], "float64")
            if with_xs:
                h, ys = sg.scan(_rnn_step(w, u), h0, xs, checkpoint=policy)
                loss = sg.mean(h * h) + sg.sum(ys * ys)
            else:
                h = sg.fori_loop(0, sg.data("n", [], "int64"),
                                 lambda i, h: sg.tanh(h @ w + xs[i] @ u), h0,
                                 checkpoint=policy)
                loss = sg.mean(h * h)
            fetches = [h, loss] + ir_backward.grad(loss, [w, u, h0, xs])
        return sg.compile(prog, fetches, backend=backend)
    plain, got = build(None), build(policy)
    for steps in (1, 6, 10):
        feeds = dict(FEEDS, xs=FEEDS["xs"][:steps], n=np.int64(steps))
        if with_xs:
            feeds.pop("n")
        for a, b in zip(got(**feeds), plain(**feeds)):
            assert np.array_equal(a, b), (policy, steps)


def test_a_binomial_scan_stores_nothing_of_its_steps():
    """Reverse mode through a ``("binomial", s)`` loop records no stacked value in the
    forward loop: its backward is one reverse_loop op reading the initial carry."""
    prog, _ = _program(_rnn_step, ("binomial", 3))
    (forward,) = [op for op in prog.ops if op.name == "scan"]
    assert forward.attrs["plan"] == ("binomial", 3)
    assert len(forward.results) == 2                 # the final carry and the ys only
    (reverse,) = [op for op in prog.ops if op.name == "reverse_loop"]
    assert reverse.inputs[0] is forward.inputs[0]     # h0


def test_a_loop_continues_the_running_gradient_sum_of_what_it_reads():
    """Two scans one after the other give ``w`` the gradient one scan over all the steps
    gives, bit for bit, also with ``w`` read outside the loops."""
    def build(split):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = sg.data("xs", [T, 4, 3], "float64")
            w = sg.data("w", [5, 5], "float64")
            u = sg.data("u", [3, 5], "float64")
            h = sg.data("h0", [4, 5], "float64")
            step = _rnn_step(w, u)
            for part in ((xs[:split], xs[split:]) if split else (xs,)):
                h, _ = sg.scan(step, h, part)
            loss = sg.mean(h * h) + sg.sum(w * w)
        return sg.compile(prog, ir_backward.grad(loss, [w, u]), backend="numpy")
    for a, b in zip(build(4)(**FEEDS), build(None)(**FEEDS)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("policy", [2, 3])
def test_checkpointed_loops_nested_that_read_xs_also_as_a_capture(policy, reverse):
    """An outer checkpointed scan over xs whose body runs a checkpointed scan over all of xs:
    the gradient of xs sums its slices' and the captures' parts as without checkpoint."""
    def build(outer_policy, inner_policy):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = sg.data("xs", [7, 3], "float64")
            w = sg.data("w", [3], "float64")

            def outer(c, x):
                inner, ys = sg.scan(lambda h, s: (sg.tanh(h * w + s * c), h), x, xs,
                                    reverse=reverse, checkpoint=inner_policy)
                return c + sg.sum(inner), sg.sum(ys)
            c, ys = sg.scan(outer, sg.sum(w) * 0.1, xs, reverse=reverse,
                            checkpoint=outer_policy)
            loss = c + sg.sum(ys * ys)
            fetches = [loss] + ir_backward.grad(loss, [w, xs])
        return sg.compile(prog, fetches, backend="numpy")
    feeds = {"xs": RNG.normal(size=(7, 3)), "w": np.array([0.3, -0.2, 0.9])}
    plain = build(None, None)(**feeds)
    for policies in ((policy, policy), (policy, None), (None, policy)):
        for a, b in zip(build(*policies)(**feeds), plain):
            assert np.array_equal(a, b), policies


def _binomial_while(policy, create_graph=True):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")
        _, h = sg.while_loop(lambda n, h: n < 7, lambda n, h: [n + 1, sg.tanh(h * w + 0.1)],
                             [sg.constant(np.int64(0)), x], checkpoint=policy)
        (g,) = ir_backward.grad(sg.sum(h * h), [w], create_graph=create_graph)
        fetches = [g]
        if create_graph:
            fetches += ir_backward.grad(sg.sum(g * g), [w])
    return prog, fetches


def test_create_graph_through_a_binomial_loop_keeps_its_schedule():
    """The first derivative that ``create_graph=True`` builds is the reverse_loop of the
    schedule (nothing of the steps stored); the reverse_loop's own VJP gives the second
    derivative, checked against finite differences of the first."""
    feeds = {"x": np.array([0.1, -0.4, 0.7]), "w": np.array([0.9, 1.1, -0.8])}
    prog, (g, gg) = _binomial_while(("binomial", 2))
    first = sg.compile(prog, [g], backend="numpy")
    assert [op.name for op in first.program.ops if op.blocks] == ["while_loop", "reverse_loop"]
    (forward,) = [op for op in first.program.ops if op.name == "while_loop"]
    assert forward.attrs["num_stacked"] == 0            # its trip count only
    (got_g,) = first(**feeds)
    (plain_g,) = sg.compile(*_binomial_while(None, create_graph=False), backend="numpy")(**feeds)
    assert np.array_equal(got_g, plain_g)
    (got,) = sg.compile(prog, [gg], backend="numpy")(**feeds)
    numeric = np.zeros(3)
    for i in range(3):
        d = np.zeros(3)
        d[i] = 1e-6
        up, down = (first(x=feeds["x"], w=feeds["w"] + s * d)[0] for s in (1, -1))
        numeric[i] = (np.sum(up * up) - np.sum(down * down)) / 2e-6
    np.testing.assert_allclose(got, numeric, rtol=1e-6)


def test_a_reverse_loop_without_a_twin_differentiates_its_own_scans():
    """A reverse_loop with no store-all twin (``Operation.twin_of`` cleared here; one that
    vmap could not pair with its twin's batched copy, say) is differentiated through the two
    scans it computes: the second derivative agrees with ``checkpoint=None``'s to rounding."""
    def build(policy, drop):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [3], "float64")
            w = sg.data("w", [3], "float64")
            _, h = sg.while_loop(lambda n, h: n < 7,
                                 lambda n, h: [n + 1, sg.tanh(h * w + 0.1)],
                                 [sg.constant(np.int64(0)), x], checkpoint=policy)
            (g,) = ir_backward.grad(sg.sum(h * h), [w], create_graph=True)
            if drop:
                (twin,) = [op for op in prog.ops if op.twin_of is not None]
                assert twin.twin_of[0].op.name == "reverse_loop"
                twin.twin_of = None
            (gg,) = ir_backward.grad(sg.sum(g * g), [w])
        return sg.compile(prog, [g, gg], backend="numpy")
    feeds = {"x": np.array([0.1, -0.4, 0.7]), "w": np.array([0.9, 1.1, -0.8])}
    plain = build(None, False)(**feeds)
    got = build(("binomial", 2), True)(**feeds)
    np.testing.assert_array_equal(got[0], plain[0])
    np.testing.assert_allclose(got[1], plain[1], rtol=1e-12)


RAGGED_FEEDS = {"xs": np.random.default_rng(0).normal(size=(4, 3)),
                "w": np.array([0.5, -1.0, 2.0]), "h0": np.full(3, 0.2)}


def _ragged_program(inner_policy=None, outer="scan", order=1):
    """A loop whose body runs a while loop of a data-dependent trip count (a different one
    at each step), differentiated with respect to what the inner loop reads; each further
    ``order`` also fetches the sum of the squared gradients and its gradient."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [4, 3], "float64")
        w = sg.data("w", [3], "float64")
        h0 = sg.data("h0", [3], "float64")

        def inner(v, x):
            return sg.while_loop(lambda n, v: sg.sum(v * v) < 4.0 + sg.sum(x * x),
                                 lambda n, v: [n + 1, v * 1.3 + sg.tanh(v * w) * 0.1],
                                 [sg.constant(np.int64(0)), v + x], checkpoint=inner_policy)
        if outer == "scan":
            def step(h, x):
                n, v = inner(h, x)
                return sg.tanh(v) * 0.9, n
            h, trips = sg.scan(step, h0, xs)
        else:                                   # a while loop over the rows of xs
            def body(i, h, trips):
                n, v = inner(h, xs[i])
                return [i + 1, sg.tanh(v) * 0.9, trips + n]
            _, h, trips = sg.while_loop(lambda i, h, trips: i < 4, body,
                                        [sg.constant(np.int64(0)), h0,
                                         sg.constant(np.int64(0))])
        loss = sg.sum(h * h)
        grads = ir_backward.grad(loss, [w, xs, h0], create_graph=order > 1)
        fetches = [loss, trips] + grads
        for level in range(2, order + 1):
            norm = sum(sg.sum(g * g) for g in grads)
            grads = ir_backward.grad(norm, [w, xs, h0], create_graph=level < order)
            fetches += [norm] + grads
    return prog, fetches


def _assert_gradients_match_differences(fn, of, grads):
    """``grads`` (arrays for w, xs, h0) are the central differences of fetch ``of``."""
    for name, grad in zip(["w", "xs", "h0"], grads):
        base = RAGGED_FEEDS[name]
        numeric = np.zeros(base.shape)
        for index in np.ndindex(base.shape):
            d = np.zeros(base.shape)
            d[index] = 1e-6
            up, down = (fn(**dict(RAGGED_FEEDS, **{name: base + s * d}))[of] for s in (1, -1))
            numeric[index] = (up - down) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("outer", ["scan", "while_loop"])
@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_a_while_loop_of_a_data_dependent_trip_count_in_a_loop_body(backend, outer):
    """Its per-step residuals cannot be stacked by the enclosing loop (their count differs
    between its steps): it records its trip count, and the enclosing loop its initial carries;
    its backward recomputes its steps (a reverse_loop storing every carry while it runs). The
    gradient matches finite differences, and is bit for bit the one an explicit checkpoint
    schedule on the inner loop gives."""
    prog, fetches = _ragged_program(outer=outer)
    fn = sg.compile(prog, fetches, backend=backend)
    got = fn(**RAGGED_FEEDS)
    if outer == "scan":
        assert len(set(got[1].tolist())) > 1            # trip counts differ between steps
    explicit = sg.compile(*_ragged_program(("binomial", 2), outer), backend=backend)
    for a, b in zip(got, explicit(**RAGGED_FEEDS)):
        np.testing.assert_array_equal(a, b)
    _assert_gradients_match_differences(fn, 0, got[2:])


@pytest.mark.parametrize("outer", ["scan", "while_loop"])
@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_second_derivatives_through_a_while_loop_of_data_dependent_trip_counts(backend, outer):
    """The inner loop gets no store-all twin (its residuals could not be stacked when its
    trip counts differ between the enclosing loop's steps): the second derivative
    differentiates its reverse_loop, which recomputes its steps inside the step of the
    enclosing loop's backward. It matches finite differences of the first derivative, and an
    explicit schedule on the inner loop gives the same bits."""
    fn = sg.compile(*_ragged_program(outer=outer, order=2), backend=backend)
    got = fn(**RAGGED_FEEDS)
    if outer == "scan":
        assert len(set(got[1].tolist())) > 1            # trip counts differ between steps
    for policy in [2, ("binomial", 2)]:
        explicit = sg.compile(*_ragged_program(policy, outer, order=2), backend=backend)
        for a, b in zip(got, explicit(**RAGGED_FEEDS)):
            np.testing.assert_array_equal(a, b, err_msg=str(policy))
    _assert_gradients_match_differences(fn, 5, got[6:])


# the error of a third derivative through the while loop of _ragged_program (trip counts 3, 2,
# 1, 6): the second-order backward of the scan stacks a residual of the inner loop's
# recomputation, whose rows are its trip count
RAGGED_STACK_ERROR = (r"scan \(backward of scan, built at .*test_checkpoint_grad.py:\d+\) stacks "
                      r"its per-step output %\d+ \(made by .*built at .*test_checkpoint_grad.py"
                      r":\d+\)\) over its steps, but it has shape \(\d, 3\) at step \d and "
                      r"\(\d, 3\) at the step run before it")


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_third_derivatives_through_a_while_loop_of_data_dependent_trip_counts_fail_clearly(
        backend):
    """They would stack the inner loop's residuals per step of the enclosing loop (its
    recomputation's, in the second-order backward), of as many rows as its trip count: the
    run-time check of a stack's rows names the loops, the user's lines and the shapes."""
    fn = sg.compile(*_ragged_program(order=3), backend=backend)
    with pytest.raises(sg.errors.FeedError, match=RAGGED_STACK_ERROR):
        fn(**RAGGED_FEEDS)
