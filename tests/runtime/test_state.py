"""Compiled programs own their parameters' state: ``fn.state``, updated by assigns after every
call, overridable by feeds, kept in place (double buffering), shared by ``Executor`` runs."""
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import FeedError, FeedTypeError

BACKENDS = [pytest.param(("numpy", {}), id="numpy"),
            pytest.param(("numpy", {"fusion": False}), id="numpy-unfused"),
            pytest.param(("c", {}), id="c"),
            pytest.param(("interpreter", {}), id="interpreter")]


def counter_program(size=300):
    """``w`` (float64[size], from 1) doubles plus 1 each call (``2 ** (calls + 1) - 1``), ``steps`` counts the calls;
    fetches ``sum(x * w)`` (``x`` fed) and reads ``v``, a parameter nothing assigns."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [size], "float64")
        w = sg.parameter("w", [size], "float64", init=np.ones(size))
        v = sg.parameter("v", [], "float64", init=2.0)
        steps = sg.parameter("steps", [], "int64", init=0)
        total = sg.sum(x * w) * v
        sg.assign(w * 2.0 + 1.0, w)
        sg.assign(steps + 1, steps)
    return prog, total


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_state_starts_from_the_inits_and_each_call_updates_it(backend):
    name, options = backend
    prog, total = counter_program()
    fn = sg.compile(prog, [total], backend=name, **options)
    assert set(fn.state) == {"w", "v", "steps"} and fn.assigned == ["w", "steps"]
    np.testing.assert_array_equal(fn.state["w"], 1.0)
    x = np.full(300, 0.5)
    for call in range(1, 4):
        out, = fn(x=x)                    # only the total is fetched: the updates run anyway
        assert out == pytest.approx(0.5 * 300 * (2 ** call - 1) * 2.0)
        np.testing.assert_array_equal(fn.state["w"], 2.0 ** (call + 1) - 1)
        assert fn.state["steps"] == call
    assert fn.state["v"] == 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fed_parameter_overrides_the_state_for_one_call(backend):
    name, options = backend
    prog, total = counter_program(4)
    fn = sg.compile(prog, [total], backend=name, **options)
    fn(x=np.ones(4))
    out, = fn(x=np.ones(4), w=np.full(4, 10.0), v=3.0)
    assert out == 4 * 10.0 * 3.0
    np.testing.assert_array_equal(fn.state["w"], 21.0)    # assigned: the update of the fed w
    assert fn.state["v"] == 2.0                            # not assigned: state unchanged
    assert fn.state["steps"] == 2


def test_compile_without_updates_reads_but_never_changes_a_shared_state():
    prog, total = counter_program(4)
    train = sg.compile(prog, [total])
    evaluate = sg.compile(prog, [total], updates=False, state=train.state)
    assert evaluate.assigned == [] and evaluate.state is train.state
    train(x=np.ones(4))
    assert evaluate(x=np.ones(4))[0] == 4 * 3.0 * 2.0       # reads the trained w
    evaluate(x=np.ones(4))
    np.testing.assert_array_equal(train.state["w"], 3.0)
    assert train.state["steps"] == 1
    with pytest.raises(TypeError, match="state must be the state of a compiled program"):
        sg.compile(prog, [total], state={"w": np.ones(4)})


def test_setting_the_state_checks_and_copies():
    prog, total = counter_program(4)
    fn = sg.compile(prog, [total])
    mine = np.full(4, 5.0)
    fn.state["w"] = mine
    mine[:] = 0.0                                   # the state holds a copy
    fn.state.update(v=1.0)
    assert fn(x=np.ones(4))[0] == 20.0
    with pytest.raises(FeedError, match="'w'.*dim 0 must be 4"):
        fn.state["w"] = np.ones(5)
    with pytest.raises(FeedTypeError, match="'steps'.*integer"):
        fn.state["steps"] = 1.5
    with pytest.raises(KeyError, match="no parameter 'u'.*w, v, steps"):
        fn.state["u"] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        fn.state["w"][0] = 1.0


def test_a_failed_call_leaves_the_state_unchanged():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, None], "float64")
        w = sg.parameter("w", [300], "float64", init=np.ones(300))
        sg.assign(w * 2.0, w)                    # runs before the matmul that fails
        out = sg.sum(x @ sg.reshape(w, [300, 1]))
    fn = sg.compile(prog, [out])
    fn(x=np.ones((2, 300)))
    before = fn.state["w"].copy()
    with pytest.raises(ValueError):
        fn(x=np.ones((2, 7)))
    np.testing.assert_array_equal(fn.state["w"], before)
    fn(x=np.ones((2, 300)))
    np.testing.assert_array_equal(fn.state["w"], before * 2)


@pytest.mark.parametrize("name", ["numpy", "c"])
def test_an_update_overwrites_the_parameters_own_array(name):
    prog, total = counter_program()
    fn = sg.compile(prog, [total], backend=name)
    host = fn.sources[".py"]
    assert "_buffers['w'] if _buffers" in host and "IN_PLACE = ['w']" in host
    assert "OVERWRITES = ['w']" in host
    fn(x=np.ones(300))              # the first call writes beside the init, which is not ours
    owner = fn.state._arrays["w"]
    for call in range(2, 7):
        fn(x=np.ones(300))
        assert fn.state._arrays["w"] is owner
        np.testing.assert_array_equal(owner, 2.0 ** (call + 1) - 1)


def raising_after_the_update_program():
    """``w`` (float64[300]) doubles each call; then ``take(x, i)`` (``i`` fed) raises for an
    index out of range, after the update has been computed."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [300], "float64")
        i = sg.data("i", [2], "int64")
        w = sg.parameter("w", [300], "float64", init=np.ones(300))
        sg.assign(w * 2.0, w)
        out = sg.sum(sg.take(x * w, i))
    return prog, out


