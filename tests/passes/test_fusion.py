import numpy as np

import symgrad as sg
from symgrad import ir_backward
from symgrad.passes import is_fusion, split_body
from tests.passes.helpers import apply, run_both


def _groups(program):
    return [op for op in program.ops if is_fusion(op)]


def _w2(n=1000, fetch_loss=False):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [n], "float32")
        loss = sg.sum(sg.tanh(x * 1.5 + 0.5) * sg.sin(x) + sg.exp(-x * x) * 0.3
                      + sg.log1p(x * x))
        gx, = ir_backward.grad(loss, [x])
    return prog, ([loss, gx] if fetch_loss else [gx])


def test_elementwise_chain_fuses_into_one_group():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 5], "float64")
        b = sg.data("b", [5], "float64")
        y = sg.exp(sg.tanh(x + b) * 2.0) - x
    new, _, report = apply(prog, [y], ["fusion"])
    groups = _groups(new)
    assert len(groups) == 1 and len(groups[0].blocks[0].ops) == 5
    assert report.stats["fused_groups"] == 1
    assert "fused group 0" in report.ir and "    %" in report.ir   # nested ops printed
    run_both(prog, [y], ["fusion"], {"x": np.random.rand(4, 5), "b": np.random.rand(5)})


def test_map_step_fuses_into_reduction_and_epilogue_follows():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [6, 5], "float64")
        s = sg.sum(sg.exp(x) * x, axis=1)
        y = sg.log(s) * 2.0
    new, _, _ = apply(prog, [y], ["fusion"])
    group, = _groups(new)
    map_ops, reduction, epilogue = split_body(group)
    assert [o.name for o in map_ops] == ["exp", "multiply"]
    assert reduction.name == "sum"
    assert [o.name for o in epilogue] == ["log", "multiply"]
    run_both(prog, [y], ["fusion"], {"x": np.random.rand(6, 5)})


def test_reduction_broadcast_back_is_not_fused_into_its_group():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 6], "float64")
        e = sg.exp(x)
        y = e / sg.sum(e, axis=1, keepdims=True)
    new, _, _ = apply(prog, [y], ["fusion"])
    for group in _groups(new):
        map_ops, reduction, epilogue = split_body(group)
        if reduction is not None:
            assert all(o.results[0].shape == reduction.results[0].shape for o in epilogue)
    run_both(prog, [y], ["fusion"], {"x": np.random.rand(4, 6)})


def test_groups_stay_convex():
    # a -> (exp, opaque matmul) -> add: fusing exp and add would make a path leave the group
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3, 3], "float64")
        a = sg.tanh(x)
        b = sg.matmul(a, a)
        y = sg.exp(a) + b
    new, _, _ = apply(prog, [y], ["fusion"])
    for group in _groups(new):
        inner = {id(o) for o in group.blocks[0].ops}
        names = [o.name for o in group.blocks[0].ops]
        assert not ("tanh" in names and "add" in names), names
        assert inner
    run_both(prog, [y], ["fusion"], {"x": np.random.rand(3, 3)})


def test_group_size_is_capped():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [8], "float64")
        y = x
        for _ in range(20):
            y = sg.sin(y)
    new, _, _ = apply(prog, [y], ["fusion"], max_group_size=6)
    assert all(len(g.blocks[0].ops) <= 6 for g in _groups(new))
    assert len(_groups(new)) == 4
    run_both(prog, [y], ["fusion"], {"x": np.random.rand(8)})


def test_fusion_off_gives_no_groups():
    prog, fetches = _w2()
    new, _, report = apply(prog, fetches, ["fusion"], fusion=False)
    assert not _groups(new) and report.stats["fused_groups"] == 0


def test_w2_gradient_is_one_fused_group():
    prog, fetches = _w2()
    new, _, report = apply(prog, fetches, None)
    assert report.stats["fused_groups"] == 1
    run_both(prog, fetches, None, {"x": np.random.rand(1000).astype("float32")}, rtol=1e-5)


