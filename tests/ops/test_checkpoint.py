"""``checkpoint=`` of scan and fori_loop at build time: the segment plan, the structure it
builds, the forward results, and the errors (naming the op, leaving the program unchanged)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.checkpoint import segment_length
from tests.ops.samples import interpret


@pytest.mark.parametrize("policy, length, expected", [
    (None, 10, None), (3, 10, 3), (1, 10, 1), (10, 10, None), (12, 10, None),
    ("sqrt", 10, 4), ("sqrt", 16, 4), ("sqrt", 17, 5), ("sqrt", 1, None), (3, 0, None),
    (np.int64(2), 5, 2)])
def test_segment_length(policy, length, expected):
    assert segment_length("scan", policy, length) == expected


def test_an_open_ended_loop_takes_an_int_policy():
    assert segment_length("while_loop", 3, None, open_ended=True) == 3
    assert segment_length("while_loop", None, None, open_ended=True) is None


@pytest.mark.parametrize("policy", [0, -2, True, 2.0, "log", ("binomial", 4)])
def test_a_bad_policy_is_refused_naming_the_op(policy):
    with pytest.raises(ValueError, match="scan: checkpoint must be None, an int >= 1 or "):
        segment_length("scan", policy, 10)


def test_a_run_time_trip_count_is_refused_and_the_program_is_unchanged():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, 3], "float64")
        n = sg.data("n", [], "int64")
        init = xs[0] * 0.0
        before = str(prog)
        with pytest.raises(ValueError, match="scan: checkpoint='sqrt' needs the trip count"):
            sg.scan(lambda c, x: (c + x, None), init, xs, checkpoint="sqrt")
        with pytest.raises(ValueError, match="fori_loop: checkpoint='sqrt' needs the trip"):
            sg.fori_loop(0, n, lambda i, v: v * 2.0, init, checkpoint="sqrt")
        with pytest.raises(ValueError, match="while_loop: checkpoint='sqrt' needs the trip"):
            sg.while_loop(lambda v: sg.sum(v) < 9.0, lambda v: [v * 2.0], [init],
                          checkpoint="sqrt")
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
