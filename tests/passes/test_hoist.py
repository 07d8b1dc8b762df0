"""Loop-invariant code motion (``hoist``): ops of a scan's body that read only what the loop
captures move before it, chains of them in order, out of one loop level at a time; ops that
read a step's values, constants, broadcasts, custom ops and the bodies of while loops and of
scans that may run no step stay. The interpreter and the code generators agree with the
unhoisted program, and the hosts hand a loop's transposed captures to its steps contiguous."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ir.graph import walk_ops
from symgrad.passes import DEFAULT_PIPELINE, hoist

from .helpers import apply, run_both

RNG = np.random.default_rng(3)


def _loops(program):
    return [op for op in walk_ops(program.ops) if op.name in ("scan", "while_loop")]


def _body_names(loop):
    return [op.name for op in loop.blocks[-1].ops]


def _rnn(batch=4):
    """A tanh RNN over 6 steps and the gradient of its weights: its backward scan reads
    ``transpose(W)`` at every step."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [6, batch, 3], "float64")
        h0 = sg.data("h0", [batch, 5], "float64")
        w = sg.data("w", [5, 5], "float64")
        u = sg.data("u", [3, 5], "float64")
        h, _ = sg.scan(lambda h, x: (sg.tanh(sg.matmul(h, w) + sg.matmul(x, u)), None), h0, xs)
        loss = sg.sum(h * h)
        fetches = [loss] + ir_backward.grad(loss, [w, u, h0])
    feeds = {"xs": RNG.standard_normal((6, 4, 3)), "h0": RNG.standard_normal((4, 5)),
             "w": RNG.standard_normal((5, 5)) * 0.5, "u": RNG.standard_normal((3, 5))}
    return prog, fetches, feeds


def test_a_reverse_scan_reads_its_transposed_weight_hoisted():
    prog, fetches, feeds = _rnn()
    new, _, report = apply(prog, fetches, ["prune", "cse", "simplify", "hoist"])
    new.verify()
    assert report.stats["hoisted_ops"] == 1
    backward = [op for op in new.ops if op.name == "scan"][-1]
    moved = [op for op in new.ops if op.name == "transpose"]
    assert len(moved) == 1
    assert any(v is moved[0].results[0] for v in backward.inputs)     # a capture now
    assert moved[0].inputs[0].name == "w"
    run_both(prog, fetches, DEFAULT_PIPELINE, feeds)


def test_invariant_chains_move_in_order_and_step_values_stay():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [4, 3], "float64")
        w = sg.data("w", [3], "float64")
        b = sg.data("b", [], "float64")

        def step(c, x):
            scale = sg.exp(w) * 2.0            # constant operand: stays (inlined literal)
            shift = sg.tanh(sg.exp(w) + b)     # invariant chain: exp, add, tanh move
            wide = sg.broadcast_to(w, [5, 3])  # larger than its input: stays
            return c * x + shift + sg.sum(wide, axis=0) + scale, None
        c, _ = sg.scan(step, sg.zeros([3], "float64"), xs)
    new, _, report = apply(prog, [c], ["hoist"])
    new.verify()
    (loop,) = _loops(new)
    hoisted = [op.name for op in new.ops[new.ops.index(loop) - report.stats["hoisted_ops"]:
                                         new.ops.index(loop)]]
    assert hoisted == ["exp", "exp", "add", "tanh"]
    assert "broadcast_to" in _body_names(loop) and "multiply" in _body_names(loop)
    run_both(prog, [c], ["hoist"], {"xs": RNG.standard_normal((4, 3)),
                                   "w": RNG.standard_normal(3), "b": np.float64(0.3)})


def test_nothing_moves_out_of_while_loops_scans_of_no_step_and_custom_ops():
    triple = sg.custom_op("hoist_test_triple", lambda a: a * 3.0, lambda t: t,
                          lambda inputs, outputs, grads: [grads[0] * 3.0])
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.data("w", [3], "float64")
        xs = sg.data("xs", [0, 3], "float64")
        empty, _ = sg.scan(lambda c, x: (c + sg.exp(w) * x, None), sg.zeros([3], "float64"), xs)
        custom, _ = sg.scan(lambda c, _: (c + triple(w), None), sg.zeros([3], "float64"),
                            length=2)
        counted = sg.while_loop(lambda i, c: i < 3, lambda i, c: (i + 1, c + sg.exp(w)),
                                (sg.zeros([], "int64"), sg.zeros([3], "float64")))
        fetches = [empty, custom, counted[1]]
    new, _, report = apply(prog, fetches, ["hoist"])
    assert report.stats["hoisted_ops"] == 0 and new is not None
    out = sg.compile(prog, fetches, backend="numpy")(w=np.ones(3), xs=np.zeros((0, 3)))
    np.testing.assert_allclose(out[1], 6.0)
    np.testing.assert_allclose(out[2], 3 * np.e)