@pytest.mark.parametrize("name", ["numpy", "c"])
def test_an_update_that_an_op_able_to_raise_follows_is_double_buffered(name):
    prog, out = raising_after_the_update_program()
    fn = sg.compile(prog, [out], backend=name)
    host = fn.sources[".py"]
    assert "IN_PLACE = ['w']" in host and "OVERWRITES = []" in host
    owners = set()
    for _ in range(6):
        fn(x=np.ones(300), i=np.array([0, 1]))
        owners.add(id(fn.state._arrays["w"]))
    assert len(owners) == 2
    before = fn.state._arrays["w"].copy()
    with pytest.raises(IndexError):
        fn(x=np.ones(300), i=np.array([0, 300]))
    np.testing.assert_array_equal(fn.state["w"], before)
    fn(x=np.ones(300), i=np.array([0, 1]))
    np.testing.assert_array_equal(fn.state["w"], before * 2)


def test_an_array_the_caller_was_given_never_changes_afterwards():
    prog, total = counter_program()
    with sg.program_guard(prog):
        w = prog.find("w")
    fn = sg.compile(prog, [total, w])
    seen = fn.state["w"]
    _, fetched = fn(x=np.ones(300))              # the w this call read
    _, fetched_next = fn(x=np.ones(300))
    for _ in range(4):
        fn(x=np.ones(300))
    np.testing.assert_array_equal(seen, 1.0)
    np.testing.assert_array_equal(fetched, 1.0)
    np.testing.assert_array_equal(fetched_next, 3.0)
    np.testing.assert_array_equal(fn.state["w"], 2.0 ** 7 - 1)


def test_parameters_assigned_from_each_other_stay_consistent():
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.parameter("a", [400], "float64", init=np.zeros(400))
        b = sg.parameter("b", [400], "float64", init=np.zeros(400))
        c = sg.parameter("c", [400], "float64", init=np.zeros(400))
        new_a = a + 1.0
        sg.assign(new_a, a)
        sg.assign(a, b)          # b: the old a
        sg.assign(new_a, c)      # c: the new a, the same array as a's
        d = sg.parameter("d", [20, 20], "float64", init=np.zeros((20, 20)))
        sg.assign(sg.reshape(new_a, [20, 20]), d)   # a view of a's new array
    fn = sg.compile(prog, [new_a])
    for call in range(1, 6):
        fn()
        assert (fn.state["a"] == call).all() and (fn.state["b"] == call - 1).all()
        assert (fn.state["c"] == call).all() and (fn.state["d"] == call).all()


