"""``sg.optimizer``: SGD and Adam step for step against a float64 reimplementation of
PyTorch's formulas (and PyTorch itself when it is installed), their slots, fusion, and several
``minimize`` calls on one program."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.fused import is_fusion
from symgrad.ops.state import assignments

BACKENDS = [pytest.param(("numpy", {}), id="numpy"),
            pytest.param(("numpy", {"fusion": False}), id="numpy-unfused"),
            pytest.param(("c", {}), id="c"),
            pytest.param(("interpreter", {}), id="interpreter")]
RNG = np.random.default_rng(7)
X = RNG.standard_normal((6, 5, 16))      # 6 steps of 5 rows of 16 features
Y = RNG.integers(0, 3, (6, 5))


def mlp(dtype="float64", optimizer=None, **minimize):
    """A 16-8-3 tanh MLP with a softmax cross-entropy; returns ``(program, loss, pairs)``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], dtype)
        y = sg.data("y", [None], "int64")
        w1 = sg.parameter("w1", [16, 8], dtype)
        b1 = sg.parameter("b1", [8], dtype, init=0.1)
        w2 = sg.parameter("w2", [8, 3], dtype)
        logits = sg.nn.linear(sg.tanh(sg.nn.linear(x, w1, b1)), w2)
        loss = sg.nn.softmax_cross_entropy(logits, y)
        pairs = optimizer.minimize(loss, **minimize) if optimizer is not None else []
    return prog, loss, pairs


class ReferenceSGD:
    def __init__(self, lr, momentum=0.0):
        self.lr, self.momentum, self.buffers = lr, momentum, {}

    def step(self, params, grads):
        for name, g in grads.items():
            if self.momentum:
                buffer = self.buffers.get(name)
                buffer = g.copy() if buffer is None else self.momentum * buffer + g
                self.buffers[name] = buffer
                g = buffer
            params[name] = params[name] - self.lr * g

    def slots(self):
        return {"@momentum": self.buffers} if self.momentum else {}