def test_an_inner_loop_hoists_into_the_outer_body_one_level():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [3, 2, 4], "float64")
        w = sg.data("w", [4], "float64")

        def outer(c, x):
            inner, _ = sg.scan(lambda d, row: (d + row * sg.sin(w) + sg.cos(c), None), c, x)
            return inner, None
        c, _ = sg.scan(outer, sg.zeros([4], "float64"), xs)
    new, _, report = apply(prog, [c], ["hoist"])
    new.verify()
    outer_loop, inner_loop = _loops(new)
    assert report.stats["hoisted_ops"] == 2                    # sin(w) and cos(c)
    assert {"sin", "cos"} <= set(_body_names(outer_loop))      # one level out, both
    assert not {"sin", "cos"} & set(_body_names(inner_loop))
    run_both(prog, [c], ["hoist"], {"xs": RNG.standard_normal((3, 2, 4)),
                                   "w": RNG.standard_normal(4)})


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_backends_agree_with_the_interpreter_and_hand_steps_a_contiguous_transpose(backend):
    prog, fetches, feeds = _rnn(batch=None)
    prog_feeds = dict(feeds)
    want = sg.compile(prog, fetches, backend="interpreter")(**prog_feeds)
    fn = sg.compile(prog, fetches, backend=backend)
    assert fn.stats["hoisted_ops"] == 1
    for got, ref in zip(fn(**prog_feeds), want):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    if backend == "c":   # the scans are loops in C, whose entries copy it once a call
        assert fn.sources[".py"].count("a loop in C") == 2
    else:
        assert "= np.ascontiguousarray(" in fn.source and "read at every step" in fn.source


def test_the_pass_is_pure_and_returns_its_input_when_nothing_moves():
    prog, fetches, _ = _rnn()
    before = str(prog)
    copy, value_map = prog.clone()
    hoist(copy, [value_map[v] for v in fetches], None)
    assert str(prog) == before
    plain = sg.Program()
    with sg.program_guard(plain):
        x = sg.data("x", [3], "float64")
        y = sg.exp(x)
    assert hoist(plain, [y], None)[0] is plain


def test_a_checkpointed_reverse_loop_hoists_from_its_blocks_bit_for_bit():
    """The backward of ``checkpoint=("binomial", 2)`` is a ``reverse_loop``: the transposed
    weight leaves its reverse block, and the gradients stay those of the stored scan."""
    def build(policy):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = sg.data("xs", [6, 4, 5], "float64")
            w = sg.data("w", [5, 5], "float64")
            h, _ = sg.scan(lambda h, x: (sg.tanh(sg.matmul(h, w) + x), None),
                           sg.zeros([4, 5], "float64"), xs, checkpoint=policy)
            loss = sg.sum(h * h)
            fetches = [loss] + ir_backward.grad(loss, [w])
        return prog, fetches
    feeds = {"xs": RNG.standard_normal((6, 4, 5)), "w": RNG.standard_normal((5, 5)) * 0.5}
    prog, fetches = build(("binomial", 2))
    new, _, report = apply(prog, fetches, ["hoist"])
    (loop,) = [op for op in new.ops if op.name == "reverse_loop"]
    moved = [op for op in new.ops if op.name == "transpose"]
    assert report.stats["hoisted_ops"] == 1 and moved[0].inputs[0].name == "w"
    assert not [op for op in loop.blocks[1].ops
                if op.name == "transpose" and op.inputs[0].name == "w"]
    plain = sg.compile(*build(None), backend="numpy")(**feeds)
    for got, want in zip(sg.compile(prog, fetches, backend="numpy")(**feeds), plain):
        np.testing.assert_array_equal(got, want)