def test_executor_state_is_shared_by_name_across_fetch_lists_and_programs():
    prog, total = counter_program(4)
    exe = sg.Executor("numpy")
    exe.run(prog, feed={"x": np.ones(4)}, fetch_list=[total])
    with sg.program_guard(prog):
        w = prog.find("w")
    got, = exe.run(prog, feed={"x": np.ones(4)}, fetch_list=[w])   # updates run here too
    np.testing.assert_array_equal(got, 3.0)
    assert exe.state["steps"] == 2
    other = sg.Program()
    with sg.program_guard(other):
        w_other = sg.parameter("w", [4], "float64", init=np.zeros(4))
        doubled = w_other * 2.0
    got, = exe.run(other, fetch_list=[doubled])
    np.testing.assert_array_equal(got, 2 * 7.0)      # the state's w, not this program's init
    clash = sg.Program()
    with sg.program_guard(clash):
        w_clash = sg.parameter("w", [5], "float64")
    with pytest.raises(FeedError, match="shared state holds parameter 'w' as float64\\[4\\]"):
        exe.run(clash, fetch_list=[w_clash * 1.0])


def test_concurrent_calls_of_a_program_with_state_are_serialized():
    prog, total = counter_program()
    fn = sg.compile(prog, [total], threads=1)
    threads = [threading.Thread(target=lambda: [fn(x=np.ones(300)) for _ in range(20)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fn.state["steps"] == 80


# --- artifacts keep the state -------------------------------------------------------------------
def test_an_artifact_saves_the_state_and_every_runner_continues_from_it(tmp_path):
    import json
    import runpy

    prog, total = counter_program(4)
    fn = sg.compile(prog, [total])
    fn(x=np.ones(4))
    path = fn.save(str(tmp_path / "a"))
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["state"] == ["w", "steps"] and manifest["format_version"] == 4
    runners = {"numpy": sg.load(path), "interpreter": sg.load(path, backend="interpreter"),
               "standalone": runpy.run_path(str(tmp_path / "a" / "numpy" / "standalone.py"))[
                   "load"](path)}
    for name, runner in runners.items():
        np.testing.assert_array_equal(runner.state["w"], 3.0, err_msg=name)
        assert runner(x=np.ones(4))[0] == 4 * 3.0 * 2.0
        assert runner(x=np.ones(4))[0] == 4 * 7.0 * 2.0
        np.testing.assert_array_equal(runner.state["w"], 15.0, err_msg=name)
        assert runner.state["steps"] == 3
    standalone = runners["standalone"]
    assert standalone.evaluate(x=np.ones(4))[0] == 4 * 15.0 * 2.0     # leaves the state alone
    assert standalone.state["steps"] == 3
    loaded = runners["numpy"]
    again = sg.load(loaded.save(str(tmp_path / "b.zip")))
    assert again(x=np.ones(4))[0] == 4 * 15.0 * 2.0 and again.state["steps"] == 4
    np.testing.assert_array_equal(fn.state["w"], 3.0)      # each runner has its own state


def test_a_c_artifact_saves_the_state_and_its_standalone_runner_continues_from_it(tmp_path):
    import runpy

    prog, total = counter_program(4)
    fn = sg.compile(prog, [total], backend="c")
    fn(x=np.ones(4))
    path = fn.save(str(tmp_path / "a"))
    for runner in (sg.load(path), runpy.run_path(
            str(tmp_path / "a" / "numpy" / "standalone.py"))["load"](path)):
        np.testing.assert_array_equal(runner.state["w"], 3.0)
        assert runner(x=np.ones(4))[0] == 4 * 3.0 * 2.0
        np.testing.assert_array_equal(runner.state["w"], 7.0)
        assert runner.state["steps"] == 2


def test_an_artifact_whose_manifest_misstates_the_state_is_refused(tmp_path):
    import json

    prog, total = counter_program(4)
    path = sg.compile(prog, [total]).save(str(tmp_path / "a"))
    manifest_path = tmp_path / "a" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["state"] = ["w"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(sg.ArtifactError, match="manifest.json's state"):
        sg.load(path)


def training_program():
    """A linear classifier trained by SGD: the loss needs ``x`` and ``y``, the scores only
    ``x``; returns ``(program, scores, loss)``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.data("y", [None], "int64")
        w = sg.parameter("w", [4, 3], "float64", init=np.arange(12.0).reshape(4, 3) / 10)
        scores = x @ w
        loss = sg.nn.softmax_cross_entropy(scores, y)
        sg.optimizer.SGD(0.5).minimize(loss)
    return prog, scores, loss


def test_an_input_only_the_updates_need_is_missing_the_error_names_the_updates(tmp_path):
    prog, scores, _ = training_program()
    train = sg.compile(prog, [scores])       # a training step that fetches the scores
    assert [(s.name, s.required, s.updates_only) for s in train.signature[:2]] == [
        ("x", True, False), ("y", True, True)]
    pattern = (r"missing feed for input 'y'\. Only the program's updates need 'y': the "
               r"program assigns 'w' .*updates=False")
    with pytest.raises(FeedError, match=pattern):
        train(x=np.ones((2, 4)))
    loaded = sg.load(train.save(str(tmp_path / "step")))    # the manifest records it
    assert loaded.signature == train.signature
    with pytest.raises(FeedError, match=pattern):
        loaded(x=np.ones((2, 4)))
    import runpy
    runner = runpy.run_path(str(tmp_path / "step" / "numpy" / "standalone.py"))["load"](
        str(tmp_path / "step"))
    with pytest.raises(ValueError, match=pattern):   # the same feed check, the same message
        runner(x=np.ones((2, 4)))
    np.testing.assert_array_equal(train.state["w"], prog.find("w").op.attrs["init"])


def test_a_missing_input_the_fetches_need_says_nothing_of_updates():
    prog, scores, loss = training_program()
    train = sg.compile(prog, [loss])
    with pytest.raises(FeedError, match=r"^missing feed for input 'y'$"):
        train(x=np.ones((2, 4)))


def test_an_evaluation_program_shares_the_trained_state_without_the_labels():
    prog, scores, loss = training_program()
    train = sg.compile(prog, [loss])
    evaluate = sg.compile(prog, [scores], updates=False, state=train.state)
    assert [s.name for s in evaluate.signature if s.required] == ["x"]
    x, y = np.eye(4)[:3], np.array([2, 0, 1])
    for _ in range(3):
        train(x=x, y=y)
    trained = np.array(train.state["w"])
    scores_value, = evaluate(x=x)
    np.testing.assert_allclose(scores_value, x @ trained, rtol=1e-15)
    np.testing.assert_array_equal(train.state["w"], trained)     # evaluation updates nothing


@pytest.mark.parametrize("name", ["numpy", "c"])
def test_a_parameter_fetched_by_another_program_sharing_the_state_never_changes(name):
    prog, total = counter_program()
    train = sg.compile(prog, [total], backend=name)
    train(x=np.ones(300))
    train(x=np.ones(300))          # w is now the state's own array, updated in place
    other = sg.Program()
    with sg.program_guard(other):
        w = sg.parameter("w", [300], "float64", init=np.ones(300))
        steps = sg.parameter("steps", [], "int64", init=0)
        sg.assign(steps + 10, steps)       # a call that updates the state, but not w
    peek = sg.compile(other, [w], backend=name, state=train.state)
    fetched, = peek()
    kept = fetched.copy()
    for _ in range(3):
        train(x=np.ones(300))
    np.testing.assert_array_equal(fetched, kept)
    np.testing.assert_array_equal(train.state["w"], 2.0 ** 6 - 1)