class ReferenceAdam:
    def __init__(self, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.t, self.m, self.v = 0, {}, {}

    def step(self, params, grads):
        self.t += 1
        for name, g in grads.items():
            m = self.m.get(name, 0.0) * self.beta1 + (1 - self.beta1) * g
            v = self.v.get(name, 0.0) * self.beta2 + (1 - self.beta2) * g * g
            self.m[name], self.v[name] = m, v
            denominator = np.sqrt(v) / np.sqrt(1 - self.beta2 ** self.t) + self.eps
            params[name] = params[name] - self.lr / (1 - self.beta1 ** self.t) * (m / denominator)

    def slots(self):
        return {"@adam_m": self.m, "@adam_v": self.v}


CASES = {
    "sgd": (lambda: sg.optimizer.SGD(0.5), lambda: ReferenceSGD(0.5)),
    "sgd-momentum": (lambda: sg.optimizer.SGD(0.2, momentum=0.9), lambda: ReferenceSGD(0.2, 0.9)),
    "adam": (lambda: sg.optimizer.Adam(0.05, beta1=0.8, beta2=0.99, epsilon=1e-6),
             lambda: ReferenceAdam(0.05, 0.8, 0.99, 1e-6)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_updates_match_pytorchs_formulas_step_for_step(case, backend):
    make, make_reference = CASES[case]
    name, options = backend
    prog, loss, pairs = mlp(optimizer=make())
    grads = {p.name: g for p, g in pairs}
    fn = sg.compile(prog, [loss, *grads.values()], backend=name, **options)
    reference = make_reference()
    params = {name: np.array(fn.state[name]) for name in grads}
    for step in range(len(X)):
        loss_value, *grad_values = fn(x=X[step], y=Y[step])
        reference.step(params, dict(zip(grads, grad_values)))
        for name in grads:
            np.testing.assert_allclose(fn.state[name], params[name], rtol=1e-12, atol=1e-15,
                                       err_msg=f"{name} after step {step + 1}")
            for suffix, values in reference.slots().items():
                np.testing.assert_allclose(fn.state[name + suffix], values[name], rtol=1e-12,
                                           atol=1e-15, err_msg=f"{name}{suffix}")
    if case == "adam":
        assert fn.state["w1@adam_t"] == len(X)


@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_match_pytorch(case):
    torch = pytest.importorskip("torch")
    make, _ = CASES[case]
    optimizer = make()
    prog, loss, pairs = mlp(optimizer=optimizer)
    fn = sg.compile(prog, [loss])
    tensors = {p.name: torch.tensor(np.array(fn.state[p.name]), requires_grad=True)
               for p, _ in pairs}
    if isinstance(optimizer, sg.optimizer.Adam):
        reference = torch.optim.Adam(tensors.values(), lr=optimizer.learning_rate,
                                     betas=(optimizer.beta1, optimizer.beta2),
                                     eps=optimizer.epsilon, foreach=False)
    else:
        reference = torch.optim.SGD(tensors.values(), lr=optimizer.learning_rate,
                                    momentum=optimizer.momentum, foreach=False)
    for step in range(len(X)):
        fn(x=X[step], y=Y[step])
        reference.zero_grad()
        hidden = torch.tanh(torch.tensor(X[step]) @ tensors["w1"] + tensors["b1"])
        torch.nn.functional.cross_entropy(hidden @ tensors["w2"], torch.tensor(Y[step])).backward()
        reference.step()
        for name, tensor in tensors.items():
            np.testing.assert_allclose(fn.state[name], tensor.detach().numpy(), rtol=1e-10,
                                       atol=1e-12)


def test_slots_are_zero_initialized_non_trainable_parameters_named_after_theirs():
    prog, loss, pairs = mlp(optimizer=sg.optimizer.Adam())
    assert [p.name for p, _ in pairs] == ["w1", "b1", "w2"]
    slots = {p.name: p for p in prog.parameters[3:]}
    assert list(slots) == ["w1@adam_t", "w1@adam_m", "w1@adam_v", "b1@adam_m", "b1@adam_v",
                           "w2@adam_m", "w2@adam_v"]
    for slot in slots.values():
        assert slot.stop_gradient and not slot.op.attrs["init"].any()
    assert slots["w1@adam_t"].dtype == np.int64 and slots["w2@adam_v"].shape == (8, 3)
    assert set(p.name for p in assignments(prog)) == {p.name for p in prog.parameters}


def test_adams_update_of_each_parameter_is_one_fused_group_with_its_gradient():
    prog, loss, pairs = mlp("float32", sg.optimizer.Adam())
    fn = sg.compile(prog, [loss])
    committed = assignments(fn.program)
    for param, _ in pairs:
        values = [committed[p].op.inputs[0] for p in committed
                  if p.name in (param.name, f"{param.name}@adam_m", f"{param.name}@adam_v")]
        producers = {id(value.op) for value in values}
        assert len(values) == 3 and len(producers) == 1, param.name
        assert is_fusion(values[0].op)
    bias, = [p for p in committed if p.name == "b1"]   # b1's gradient is a sum: it runs in
    bias_group = committed[bias].op.inputs[0].op       # the loop that updates b1
    assert any(op.name == "sum" for op in bias_group.blocks[0].ops)
    assert "IN_PLACE" in fn.source


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: sg.optimizer.SGD(-1.0), ValueError, "learning_rate must be a number"),
    (lambda: sg.optimizer.SGD(0.1, momentum="0.9"), ValueError, "momentum"),
    (lambda: sg.optimizer.Adam(beta1=1.0), ValueError, r"beta1 must be a number in \[0.0, 1.0\)"),
    (lambda: sg.optimizer.Adam(epsilon=True), ValueError, "epsilon"),
])
def test_bad_hyperparameters(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_a_failed_minimize_leaves_the_program_unchanged():
    prog, loss, _ = mlp()
    before = str(prog)
    with sg.program_guard(prog):
        not_scalar = sg.tanh(prog.find("w1"))
    before = str(prog)
    with pytest.raises(ValueError, match="loss must be a float scalar"):
        sg.optimizer.SGD(0.1).minimize(not_scalar)
    with pytest.raises(ValueError, match="names 'nope'"):
        sg.optimizer.Adam().minimize(loss, parameter_list=["w1", "nope"])
    assert str(prog) == before


def test_parameter_list_and_no_grad_set():
    prog, loss, pairs = mlp(optimizer=sg.optimizer.SGD(0.1), parameter_list=["w2", "b1"],
                            no_grad_set=["b1"])
    assert [(p.name, g is not None) for p, g in pairs] == [("b1", False), ("w2", True)]
    assert [p.name for p in assignments(prog)] == ["w2"]


def test_a_learning_rate_value_is_read_when_the_program_runs():
    prog = sg.Program()
    with sg.program_guard(prog):
        lr = sg.data("lr", [], "float64")
        w = sg.parameter("w", [3], "float32", init=1.0)
        sg.optimizer.SGD(lr).minimize(sg.sum(w * w))
    fn = sg.compile(prog, [])
    fn(lr=0.25)
    np.testing.assert_allclose(fn.state["w"], 0.5)
    fn(lr=0.5)
    np.testing.assert_allclose(fn.state["w"], 0.0)


def test_two_optimizers_on_disjoint_parameters():
    prog, loss, _ = mlp()
    with sg.program_guard(prog):
        first = sg.optimizer.SGD(0.3).minimize(loss, parameter_list=["w1", "b1"])
        second = sg.optimizer.Adam(0.01).minimize(loss, parameter_list=["w2"])
    grads = {p.name: g for p, g in first + second}
    fn = sg.compile(prog, [loss, *grads.values()])
    params = {name: np.array(fn.state[name]) for name in grads}
    sgd, adam = ReferenceSGD(0.3), ReferenceAdam(0.01)
    for step in range(3):
        _, g1, g2, g3 = fn(x=X[step], y=Y[step])
        sgd.step(params, {"w1": g1, "b1": g2})
        adam.step(params, {"w2": g3})
        for name in grads:
            np.testing.assert_allclose(fn.state[name], params[name], rtol=1e-12)


def test_two_updates_of_one_parameter_compose_with_the_gradients_of_the_call():
    prog, loss, _ = mlp()
    with sg.program_guard(prog):
        first = sg.optimizer.SGD(0.1, momentum=0.5).minimize(loss)
        second = sg.optimizer.SGD(0.1, momentum=0.5).minimize(loss * 2.0)
    assert "w1@momentum_2" in {p.name for p in prog.parameters}
    grads = [g for _, g in first] + [g for _, g in second]
    fn = sg.compile(prog, [loss, *grads])
    names = ["w1", "b1", "w2"]
    params = {name: np.array(fn.state[name]) for name in names}
    one, two = ReferenceSGD(0.1, 0.5), ReferenceSGD(0.1, 0.5)
    for step in range(3):
        _, *values = fn(x=X[step], y=Y[step])
        one.step(params, dict(zip(names, values[:3])))       # p = update2(update1(p)),
        two.step(params, dict(zip(names, values[3:])))       # both gradients at the old p
        for name in names:
            np.testing.assert_allclose(fn.state[name], params[name], rtol=1e-12)


def test_apply_gradients_updates_from_fed_gradients():
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [3], "float64", init=np.ones(3))
        b = sg.parameter("b", [], "float64", init=0.0)
        gw, gb = sg.data("gw", [3], "float64"), sg.data("gb", [], "float64")
        pairs = sg.optimizer.Adam(0.1).apply_gradients([(w, gw), (b, gb), (b, None)])
        assert len(pairs) == 3
        with pytest.raises(ValueError, match="gradient float64\\[2\\] of 'w'"):
            sg.optimizer.SGD(0.1).apply_gradients([(w, sg.zeros([2], "float64"))])
        with pytest.raises(TypeError, match="expected \\(parameter, gradient Value\\)"):
            sg.optimizer.SGD(0.1).apply_gradients([(gw, gw)])
    update = sg.compile(prog, [])
    reference, params = ReferenceAdam(0.1), {"w": np.ones(3), "b": np.zeros(())}
    for step in range(3):
        grads = {"w": RNG.standard_normal(3), "b": RNG.standard_normal(())}
        update(gw=grads["w"], gb=grads["b"])
        reference.step(params, grads)
        for name in params:
            np.testing.assert_allclose(update.state[name], params[name], rtol=1e-12)


