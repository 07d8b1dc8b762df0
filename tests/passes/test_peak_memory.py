"""``CompiledProgram.memory(**shapes)`` (:mod:`symgrad.passes.peak_memory`): the planned peak
bytes of a call, exact on small programs, and checkpointed loops plan the memory the targets of
issue 25 give (the W6m RNN: "sqrt" at most 1/20 of storing every step, ("binomial", 8) at most
1/100), whether the trip count is known at build time or only from the feeds."""
import pytest

import symgrad as sg
from symgrad import ir_backward


def test_a_chain_holds_two_arrays_at_once_and_views_own_nothing():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 10], "float64")
        y = sg.exp(x)
        z = sg.reshape(y, [-1]) * 2.0         # the reshape is a view of y
        w = sg.sum(z)
    fn = sg.compile(prog, [w], backend="numpy", passes=[])
    assert fn.memory(x=(100, 10)) == 2 * 8000       # y and z at once (then z and the sum)
    assert fn.memory(x=(200, 10)) == 2 * 16000


def _rnn(policy, steps, static=True, hidden=256, batch=32):
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [steps if static else None, batch, hidden], "float64")
        w = sg.data("w", [hidden, hidden], "float64")
        h0 = sg.data("h0", [batch, hidden], "float64")
        h, _ = sg.scan(lambda h, x: (sg.tanh(h @ w + x), None), h0, xs, checkpoint=policy)
        loss = sg.sum(h * h)
        grads = ir_backward.grad(loss, [w, h0])
    return sg.compile(prog, [loss] + grads, backend="numpy")


@pytest.mark.parametrize("static", [True, False])
def test_checkpointed_loops_plan_the_memory_the_targets_give(static):
    shapes = {"xs": (10_000, 32, 256)}
    every = _rnn(None, 10_000, static).memory(**shapes)
    carries = 10_000 * 32 * 256 * 8
    assert carries <= every < 1.2 * carries         # one stored carry per step, about
    assert _rnn("sqrt", 10_000, static).memory(**shapes) * 20 <= every
    assert _rnn(("binomial", 8), 10_000, static).memory(**shapes) * 100 <= every
    assert _rnn(100, 10_000, static).memory(**shapes) * 20 <= every


def test_memory_grows_with_the_fed_trip_count_only_without_checkpoint():
    plain, binomial = _rnn(None, None, False, 8, 2), _rnn(("binomial", 4), None, False, 8, 2)
    assert plain.memory(xs=(2000, 2, 8)) > 1.9 * plain.memory(xs=(1000, 2, 8))
    assert binomial.memory(xs=(2000, 2, 8)) == binomial.memory(xs=(1000, 2, 8))


def test_errors_name_the_input_or_the_value():
    fn = _rnn(None, None, False, 8, 2)
    with pytest.raises(ValueError, match="no input named 'x'"):
        fn.memory(x=(3, 2, 8))
    with pytest.raises(ValueError, match="known only at run time"):
        fn.memory()
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        (v,) = sg.while_loop(lambda v: sg.sum(v) < 9.0, lambda v: [v + sg.exp(v)], [x])
        (g,) = ir_backward.grad(sg.sum(v), [x])
    with pytest.raises(ValueError, match="known only at run time"):
        sg.compile(prog, [g], backend="numpy").memory()
    # the result, and the fused step making the next v (no stacked residual without grad)
    assert sg.compile(prog, [v], backend="numpy").memory() == 2 * 3 * 8
