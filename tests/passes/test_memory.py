import numpy as np

import symgrad as sg
from symgrad.passes.memory import plan
from tests.passes.helpers import apply, run_both


def _chain(fetch_middle=False):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [1000], "float64")
        a = sg.sin(x)
        b = sg.cos(a)
        c = sg.exp(b)
        d = sg.tanh(c)
    return prog, x, [d, b] if fetch_middle else [d]


def test_buffers_are_reused_after_last_use():
    prog, x, fetches = _chain()
    new, new_fetches, report = apply(prog, fetches, ["memory_plan"])
    slots = [new.buffer_plan.get(op.results[0]) for op in new.ops]
    assert slots[0] is None                      # the input is never planned
    assert new_fetches[0] not in new.buffer_plan  # nor the fetched value
    assert slots[1:] == [0, 1, 0, None]   # exp reuses sin's buffer
    assert report.stats["buffers"] == 2
    assert report.stats["planned_peak_bytes"] < report.stats["unplanned_peak_bytes"] + 1
    run_both(prog, fetches, ["memory_plan"], {"x": np.random.rand(1000)})


def test_fetched_values_keep_their_buffer():
    prog, x, fetches = _chain(fetch_middle=True)
    new, new_fetches, _ = apply(prog, fetches, ["memory_plan"])
    b = new_fetches[1]
    assert b not in new.buffer_plan
    run_both(prog, fetches, ["memory_plan"], {"x": np.random.rand(1000)})


def test_views_extend_the_lifetime_of_their_base():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 250], "float64")
        a = sg.sin(x)
        v = sg.reshape(a, [1000])          # a view of a's buffer
        b = sg.cos(x)                     # must not take a's buffer: v is still alive
        y = sg.reshape(b, [1000]) + v
    by_value, _ = plan(prog, [y])
    assert by_value[a] != by_value[b]
    run_both(prog, [y], ["memory_plan"], {"x": np.random.rand(4, 250)})
