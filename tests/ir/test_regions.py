"""Regions in the IR: blocks with arguments and yields, insertion points, the graph-query kit,
the verifier, per-thread program_guard, and the IR layer's independence from the ops."""
import ast
import threading
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import VerificationError
from symgrad.ir.graph import (free_values, is_visible, last_uses, live_ops, walk_blocks,
                              walk_ops)
from symgrad.ir.program import Block, current_block, insertion_point


def _scan_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")

        def body(c, v):
            inner = sg.cond(sg.sum(c) > 0.0, lambda a: a * w, lambda a: a, c)
            return inner + v, None

        y, _ = sg.scan(body, x, sg.stack([x, x]))
    return prog, x, w, y


def test_blocks_have_arguments_yields_and_parents():
    prog, x, w, y = _scan_program()
    scan = y.op
    (body,) = scan.blocks
    assert body.parent_op is scan and body.parent_block is prog.global_block()
    assert [a.arg_of for a in body.args] == [body, body] and body.args[0].op is None
    assert body.args[0].block is body and len(body.yields) == 1
    cond = next(op for op in body.ops if op.name == "cond")
    assert all(b.parent_block is body for b in cond.blocks)
    assert prog.global_block().encloses(cond.blocks[0]) and not body.encloses(prog.global_block())


def test_walks_and_captures():
    prog, x, w, y = _scan_program()
    names = [op.name for op in walk_ops(prog.ops)]
    assert names.index("scan") < names.index("cond") < names.index("multiply")
    assert len(list(walk_blocks([prog.global_block()]))) == 4
    scan = y.op
    assert free_values(scan.blocks) == [w]              # x and the stack are operands
    cond = next(op for op in scan.blocks[0].ops if op.name == "cond")
    assert w in free_values(cond.blocks)
    assert is_visible(w, cond.blocks[0]) and not is_visible(cond.results[0], prog.global_block())


def test_live_ops_and_last_uses():
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [2])
        b = sg.tanh(a)
        c = sg.exp(a)
        d = b * 2.0
    live = live_ops(prog.ops, [d])
    assert c.op not in live and [a.op, b.op] == live[:2] and live[-1] is d.op
    last = last_uses(prog.ops, reads_after=[d])
    assert last[a] == 2 and last[d] == len(prog.ops)


def test_insertion_point_builds_into_a_block():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2])
    block = Block(prog, outer=prog.global_block())
    with insertion_point(block):
        assert current_block(prog) is block
        y = sg.tanh(x)
    assert y.op.block is block and y.op not in prog.ops
    assert current_block(prog) is prog.global_block()


def test_verifier_catches_region_mistakes():
    prog, x, w, y = _scan_program()
    prog.verify()
    scan = y.op
    saved = list(scan.inputs)
    scan.inputs = [v for v in scan.inputs if v is not w]     # drop the capture
    with pytest.raises(VerificationError, match="does not list among its inputs"):
        prog.verify()
    scan.inputs = saved
    body = scan.blocks[0]
    inner = body.ops[-1].results[0]
    saved_yields = body.yields
    body.yields = [inner]
    prog.verify()
    with sg.program_guard(prog):
        leak = sg.tanh(x)
    leak.op.inputs = [inner]                                # a global op reads an inner Value
    with pytest.raises(VerificationError, match="outside the region that defines it"):
        prog.verify()
    body.yields = saved_yields


def test_program_guard_is_per_thread():
    errors = []

    def build(seed):
        try:
            for _ in range(20):
                prog = sg.Program()
                with sg.program_guard(prog):
                    x = sg.data("x", [2])
                    y = x
                    for _ in range(30):
                        y = sg.tanh(y) + float(seed)
                assert sg.default_main_program() is not prog
                assert all(v.program is prog for op in prog.ops for v in op.results)
                assert len(prog.ops) == 1 + 30 * 3 - 29   # one cached constant per program
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_the_ir_layer_imports_nothing_from_ops_or_passes():
    ir_dir = Path(sg.__file__).parent / "ir"
    for path in ir_dir.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                assert node.module.split(".")[0] not in {
                    "ops", "passes", "autodiff", "backends", "runtime"}, path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("symgrad.") for a in node.names), path.name


def test_values_get_their_operators_from_the_ops_package():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2, 2], "float64")
        y = ((x + 1.0) @ x.T)[0].sum() ** 2
    (out,) = sg.compile(prog, [y], backend="interpreter")(x=np.eye(2))
    assert np.isclose(out, 9.0)      # ((I + 1) @ I)[0] = [2, 1]
