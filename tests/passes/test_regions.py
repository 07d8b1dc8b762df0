"""Passes inside regions: CSE sees the twins of enclosing blocks only, simplify and fusion
rewrite loop bodies and branches, DCE narrows regions to what is read of them, and fused
groups are left as the fusion pass made them."""
import numpy as np

import symgrad as sg
from symgrad.ir.graph import walk_ops
from symgrad.passes import DEFAULT_PIPELINE, is_fusion

from .helpers import apply


def _names(program):
    return [op.name for op in walk_ops(program.ops)]


def test_cse_reuses_an_enclosing_twin_but_not_a_sibling_branchs():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        outer = sg.exp(x)
        y = sg.cond(sg.sum(x) > 0.0, lambda a: sg.exp(x) + sg.sin(a), lambda a: sg.sin(a), x)
        z = outer + y
    new, fetches, report = apply(prog, [z], ["cse"])
    new.verify()
    assert report.stats["cse_merged"] == 1 and _names(new).count("exp") == 1
    assert _names(new).count("sin") == 2            # one per branch: siblings do not share
    (cond,) = [op for op in new.ops if op.name == "cond"]
    assert any(v.op is not None and v.op.name == "exp" for v in cond.inputs)   # a capture now


def test_simplify_and_fusion_work_inside_a_loop_body():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [5, 8], "float64")
        c, _ = sg.scan(lambda c, x: (sg.tanh(c * 1.0 + x) * sg.exp(-x) - 0.0, None),
                       sg.zeros([8], "float64"), xs)
    new, fetches, report = apply(prog, [c], DEFAULT_PIPELINE)
    new.verify()
    (scan,) = [op for op in new.ops if op.name == "scan"]
    body_ops = scan.blocks[0].ops
    assert report.stats["simplified"] >= 2
    assert any(is_fusion(op) for op in body_ops) and report.stats["fused_groups"] >= 1
    xs_v = np.random.default_rng(0).standard_normal((5, 8))
    want = sg.compile(prog, [c], backend="interpreter")(xs=xs_v)[0]
    got = sg.compile(prog, [c], backend="numpy")(xs=xs_v)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_dce_drops_unread_cond_results_and_their_ops():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        a, b = sg.cond(sg.sum(x) > 0.0, lambda v: (sg.sin(v), sg.exp(v)),
                       lambda v: (sg.cos(v), sg.log1p(v * v)), x)
    new, fetches, report = apply(prog, [a], ["prune"])
    new.verify()
    (cond,) = [op for op in new.ops if op.name == "cond"]
    assert len(cond.results) == 1 and all(len(block.yields) == 1 for block in cond.blocks)
    assert "exp" not in _names(new) and "log1p" not in _names(new)
    assert report.stats["pruned_ops"] >= 3


def test_passes_leave_fused_groups_as_they_are():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 4], "float64")
        y = sg.sum(sg.tanh(x * 1.0) * 2.0)
    fused, fetches, _ = apply(prog, [y], DEFAULT_PIPELINE)
    again, _, report = apply(fused, fetches, DEFAULT_PIPELINE)
    again.verify()
    def text(program):
        return str(program).split("\n", 1)[1]          # without the program's number

    assert report.stats["fused_groups"] == 0 and text(again) == text(fused)
