"""Group functions written once: groups that are the same code up to names share a function."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.host.functions import (
    Commented, Function, FunctionTable, Placeholders, fill, indented)


def _function(names, body, name="f"):
    holders = Placeholders()
    refs = [holders.of(n) for n in names]
    lines = [line.format(*refs) for line in body]
    return Function(holders.of(name), [refs[0]], lambda: "Doc.", lines, holders.names)


# --- the table ---------------------------------------------------------------------------------
def test_same_code_under_other_names_is_shared():
    table = FunctionTable()
    first = _function(["a", "b"], ["{1} = np.tanh({0})", "return {1}"], name="_group0")
    second = _function(["x", "y"], ["{1} = np.tanh({0})", "return {1}"], name="_group1")
    assert table.add([first], 0) == ("_group0", None)
    assert table.add([second], 1) == ("_group0", 0)
    [lines] = table.lines()
    assert lines[0] == "def _group0(a):"
    assert "Fused group 1 runs this function too" in "\n".join(lines)


@pytest.mark.parametrize("body", [
    ["{1} = np.sin({0})", "return {1}"],          # another op
    ["{1} = np.tanh({0} * 2.0)", "return {1}"],   # another constant
    ["{1} = np.tanh({0})", "return {0}"],         # another dataflow
])
def test_different_code_is_not_shared(body):
    table = FunctionTable()
    table.add([_function(["a", "b"], ["{1} = np.tanh({0})", "return {1}"])], 0)
    assert table.add([_function(["a", "b"], body, name="g")], 1) == ("g", None)
    assert len(table.lines()) == 2


def test_comments_do_not_prevent_sharing_and_are_rendered_only_when_written():
    rendered = []

    def note(op):
        rendered.append(op)
        return f"  # {op}"
    table = FunctionTable()
    table.add([_function(["a"], [], name="f")], 0)
    first, second = (_function(["a"], [], name=n) for n in ("g", "h"))
    first.body = [Commented("return 1", note, "%1")]
    second.body = [Commented("return 1", note, "%9")]
    table.add([first], 1)
    table.add([second], 2)
    lines = [line for function in table.lines() for line in function]
    assert "    return 1  # %1" in lines and rendered == ["%1"]


def test_ranges_of_sharing_groups_are_compressed():
    table = FunctionTable()
    for group in [0, 1, 2, 3, 5, 7, 8]:
        table.add([_function(["a"], ["return {0}"], name=f"_group{group}")], group)
    text = "\n".join(table.lines()[0])
    assert "Fused groups 1-3, 5, 7-8 run this function too" in text


def test_fill_and_indented():
    holders = Placeholders()
    text = f"{holders.of('x')} = {holders.of('y')} + {holders.of('x')}"
    assert fill(text, holders.names) == "x = y + x"
    line = indented(Commented("pass", lambda op: f"  # {op}", "%3"))
    assert str(line) == "    pass  # %3" and f"{line}" == "    pass  # %3"


# --- generated modules --------------------------------------------------------------------------
def _chain(n, scale=lambda i: 0.9, names=False):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 8], "float64")
        y = x
        for i in range(n):
            y = sg.tanh(y) if i % 2 else y * scale(i)
            if names:
                y.name = f"h{i}"
        loss = sg.sum(y)
        gx, = ir_backward.grad(loss, [x])
    return prog, [loss, gx]


def _run_both(prog, fetches, **options):
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (300, 8))}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    compiled = sg.compile(prog, fetches, backend="numpy", **options)
    for e, g in zip(expected, compiled(**feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    return compiled


@pytest.mark.parametrize("names", [False, True])
@pytest.mark.parametrize("chunk_size", [64, 65536])
def test_repeated_groups_share_functions_and_match_the_interpreter(names, chunk_size):
    prog, fetches = _chain(400, names=names)
    compiled = _run_both(prog, fetches, chunk_size=chunk_size, max_group_size=16)
    source = compiled.source
    assert "\x01" not in source and "\x02" not in source
    defined = re.findall(r"^def (_group\d+)\(", source, re.M)
    called = set(re.findall(r"= (_group\d+)\(", source))
    assert compiled.stats["group_functions"] == len(defined) < compiled.stats["fused_groups"] / 4
    assert called == set(defined)
    assert "(runs _group" in source and "Fused groups " in source


def test_groups_with_other_constants_do_not_share():
    prog, fetches = _chain(64, scale=lambda i: 1.0 + i / 1000)
    compiled = _run_both(prog, fetches, max_group_size=8)
    assert "(runs _group" not in compiled.source
    assert compiled.stats["group_functions"] == compiled.stats["fused_groups"] \
        + compiled.stats["single_op_groups"]


def test_shared_functions_keep_threads_and_results_right():
    prog, fetches = _chain(200)
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (5000, 8))}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for threads in (1, 4):
        compiled = sg.compile(prog, fetches, backend="numpy", threads=threads, chunk_size=256,
                              max_group_size=16)
        assert compiled.stats["group_functions"] < compiled.stats["fused_groups"]
        for e, g in zip(expected, compiled(**feeds)):
            np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


def test_every_op_is_named_in_a_comment_shared_groups_included():
    from symgrad.ir.printer import format_op_head
    from symgrad.ops.fused import is_fusion

    prog, fetches = _chain(300)
    compiled = sg.compile(prog, fetches, backend="numpy", max_group_size=16)
    assert compiled.stats["group_functions"] < compiled.stats["fused_groups"]
    source = compiled.source
    for op in compiled.program.ops:
        for inner in (op.blocks[0].ops if is_fusion(op) else [op]):
            if inner.opdef.category != "source":
                assert f"# {format_op_head(inner)}" in source or \
                    f"#   {format_op_head(inner)}" in source, format_op_head(inner)


# --- random unrolled loops ----------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.backends.test_numpy_random import apply_steps  # noqa: E402


def _unrolled(steps, repeats, dynamic):
    """A random loop body (the random-program ops) applied ``repeats`` times to a state."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None if dynamic else 9, 4], "float64")
        b = sg.data("b", [4], "float64")
        h = x
        for _ in range(repeats):
            pool = apply_steps(steps, [h, b, h * 0.5], h)
            h = sg.tanh(h + pool[-1] * b)
        loss = sg.sum(h)
        grads = ir_backward.grad(loss, [x, b])
    return prog, [loss, *grads]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.integers(0, 100),
                          st.integers(0, 100)), min_size=1, max_size=6),
       st.integers(2, 6), st.booleans(), st.sampled_from([4, 64]), st.sampled_from([8, 65536]))
