import numpy as np

import symgrad as sg
from symgrad.ir.graph import walk_ops
from tests.passes.helpers import apply, op_names, run_both


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3, 4], "float64")
        a = sg.tanh(x) * 2.0
        b = sg.tanh(x) * 2.0           # duplicate of a
        unused = sg.exp(x)             # dead for the fetch below
        y = a + b
    return prog, x, y, unused


def test_prune_drops_ops_the_fetches_do_not_need():
    prog, x, y, unused = _program()
    before = str(prog)
    new, fetches, report = apply(prog, [y], ["prune"])
    assert "exp" not in op_names(new)
    assert str(prog) == before                   # the input program is untouched
    assert report.stats["pruned_ops"] == 1
    run_both(prog, [y], ["prune"], {"x": np.ones((3, 4))})


def test_prune_drops_dead_ops_of_a_region_nested_in_a_loop_body():
    """A region whose own ops all live is rebuilt when a region inside it loses ops."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")

        def step(c, _):
            def branch(a):
                sg.exp(a)                      # dead: the branch yields only a * 2
                return a * 2.0
            return sg.cond(sg.sum(c) > 0.0, branch, lambda a: a - 1.0, c), None
        y, _ = sg.scan(step, x, length=3)
    new, _, report = apply(prog, [y], ["prune"])
    assert "exp" in [op.name for op in walk_ops(prog.ops)]
    assert "exp" not in [op.name for op in walk_ops(new.ops)]
    assert report.stats["pruned_ops"] == 1
    run_both(prog, [y], ["prune"], {"x": np.array([0.5, -0.2, 1.0])})


def test_cse_merges_equal_ops_and_equal_small_constants():
    prog, x, y, _ = _program()
    new, fetches, report = apply(prog, [y], ["prune", "cse"])
    assert op_names(new).count("tanh") == 1
    assert op_names(new).count("multiply") == 1
    assert op_names(new).count("constant") == 1   # the two 2.0 constants compare by value
    assert report.stats["cse_merged"] >= 2
    run_both(prog, [y], ["prune", "cse"], {"x": np.random.rand(3, 4)})


def test_cse_keeps_different_attrs_and_signed_zeros_apart():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2, 3], "float64")
        s0 = sg.sum(x, axis=0)
        s1 = sg.sum(x, axis=1)
        z = sg.constant(0.0, "float64") + x
        w = sg.constant(-0.0, "float64") + x
    new, _, report = apply(prog, [s0, s1, z, w], ["cse"])
    assert op_names(new).count("sum") == 2
    assert op_names(new).count("constant") == 2
    assert report.stats["cse_merged"] == 0


def test_cse_never_merges_inputs():
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [2], "float64")
        b = sg.data("b", [2], "float64")
        y = a + b
    new, _, _ = apply(prog, [y], ["cse"])
    assert op_names(new).count("data") == 2
    run_both(prog, [y], ["cse"], {"a": np.ones(2), "b": np.arange(2.0)})


def test_large_constants_compare_by_identity():
    big = np.ones(1000)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [1000], "float64")
        y = (x + sg.constant(big)) * (x + sg.constant(big.copy()))
    new, _, _ = apply(prog, [y], ["cse"])
    assert op_names(new).count("constant") == 2