def test_w2_loss_and_gradient_fuse_into_one_group():
    # the backward reads forward map values, not the loss: it joins the loop that sums
    prog, fetches = _w2(fetch_loss=True)
    new, _, report = apply(prog, fetches, None)
    assert report.stats["fused_groups"] == 1
    [group] = _groups(new)
    map_ops, reduction, epilogue = split_body(group)
    assert reduction.name == "sum" and not epilogue and len(map_ops) == len(group.blocks[0].ops) - 1
    run_both(prog, fetches, None, {"x": np.random.rand(1000).astype("float32")}, rtol=1e-5)


def test_map_op_reading_the_reduction_does_not_join_the_map_phase():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [6, 5], "float64")
        a = sg.exp(x * 2.0)
        s = sg.sum(a, axis=1, keepdims=True)
        late = sg.sin(a) * 3.0            # reads only map values: joins the map phase
        h = x + s                         # reads the reduction: a group of its own
        y = late * h                      # both: the two groups may not merge
    new, fetches, report = apply(prog, [y, s], ["fusion"])
    for group in _groups(new):
        map_ops, reduction, _ = split_body(group)
        if reduction is not None:
            assert not any(v is reduction.results[0] for op in map_ops for v in op.inputs)
    run_both(prog, [y, s], ["fusion"], {"x": np.random.rand(6, 5)})


def test_map_group_merges_into_a_reduced_group_it_does_not_read():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [6, 5], "float64")
        a = sg.exp(x * 2.0)
        s = sg.sum(a)
        c = sg.cos(x) * 0.5               # its own group, independent of the sum
        y = a * c                         # joins both: they merge into one group
    new, fetches, report = apply(prog, [y, s], ["fusion"])
    assert report.stats["fused_groups"] == 1
    run_both(prog, [y, s], ["fusion"], {"x": np.random.rand(6, 5)})


def test_fusion_is_linear_on_long_chains():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4], "float64")
        y = x
        for i in range(5000):
            y = sg.sin(y) if i % 2 else y * 0.5
    new, _, report = apply(prog, [y], ["fusion"])
    groups = _groups(new)
    assert sum(len(g.blocks[0].ops) for g in groups) == 5000
    assert 5000 // 64 < len(groups) < 5000 // 32     # capped by size and argument count
    assert all(len(g.inputs) <= 32 for g in groups)


def _single(build, shape, dtype="float64"):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape, dtype)
        y = build(x)
    return prog, x, y


def test_a_big_op_that_fuses_with_nothing_is_a_group_of_its_own():
    chunk = 64
    for shape, expected in [([4 * chunk], 1), ([4 * chunk - 1], 0), ([None, 3], 0),
                            ([1, 4 * chunk], 0), ([], 0), ([64, 4], 1)]:
        prog, x, y = _single(sg.sin, shape)
        new, _, report = apply(prog, [y], ["fusion"], chunk_size=chunk)
        assert report.stats["single_op_groups"] == expected, shape
        assert report.stats["fused_groups"] == 0 and len(_groups(new)) == expected
    prog, x, y = _single(sg.sin, [64, 4])
    _, _, report = apply(prog, [y], ["fusion"], chunk_size=chunk, threads=1)
    assert report.stats["single_op_groups"] == 0        # one thread: nothing to split


def test_single_op_groups_run_on_threads_and_match_the_interpreter():
    rng = np.random.default_rng(0)
    cases = [(sg.sin, [1000, 5], "float64"), (lambda v: sg.sum(v, axis=0), [1000, 5], "float32"),
             (lambda v: sg.max(v, axis=1), [1000, 5], "float64"), (sg.sum, [1000, 5], "float32")]
    for build, shape, dtype in cases:
        prog, x, y = _single(build, shape, dtype)
        feeds = {"x": rng.standard_normal((1000, 5)).astype(dtype)}
        expected, = sg.compile(prog, [y], backend="interpreter")(**feeds)
        compiled = sg.compile(prog, [y], backend="numpy", chunk_size=50, threads=4)
        assert compiled.stats["single_op_groups"] == 1 and "_POOL.over_rows(" in compiled.source
        got, = compiled(**feeds)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == "float32" else 1e-12)