def test_training_saved_and_loaded_midway_goes_on_as_if_never_stopped(tmp_path):
    import runpy

    def dropout_mlp():
        prog, _, _ = mlp()
        with sg.program_guard(prog):
            x, y = prog.find("x"), prog.find("y")
            w1, b1, w2 = (prog.find(name) for name in ("w1", "b1", "w2"))
            hidden = sg.nn.dropout(sg.tanh(sg.nn.linear(x, w1, b1)), 0.3)
            loss = sg.nn.softmax_cross_entropy(sg.nn.linear(hidden, w2), y)
            sg.optimizer.Adam(0.05).minimize(loss)
        return sg.compile(prog, [loss])

    steps = [{"x": X[k], "y": Y[k]} for k in range(6)]
    straight, stopped = dropout_mlp(), dropout_mlp()
    want = [straight(**feeds)[0] for feeds in steps]
    got = [stopped(**feeds)[0] for feeds in steps[:3]]
    path = stopped.save(str(tmp_path / "checkpoint"))
    resumed = sg.load(path)
    runner = runpy.run_path(str(tmp_path / "checkpoint" / "numpy" / "standalone.py"))["load"](path)
    got += [resumed(**feeds)[0] for feeds in steps[3:]]
    standalone = [runner(**feeds)[0] for feeds in steps[3:]]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(standalone, want[3:])
    assert set(resumed.state) == set(straight.state) and resumed.state["rng_step"] == 6
    for name in straight.state:
        np.testing.assert_array_equal(resumed.state[name], straight.state[name], err_msg=name)
        np.testing.assert_array_equal(runner.state[name], straight.state[name], err_msg=name)