def test_random_unrolled_loops_share_functions_and_match(steps, repeats, dynamic, cap, chunk):
    prog, fetches = _unrolled(steps, repeats, dynamic)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.uniform(-1, 1, (9, 4)), "b": rng.uniform(-1, 1, 4)}
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    compiled = sg.compile(prog, fetches, backend="numpy", max_group_size=cap, chunk_size=chunk)
    groups = compiled.stats["fused_groups"] + compiled.stats.get("single_op_groups", 0)
    assert compiled.stats["group_functions"] <= groups
    for e, g in zip(expected, compiled(**feeds)):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


def test_a_seen_structure_renders_nothing(monkeypatch):
    from symgrad.backends.host import chunks as group

    monkeypatch.setattr(group, "CHECK_STRUCTURES", False)
    rendered = []
    render = group._Lowering.render
    monkeypatch.setattr(group._Lowering, "render",
                        lambda self: rendered.append(self.op.attrs["group"]) or render(self))
    prog, fetches = _chain(400)
    compiled = sg.compile(prog, fetches, backend="numpy", max_group_size=16)
    assert len(rendered) < compiled.stats["fused_groups"] / 4
    assert len(rendered) >= compiled.stats["group_functions"]


def test_check_mode_catches_a_structure_that_misses_something(monkeypatch):
    from symgrad.backends.host import chunks as group

    monkeypatch.setattr(group, "CHECK_STRUCTURES", True)
    monkeypatch.setattr(group._Lowering, "structure", lambda self: "all groups alike")
    prog, fetches = _chain(64, scale=lambda i: 1.0 + i / 1000)
    with pytest.raises(AssertionError, match="equal structure rendered different code"):
        sg.compile(prog, fetches, backend="numpy", max_group_size=8)
