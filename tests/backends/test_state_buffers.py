"""Optimizer steps update their parameters and slots in place (``OVERWRITES``), with the
results of double buffering, bit for bit, and a call that raises leaves the state as it was."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import FeedError

OPTIMIZERS = {"sgd": lambda: sg.optimizer.SGD(0.1),
              "momentum": lambda: sg.optimizer.SGD(0.1, momentum=0.9),
              "adam": lambda: sg.optimizer.Adam(0.01),
              "adamw": lambda: sg.optimizer.AdamW(0.01, weight_decay=0.1)}


def training_program(optimizer):
    """A two-layer tanh regression with integer-class softmax cross-entropy, minimized by
    ``optimizer``; fetches the loss."""
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 24], "float32")
        labels = sg.data("labels", [None], "int64")
        w0 = sg.parameter("w0", [24, 32], "float32",
                          init=rng.standard_normal((24, 32)).astype("float32") * 0.3)
        b0 = sg.parameter("b0", [32], "float32", init=np.zeros(32, "float32"))
        w1 = sg.parameter("w1", [32, 5], "float32",
                          init=rng.standard_normal((32, 5)).astype("float32") * 0.3)
        h = sg.tanh(sg.nn.linear(x, w0, b0))
        loss = sg.nn.softmax_cross_entropy(h @ w1, labels)
        optimizer.minimize(loss)
    return prog, loss


def data(rows=16, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 24)).astype("float32"), rng.integers(0, 5, rows)


def steps(fn, count, seen=False):
    """``count`` training steps; ``seen``: read every state array after each (a caller holding
    them makes the next step write beside them: double buffering)."""
    x, labels = data()
    losses = []
    for _ in range(count):
        losses.append(fn(x=x, labels=labels)[0])
        if seen:
            for name in fn.state:
                fn.state[name]
    return losses, snapshot(fn)


def snapshot(fn) -> dict:
    """Copies of the state's arrays (without marking them seen, as ``fn.state[name]`` does)."""
    return {name: np.array(array) for name, array in fn.state._arrays.items()}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_in_place_steps_equal_double_buffered_steps_bit_for_bit(backend, optimizer):
    prog, loss = training_program(OPTIMIZERS[optimizer]())
    fn = sg.compile(prog, [loss], backend=backend)
    assert "'w0'" in fn.sources[".py"].split("OVERWRITES = ")[1].splitlines()[0]
    owner = None
    losses, state = [], {}
    for count in range(4):
        losses += steps(fn, 1)[0]
        if count:
            assert fn.state._arrays["w0"] is owner     # updated in place
        owner = fn.state._arrays["w0"]
    state = snapshot(fn)
    reference = sg.compile(prog, [loss], backend=backend)
    ref_losses, ref_state = steps(reference, 4, seen=True)
    np.testing.assert_array_equal(losses, ref_losses)
    for name in state:
        np.testing.assert_array_equal(state[name], ref_state[name], err_msg=name)
    oracle = sg.compile(prog, [loss], backend="interpreter")
    oracle_losses, oracle_state = steps(oracle, 4)
    np.testing.assert_allclose(losses, oracle_losses, rtol=1e-5)
    for name in state:
        np.testing.assert_allclose(state[name], oracle_state[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_a_call_that_raises_leaves_an_overwritten_state_bit_identical(backend):
    prog, loss = training_program(sg.optimizer.Adam(0.01))
    fn = sg.compile(prog, [loss], backend=backend)
    steps(fn, 2)
    arrays = dict(fn.state._arrays)
    before = snapshot(fn)
    x, labels = data()
    with pytest.raises(FeedError):                       # the feeds' dims disagree
        fn(x=x, labels=labels[:3])
    with pytest.raises(ValueError, match="class index 7"):   # raised by an op, mid-call
        fn(x=x, labels=np.where(labels == labels[0], 7, labels))
    for name, array in arrays.items():
        assert fn.state._arrays[name] is array
        np.testing.assert_array_equal(array, before[name], err_msg=name)
    reference = sg.compile(prog, [loss], backend=backend)
    steps(reference, 3)
    assert steps(fn, 1)[1].keys() == before.keys()
    for name, array in snapshot(fn).items():
        np.testing.assert_array_equal(array, reference.state[name], err_msg=name)


def overwritten(build, backend="numpy"):
    """The module's OVERWRITES, and the state of ``w`` after three calls against the
    interpreter's, for a program ``build(w)`` that assigns ``w`` (float64[20, 20])."""
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [20, 20], "float64",
                         init=np.arange(400.0).reshape(20, 20) / 400)
        out = build(w)
    fn = sg.compile(prog, [out], backend=backend)
    oracle = sg.compile(prog, [out], backend="interpreter")
    for _ in range(3):
        np.testing.assert_allclose(fn()[0], oracle()[0], rtol=1e-12)
    np.testing.assert_allclose(fn.state["w"], oracle.state["w"], rtol=1e-12)
    return fn.sources[".py"].split("OVERWRITES = ")[1].splitlines()[0]


def test_an_update_reading_a_view_of_its_parameter_writes_beside_it():
    def build(w):
        sg.assign(w * 0.5 + sg.transpose(w) * 0.25, w)   # reads w[j, i] while writing w[i, j]
        return sg.sum(w)
    assert overwritten(build) == "[]" and overwritten(build, "c") == "[]"


def test_an_update_before_a_later_read_of_a_view_writes_beside_it():
    def build(w):
        new = w * 0.5
        sg.assign(new, w)
        return sg.sum(sg.tanh(new) @ sg.transpose(w))      # the old w, after the update
    assert overwritten(build) == "[]"


def test_an_update_after_every_read_overwrites():
    def build(w):
        total = sg.sum(sg.transpose(w) @ w)                 # reads w (and a view) first
        sg.assign(w * 0.5 + 1.0, w)
        return total
    assert overwritten(build) == "['w']" and overwritten(build, "c") == "['w']"
