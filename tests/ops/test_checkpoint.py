"""``checkpoint=`` of scan and fori_loop at build time: the segment plan, the structure it
builds, the forward results, and the errors (naming the op, leaving the program unchanged)."""
import math

import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.checkpoint import (ADVANCE, RESTORE, REVERSE, STORE, _sg_reverse_plan,
                                    plan_cost, plan_slots, run_time_plan,
                                    segment_length)
from tests.ops.samples import interpret


@pytest.mark.parametrize("policy, length, expected", [
    (None, 10, None), (3, 10, 3), (1, 10, 1), (10, 10, None), (12, 10, None),
    ("sqrt", 10, 4), ("sqrt", 16, 4), ("sqrt", 17, 5), ("sqrt", 1, None), (3, 0, None),
    (np.int64(2), 5, 2)])
def test_segment_length(policy, length, expected):
    assert segment_length("scan", policy, length) == expected


def test_segments_need_the_trip_count_at_build_time():
    with pytest.raises(ValueError, match="while_loop: checkpoint=3 needs the trip count"):
        segment_length("while_loop", 3, None)
    assert segment_length("while_loop", None, None) is None


@pytest.mark.parametrize("policy", [0, -2, True, 2.0, "log", ("binomial", 0),
                                    ("binomial", 2.0), ("revolve", 4), ["binomial", 4]])
def test_a_bad_policy_is_refused_naming_the_op(policy):
    with pytest.raises(ValueError, match="scan: checkpoint must be None, an int >= 1, 'sqrt' "):
        run_time_plan("scan", policy, 10)


@pytest.mark.parametrize("policy, length, expected", [
    (("binomial", 4), 10, ("binomial", 4)), (("binomial", 4), None, ("binomial", 4)),
    ("sqrt", None, ("sqrt", 0)), (3, None, ("every", 3)), ("sqrt", 10, None),
    (3, 10, None), (None, None, None)])
def test_run_time_plan(policy, length, expected):
    """A trip count known only at run time (a while loop's among them) gets a schedule;
    a build-time one segments (``k``, ``"sqrt"``)."""
    assert run_time_plan("scan", policy, length) == expected


def _replay(steps, kind, param):
    """Run the actions of the schedule on step numbers: each is valid, and every step is
    reversed once, last to first. Returns (steps advanced, slots used)."""
    current, slots, reversed_steps, advanced = 0, {}, [], 0
    for action, a, b in _sg_reverse_plan(steps, kind, param):
        if action == ADVANCE:
            assert current == a and b > a
            current, advanced = b, advanced + b - a
        elif action == STORE:
            assert current == b
            slots[a] = b
        elif action == RESTORE:
            assert slots[a] == b
            current = b
        else:
            assert action == REVERSE and current == a
            reversed_steps.append(a)
    assert reversed_steps == list(range(steps - 1, -1, -1))
    return advanced, len(slots)


def _fewest_advances(steps, slots):
    """The fewest forward steps that reverse ``steps`` steps from a stored carry with
    ``slots`` slots (its own included), by exhaustive search over the first stored step."""
    best = [[0] * (slots + 1) for _ in range(steps + 1)]
    for length in range(2, steps + 1):
        best[length][1] = length * (length - 1) // 2
        for s in range(2, slots + 1):
            best[length][s] = min(m + best[length - m][s - 1] + best[m][s]
                                  for m in range(1, length))
    return best


def test_the_binomial_schedule_is_optimal_and_keeps_at_most_s_carries():
    best = _fewest_advances(80, 6)
    for steps in range(1, 81):
        for slots in range(1, 7):
            advanced, used = _replay(steps, "binomial", slots)
            assert advanced == best[steps][slots], (steps, slots)
            assert advanced == plan_cost(steps, "binomial", slots)[0]
            assert used == plan_slots(steps, "binomial", slots) <= slots
            # Griewank & Walther's closed form: r * l - C(s + r, r - 1)
            reps = next(r for r in range(steps + 1) if math.comb(slots + r, slots) >= steps)
            assert advanced == reps * steps - (math.comb(slots + reps, reps - 1) if reps else 0)


@pytest.mark.parametrize("kind, param", [("every", 1), ("every", 3), ("every", 50),
                                         ("sqrt", 0)])
def test_the_segment_schedules(kind, param):
    for steps in range(1, 40):
        advanced, used = _replay(steps, kind, param)
        k = param if kind == "every" else math.isqrt(steps - 1) + 1
        segments = -(-steps // k)
        assert used == plan_slots(steps, kind, param) == segments + min(k, steps) - 1
        assert advanced <= 2 * steps


def test_a_bad_policy_leaves_the_program_unchanged():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, 3], "float64")
        n = sg.data("n", [], "int64")
        init = xs[0] * 0.0
        before = str(prog)
        with pytest.raises(ValueError, match="scan: checkpoint must be"):
            sg.scan(lambda c, x: (c + x, None), init, xs, checkpoint="log")
        with pytest.raises(ValueError, match="fori_loop: checkpoint must be"):
            sg.fori_loop(0, n, lambda i, v: v * 2.0, init, checkpoint=("binomial", 0))
        with pytest.raises(ValueError, match="while_loop: checkpoint must be None, an int"):
            sg.while_loop(lambda v: sg.sum(v) < 9.0, lambda v: [v * 2.0], [init],
                          checkpoint=0)
        assert str(prog) == before


def test_structures_none_ys_and_a_length_without_xs():
    def build(xs, checkpoint):
        def f(carry, x):
            a, (b,) = carry
            v, (twice,) = x
            return (a + v, (b * twice,)), (a, None)
        (a, (b,)), (ys, nothing) = sg.scan(f, (xs[0] * 0.0, (xs[0] * 0.0 + 1.0,)),
                                           (xs, (xs * 0.5,)), checkpoint=checkpoint)
        assert nothing is None
        powers, _ = sg.scan(lambda c, _: (c * 1.5, None), xs[0], length=7,
                            checkpoint=checkpoint)
        return a, b, ys, powers
    xs = np.arange(21.0).reshape(7, 3)
    _, plain = interpret(lambda x: build(x, None), xs)
    for policy in (2, 3, "sqrt"):
        _, got = interpret(lambda x: build(x, policy), xs)
        for a, b in zip(got, plain):
            assert np.array_equal(a, b)


def test_segments_are_region_ops_of_k_steps():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [10, 3], "float64")
        sg.scan(lambda c, x: (c * x, c), xs[0], xs, checkpoint=4)
    outer, tail = [op for op in prog.ops if op.name == "scan"]
    assert outer.attrs == {"num_carry": 1, "num_xs": 1, "length": 2, "reverse": False,
                           "remat": True}
    (inner,) = outer.blocks[0].ops
    assert inner.name == "scan" and inner.attrs["length"] == 4 and "remat" not in inner.attrs
    assert tail.attrs["length"] == 2 and tail.blocks[0] is not inner.blocks[0]