def _tanh_layer_grad():
    """h = tanh(x @ w + b), loss = sum(h @ v): the backward multiplies by 1 - h * h."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6], "float64")
        w = sg.data("w", [6, 5], "float64")
        b = sg.data("b", [5], "float64")
        v = sg.data("v", [5, 3], "float64")
        h = sg.tanh(x @ w + b)
        gw, gb = ir_backward.grad(sg.sum(h @ v), [w, b])
    return prog, [gw, gb]


def _group_ops(group):
    return [o.name for o in group.blocks[0].ops]


def test_a_cheap_value_is_recomputed_where_it_is_read_instead_of_stored():
    """The forward group stores tanh's result (the next matmul reads it) but not 1 - h * h:
    the backward group, which reads it, computes it from h."""
    prog, fetches = _tanh_layer_grad()
    new, _, _ = apply(prog, fetches, ["fusion"])
    forward, backward = _groups(new)
    assert _group_ops(forward) == ["add", "tanh"]
    assert [r.op.name for r in forward.blocks[0].yields] == ["tanh"]
    assert _group_ops(backward)[:2] == ["multiply", "subtract"]   # 1 - h * h, recomputed
    assert "sum" in _group_ops(backward)                          # then the bias gradient
    feeds = {"x": np.random.rand(7, 6), "w": np.random.rand(6, 5), "b": np.random.rand(5),
             "v": np.random.rand(5, 3)}
    run_both(prog, fetches, ["fusion"], feeds)
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for backend in ("numpy", "c"):
        for want, got in zip(expected, sg.compile(prog, fetches, backend=backend)(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=backend)


def test_a_value_an_unfused_op_reads_or_a_fetch_is_stored_not_recomputed():
    # a = x * 2 is read by a matmul (unfused) and y = a * 3 is fetched: both are stored,
    # though the second group reads them too
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 4], "float64")
        a = x * 2.0
        y = a * 3.0
        m = sg.matmul(a, x)
        z = sg.exp(m) * y + a
    new, _, _ = apply(prog, [z, y], ["fusion"])
    first, second = _groups(new)
    assert _group_ops(first) == ["multiply", "multiply"]
    assert "multiply" in _group_ops(second) and len(second.inputs) == 3   # m, y and a
    run_both(prog, [z, y], ["fusion"], {"x": np.random.rand(4, 4)})


def _stored_then_read(make_d):
    """``d = make_d(t, b, c)`` with ``t = tanh(a)``, read by a group after a matmul of ``t``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        a, b, c = (sg.data(name, [8], "float64") for name in "abc")
        t = sg.tanh(a)
        d = make_d(t, b, c)
        m = sg.matmul(sg.reshape(t, [1, 8]), sg.reshape(a, [8, 1]))
        y = sg.reshape(m, [1]) * d + 1.0
    new, _, _ = apply(prog, [y], ["fusion"])
    run_both(prog, [y], ["fusion"], {n: np.random.rand(8) for n in "abc"})
    return [_group_ops(group) for group in _groups(new)]


def test_recomputing_may_add_at_most_one_array_to_what_the_reader_reads():
    # t * 2 + 1 reads t only: recomputed after the matmul (tanh is left alone, unfused);
    # t * b + c would make that group read t, b and c instead of d: stored
    assert _stored_then_read(lambda t, b, c: t * 2.0 + 1.0) == [
        ["multiply", "add", "multiply", "add"]]
    assert _stored_then_read(lambda t, b, c: t * b + c) == [
        ["tanh", "multiply", "add"], ["multiply", "add"]]


def test_recomputing_keeps_groups_within_the_size_cap():
    prog, fetches = _tanh_layer_grad()
    for cap in (2, 3, 4):
        new, _, _ = apply(prog, fetches, ["fusion"], max_group_size=cap)
        assert all(len(group.blocks[0].ops) <= cap for group in _groups(new)), cap
    new, _, _ = apply(prog, fetches, ["fusion"], max_group_size=3)
    assert not any(_group_ops(group)[:2] == ["multiply", "subtract"] for group in _groups(new))
    run_both(prog, fetches, ["fusion"], {"x": np.random.rand(7, 6), "w": np.random.rand(6, 5),
                                         "b": np.random.rand(5), "v": np.random.rand(5, 3)})
