"""The pipeline as a whole: passes share unchanged programs, copies are complete, long
programs go through, interleaved fusion groups stay schedulable."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ir.operation import Operation
from symgrad.ir.value import Value
from symgrad.passes import DEFAULT_PIPELINE, PASSES, is_fusion, optimize
from symgrad.passes.rewrite import Rebuilder
from symgrad.runtime.options import CompileOptions
from tests.passes.helpers import apply, op_names, run_both

OPTIONS = CompileOptions()


def _chain(steps, shape=(None, 4)):
    """``y`` stepped by ``y +- 0.001 * f(y)`` (gradients stay near 1) and ``d sum(y) / dx``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", list(shape), "float64")
        y = x
        for i in range(steps):
            y = y + sg.sin(y) * 0.001 if i % 2 else y - sg.tanh(y) * 0.001
        gx, = ir_backward.grad(sg.sum(y), [x])
    return prog, x, y, gx


@pytest.mark.slow
def test_full_pipeline_on_a_100000_op_chain():
    prog, x, y, gx = _chain(12_500)
    assert len(prog.ops) >= 100_000
    xv = np.linspace(-1.0, 1.0, 8).reshape(2, 4)
    compiled = run_both(prog, [y, gx], DEFAULT_PIPELINE, {"x": xv})
    assert compiled.stats["fused_groups"] > 0
    assert compiled.stats["ops_after"] < len(prog.ops)


def test_passes_with_nothing_to_do_return_their_input():
    prog, x, y, gx = _chain(3)
    copy, value_map = prog.clone()
    fetches = [value_map[y], value_map[gx]]
    live, fetches, stats = PASSES["prune"](copy, fetches, OPTIONS)
    assert stats["pruned_ops"] == 1 and live is not copy     # the loss is dead
    for name in ("prune", "cse", "dce"):
        again, again_fetches, _ = PASSES[name](live, fetches, OPTIONS)
        assert again is live and again_fetches == fetches
    unfused, _, _ = PASSES["fusion"](live, fetches, OPTIONS.replace(fusion=False))
    assert unfused is live


def test_simplify_drops_what_its_rewrites_orphan():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.exp(x * 1.0)
    new, _, report = apply(prog, [y], ["simplify"])
    assert op_names(new) == ["data", "exp"]           # the constant 1.0 went with x * 1.0
    assert report.stats["simplified"] == 1 and report.stats["pruned_ops"] == 1


def test_memory_plan_inside_optimize_never_annotates_the_callers_program():
    prog, x, y, gx = _chain(2, shape=(2, 4))
    copy, value_map = prog.clone()
    fetches = [value_map[gx]]
    alone, _, _ = optimize(copy, fetches, OPTIONS, ["memory_plan"])
    assert alone is not copy and not hasattr(copy, "buffer_plan")
    live, live_fetches, _ = PASSES["prune"](copy, fetches, OPTIONS)
    planned, _, _ = optimize(live, live_fetches, OPTIONS, ["cse", "memory_plan"])
    assert planned is not live and not hasattr(live, "buffer_plan")   # cse changed nothing
    piped, _, _ = optimize(copy, fetches, OPTIONS)           # fused, then planned in place
    assert isinstance(piped.buffer_plan, dict) and piped is not copy


def test_copies_set_every_slot_and_keep_types():
    prog, x, y, gx = _chain(2)
    builder = Rebuilder(prog)
    builder.copy_all(prog.ops)
    for old, new in zip(prog.ops, builder.program.ops):
        for slot in Operation.__slots__[:-1]:                # all but __weakref__
            getattr(new, slot)
        assert new.opdef is old.opdef and new.attrs == old.attrs and new.attrs is not old.attrs
        for old_value, value in zip(old.results, new.results):
            for slot in Value.__slots__[:-1]:
                getattr(value, slot)
            assert (value.id, value.shape, value.dtype, value.name) == \
                (old_value.id, old_value.shape, old_value.dtype, old_value.name)
            assert value.program is builder.program and value.op is new
    builder.program.verify()


def test_clone_copies_fused_programs_deeply():
    prog, x, y, gx = _chain(4, shape=(2, 4))
    fused, fetches, _ = apply(prog, [gx], DEFAULT_PIPELINE)
    copy, value_map = fused.clone()
    copy.verify()
    for old, new in zip(fused.ops, copy.ops):
        assert is_fusion(old) == is_fusion(new)
        if is_fusion(new):
            (block,) = new.blocks
            assert block.parent_op is new and block is not old.blocks[0]
            assert all(value_map[v] is w for v, w in zip(old.inputs, new.inputs))
            assert all(v.program is copy for inner in block.ops for v in inner.results)
            assert all(value_map[v] is w for v, w in zip(old.blocks[0].yields, block.yields))


def test_interleaved_groups_never_form_a_cycle():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        a, b = sg.exp(x), sg.sin(x)
        ab = a * b        # joins a's group; b's group is full
        ba = b + a        # joins b's group: each group now reads the other
    run_both(prog, [ab, ba], ["fusion"], {"x": np.arange(3.0)})
    new, _, _ = apply(prog, [ab, ba], ["fusion"], max_group_size=2)
    assert not any(is_fusion(op) for op in new.ops)
    compiled = sg.compile(prog, [ab, ba], backend="numpy", max_group_size=2)
    expected = sg.compile(prog, [ab, ba], backend="interpreter")(x=np.arange(3.0))
    for got, want in zip(compiled(x=np.arange(3.0)), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
