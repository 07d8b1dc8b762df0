"""The one binding of symbolic dims at call time (``symgrad.runtime.dims``)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.runtime.dims import binder_for_fetches

BACKENDS = ["interpreter", "numpy", "c"]


def test_no_binding_without_symbolic_dims():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", [2, 3], "float32") * 2.0
    assert binder_for_fetches(prog, set(prog.ops)) is None
    assert sg.compile(prog, [y])._dim_check is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_named_dim_fed_two_sizes_names_the_symbol_both_inputs_and_sizes(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 8], "float64")
        t = sg.data("t", ["batch"], "float64")
        loss = sg.mean((sg.sum(x, axis=1) - t) ** 2)
    fn = sg.compile(prog, [loss], backend=backend)
    assert fn(x=np.ones((6, 8)), t=np.full(6, 8.0))[0] == 0.0
    with pytest.raises(sg.FeedError, match=r"dim 'batch' is 6 in t but 8 in x"):
        fn(x=np.ones((8, 8)), t=np.ones(6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_anonymous_dims_that_met_are_checked_once_at_run_time(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6], "float32")
        b = sg.data("b", [3, 2], "float32")
        y = sg.reshape(x, [-1, 3, 2]) + b                # reshape computes the run-time dim
        z = sg.sum(y, axis=0) * sg.data("c", [None, 2], "float32")
    fn = sg.compile(prog, [z], backend=backend)
    fn(x=np.ones((4, 6), "float32"), b=np.ones((3, 2), "float32"),
       c=np.ones((3, 2), "float32"))
    with pytest.raises(sg.FeedError, match=r"op multiply .*needs dim '\?1' \(1 in c\) to be 3"):
        fn(x=np.ones((4, 6), "float32"), b=np.ones((3, 2), "float32"),
           c=np.ones((1, 2), "float32"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dim_known_when_built_is_never_broadcast_from_a_fed_one(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        w = sg.parameter("w", [5, 3], "float64", init=np.ones((5, 3)))
        (g,) = ir_backward.grad(sg.sum(x * w), [w])
    fn = sg.compile(prog, [g], backend=backend)
    np.testing.assert_allclose(fn(x=np.full((5, 3), 2.0))[0], np.full((5, 3), 2.0))
    with pytest.raises(sg.FeedError, match=r"op multiply .*needs dim '\?0' \(1 in x\) to be 5"):
        fn(x=np.ones((1, 3)))


def test_each_set_of_shapes_is_bound_once():
    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.data("x", ["n"], "float32") + sg.data("y", ["n"], "float32")
    fn = sg.compile(prog, [y], backend="interpreter")
    for n in (2, 3, 2):
        fn(x=np.ones(n, "float32"), y=np.ones(n, "float32"))
    assert len(fn._dim_check.bound) == 2
    assert fn._dim_check({"x": np.ones(3), "y": np.ones(3)})["n"] == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_batch_size_never_recompiles(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 4], "float64")
        y = sg.sum(sg.tanh(x) * 2.0, axis=1)
    fn = sg.compile(prog, [y], backend=backend)
    executable = fn._executable
    for n in (1, 2, 4, 7):
        np.testing.assert_allclose(fn(x=np.ones((n, 4)))[0], np.full(n, 8 * np.tanh(1.0)))
    assert fn._executable is executable


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_artifacts_record_the_symbolic_signature_and_bind_dims_the_same_way(backend, tmp_path):
    import json
    import runpy

    from symgrad.cli import main

    prog = sg.Program()
    with sg.program_guard(prog):
        h = sg.data("h", ["batch", 8], "float64")
        t = sg.data("t", [None], "float64")
        r = sg.sum(h, axis=1) - t
        flat = sg.reshape(h, [-1])
        loss = sg.mean(r * r)
    path = sg.compile(prog, [loss, flat], backend=backend).save(str(tmp_path / "a"))
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert [s["dims"] for s in manifest["inputs"]] == [["batch", 8], ["?0"]]
    assert [s.get("dims") for s in manifest["outputs"]] == [None, ["batch*8"]]
    loaded = sg.load(path)
    runner = runpy.run_path(str(tmp_path / "a" / "numpy" / "standalone.py"))["load"](path)
    feeds = {"h": np.ones((6, 8)), "t": np.full(6, 8.0)}
    assert loaded(**feeds)[0] == runner(**feeds)[0] == 0.0
    messages = []
    for run in (loaded, runner):
        with pytest.raises(ValueError) as info:
            run(h=np.ones((6, 8)), t=np.ones(5))
        messages.append((type(info.value).__name__, str(info.value)))
    assert messages[0] == messages[1]
    assert messages[0][0] == "FeedError" and "dim 'batch' (6 in h)" in messages[0][1]
    assert isinstance(pytest.raises(sg.FeedError, loaded, h=np.ones((6, 8)), t=np.ones(5)).value,
                      sg.FeedError)
    assert main(["inspect", path]) == 0


def test_inspect_shows_the_symbolic_signature(tmp_path, capsys):
    from symgrad.cli import main

    prog = sg.Program()
    with sg.program_guard(prog):
        y = sg.reshape(sg.data("x", ["batch", 4], "float32"), [-1])
    path = sg.compile(prog, [y]).save(str(tmp_path / "a"))
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "x: float32[batch, 4]  (data)" in out and "0. -: float32[batch*4]" in out
