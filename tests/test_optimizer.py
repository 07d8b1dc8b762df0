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


@pytest.mark.parametrize("make", [
    sg.optimizer.Adam,
    lambda: sg.optimizer.AdamW(sg.optimizer.CosineAnnealingLR(1e-3, 100), weight_decay=0.1)])
def test_adams_update_of_each_parameter_is_one_fused_group_with_its_gradient(make):
    prog, loss, pairs = mlp("float32", make())
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
    (lambda: sg.optimizer.SGD(0.1, nesterov=True), ValueError,
     "Nesterov momentum needs momentum > 0 and dampening = 0, got momentum=0.0"),
    (lambda: sg.optimizer.SGD(0.1, 0.9, dampening=0.1, nesterov=True), ValueError,
     "dampening=0.1"),
    (lambda: sg.optimizer.SGD(0.1, 0.9, nesterov=1), TypeError, "nesterov must be a bool"),
    (lambda: sg.optimizer.SGD(0.1, dampening=2.0), ValueError, r"dampening .*\[0.0, 1.0\]"),
    (lambda: sg.optimizer.AdamW(weight_decay=-0.1), ValueError, "weight_decay must be"),
    (lambda: sg.optimizer.Adam(max_grad_norm=0.0), ValueError,
     "max_grad_norm must be a positive number"),
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


# --- weight decay, Nesterov, dampening, AdamW, schedules, clipping: literal numbers -----------
# Two parameters start from W0 and B0 and take five steps with the gradients GRADS (fed). The
# values after each step were computed once, in float64, by a NumPy re-implementation of the
# update rules as PyTorch documents them (the schedules in their closed forms, clipping with
# the scale max_norm / max(norm, max_norm)), and agree with torch 2.13 to 3e-15.
W0, B0 = [0.5, -1.0, 2.0], 0.25
GRADS = [([0.1, -0.2, 0.3], 0.5), ([0.4, 0.0, -0.5], -0.25), ([-0.3, 0.6, 0.2], 0.125),
         ([0.05, -0.1, -0.7], 1.0), ([0.2, 0.2, 0.2], -0.75)]
LITERAL_CASES = {
    "sgd-nesterov-weight-decay": lambda: sg.optimizer.SGD(0.1, momentum=0.9, nesterov=True,
                                                          weight_decay=0.01),
    "sgd-dampening-weight-decay": lambda: sg.optimizer.SGD(0.1, momentum=0.9, dampening=0.3,
                                                           weight_decay=0.05),
    "sgd-step-schedule": lambda: sg.optimizer.SGD(sg.optimizer.StepLR(0.2, 2, 0.5),
                                                  momentum=0.5),
    "sgd-clipped": lambda: sg.optimizer.SGD(0.1, momentum=0.9, max_grad_norm=0.5),
    "adam-weight-decay": lambda: sg.optimizer.Adam(0.05, weight_decay=0.1),
    "adamw": lambda: sg.optimizer.AdamW(0.05, weight_decay=0.1),
    "adamw-warmup-cosine": lambda: sg.optimizer.AdamW(
        sg.optimizer.SequentialLR([sg.optimizer.LinearLR(0.05, 0.2, 1.0, 2),
                                   sg.optimizer.CosineAnnealingLR(0.05, 3, 0.005)], [2]),
        beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.1),
}
LITERAL_EXPECTED = {
    "sgd-nesterov-weight-decay": [
        ([0.48005, -0.9601, 1.9392], 0.154525),
        ([0.394632905, -0.94126581, 2.00459552], 0.1610289025),
        ([0.4104397619805, -1.0373907239609998, 1.9783880365120001], 0.12046553233524998),
        ([0.387741267329687, -1.049779243379374, 2.1038465000714273], -0.094875459312212),
        ([0.3334453095218114, -1.1068679819450549, 2.1135423581576367], -0.05589366944313284),
    ],
    "sgd-dampening-weight-decay": [
        ([0.4875, -0.975, 1.96], 0.19875),
        ([0.44654375, -0.9490875, 1.95214], 0.169429375),
        ([0.429120221875, -0.9644444437499999, 1.92423351], 0.1336978096875),
        ([0.4084371257859375, -0.9678901375718749, 1.941382851715], 0.031071458572343738),
        ([0.37439280936553043, -0.9816036465300608, 1.9360224192774975], -0.008901007536300097),
    ],
    "sgd-step-schedule": [
        ([0.48, -0.96, 1.94], 0.15),
        ([0.38999999999999996, -0.94, 2.01], 0.15),
        ([0.39749999999999996, -0.9949999999999999, 2.0075], 0.13749999999999998),
        ([0.39625, -1.0125, 2.07625], 0.031249999999999972),
        ([0.3859375, -1.026875, 2.0834375], 0.042187499999999975),
    ],
    "sgd-clipped": [
        ([0.49199359230974565, -0.9839871846194913, 1.975980776929237], 0.2099679615487282),
        ([0.4556921066903844, -0.9695756507770334, 1.9907331245382156], 0.1921239511289163),
        ([0.4441156462509982, -0.9987950235548992, 1.9899469863076038], 0.1672748098269027),
        ([0.4316572893144306, -1.0210133739727383, 2.0177930574757332], 0.10411973183269026),
        ([0.4083402174181437, -1.0531144400021695, 2.0307499708736736], 0.09267222658805922),
    ],
    "adam-weight-decay": [
        ([0.4500000033333331, -0.9500000016666666, 1.950000001], 0.20000000095238094),
        ([0.40404381272949136, -0.90682417451219, 1.9407851944408097], 0.1842517408558026),
        ([0.38841713996356103, -0.9164735117098016, 1.9170355181110392], 0.1646828371589604),
        ([0.3710384063572492, -0.9151362126581394, 1.9182447641601044], 0.131506017960538),
        ([0.34666399017109056, -0.9186662216808368, 1.9079636161102165], 0.12224345173001068),
    ],
    "adamw": [
        ([0.4475000049999995, -0.9450000024999998, 1.9400000016666665], 0.19875000099999998),
        ([0.4010436819625585, -0.9067720921502792, 1.9449780615407306], 0.1844393993489232),
        ([0.39020304846001347, -0.9243606027450508, 1.9356160789420784], 0.1664957454565825),
        ([0.3782112089461564, -0.9330969741305704, 1.947950722260367], 0.13351867123862834),
        ([0.35848625280987095, -0.9473473873297559, 1.9506788910296036], 0.12497058313945666),
    ],
    "adamw-warmup-cosine": [
        ([0.489500099999, -0.98900004999975, 1.9880000333332222], 0.23975001999995998),
        ([0.46065255130303406, -0.9671294463762788, 1.992533480189699], 0.23269667454770687),
        ([0.4525112821428789, -0.9886758823553379, 1.983031736107785], 0.21629796912380334),
        ([0.44474687480504194, -0.99620800996357, 1.9951734240257852], 0.18832766865333872),
        ([0.43824141890976126, -1.0013897338988809, 1.9960653343495944], 0.18640266047581555),
    ],
}


@pytest.mark.parametrize("case", sorted(LITERAL_CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_updates_match_pytorchs_numbers_step_by_step(case, backend):
    name, options = backend
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [3], "float64", init=np.array(W0))
        b = sg.parameter("b", [], "float64", init=B0)
        gw, gb = sg.data("gw", [3], "float64"), sg.data("gb", [], "float64")
        LITERAL_CASES[case]().apply_gradients([(w, gw), (b, gb)])
    step = sg.compile(prog, [], backend=name, **options)
    for number, ((grad_w, grad_b), (want_w, want_b)) in enumerate(
            zip(GRADS, LITERAL_EXPECTED[case]), 1):
        step(gw=np.array(grad_w), gb=grad_b)
        np.testing.assert_allclose(step.state["w"], want_w, rtol=1e-12, atol=1e-15,
                                   err_msg=f"w after step {number}")
        np.testing.assert_allclose(step.state["b"], want_b, rtol=1e-12, atol=1e-15,
                                   err_msg=f"b after step {number}")


def test_slots_of_the_new_options():
    prog, _, _ = mlp(optimizer=sg.optimizer.SGD(0.1, 0.9, nesterov=True, weight_decay=0.1))
    assert [p.name for p in prog.parameters[3:]] == ["w1@momentum", "b1@momentum",
                                                     "w2@momentum"]
    prog, _, _ = mlp(optimizer=sg.optimizer.SGD(0.1, 0.9, dampening=0.5))
    assert prog.parameters[3].name == "w1@sgd_t"          # the first step is not damped
    prog, _, _ = mlp(optimizer=sg.optimizer.AdamW(sg.optimizer.LinearLR(0.1)))
    assert [p.name for p in prog.parameters[3:6]] == ["w1@adam_t", "w1@adam_m", "w1@adam_v"]


def test_float32_training_with_adamw_a_schedule_and_clipping_follows_float64():
    def make():
        schedule = sg.optimizer.SequentialLR([sg.optimizer.LinearLR(0.05, 0.1, 1.0, 2),
                                              sg.optimizer.StepLR(0.05, 2, 0.5)], [2])
        return sg.optimizer.AdamW(schedule, weight_decay=0.1, max_grad_norm=0.5)

    states = []
    for dtype in ("float32", "float64"):
        prog, loss, _ = mlp(dtype, make())
        fn = sg.compile(prog, [loss])
        for step in range(len(X)):
            fn(x=X[step].astype(dtype), y=Y[step])
        states.append(fn.state)
    for name in ("w1", "b1", "w2"):
        assert states[0][name].dtype == np.float32
        np.testing.assert_allclose(states[0][name], states[1][name], rtol=1e-4, atol=1e-5)


def _gradient_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        grads = [sg.data("a", [2, 3], "float32"), sg.data("b", [4], "float64"),
                 sg.data("c", [], "bfloat16")]
    return prog, grads


@pytest.mark.parametrize("factor", [0.1, 10.0], ids=["clipped", "within"])
def test_clip_by_global_norm_matches_numpy(factor):
    prog, grads = _gradient_program()
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((2, 3)).astype("float32"), "b": rng.standard_normal(4),
             "c": np.array(1.5, dtype=grads[2].dtype)}
    norm = np.sqrt(sum(np.sum(np.asarray(v, dtype=np.float64) ** 2) for v in feeds.values()))
    max_norm = float(norm) * factor
    with sg.program_guard(prog):
        clipped = sg.optimizer.clip_by_global_norm([grads[0], None, *grads[1:]], max_norm)
        measured = sg.optimizer.global_norm(grads)
    assert clipped[1] is None
    assert [g.dtype for g in clipped[:1] + clipped[2:]] == [g.dtype for g in grads]
    got_norm, a, b, c = sg.compile(prog, [measured, clipped[0], *clipped[2:]])(**feeds)
    np.testing.assert_allclose(got_norm, norm, rtol=1e-12)
    scale = min(1.0, factor)    # max_norm / max(norm, max_norm)
    np.testing.assert_allclose(a, feeds["a"] * np.float32(scale), rtol=1e-6)
    np.testing.assert_allclose(b, feeds["b"] * scale, rtol=1e-14)
    np.testing.assert_allclose(np.float64(c), 1.5 * scale, rtol=1e-2)
    if factor > 1:              # within the bound: unchanged, bit for bit
        np.testing.assert_array_equal(a, feeds["a"])
        np.testing.assert_array_equal(b, feeds["b"])


def test_clipping_inside_the_optimizer_clips_the_gradients_of_the_call_together():
    def step_program(clip):
        prog = sg.Program()
        with sg.program_guard(prog):
            w = sg.parameter("w", [2], "float64", init=np.zeros(2))
            b = sg.parameter("b", [], "float64", init=0.0)
            gw, gb = sg.data("gw", [2], "float64"), sg.data("gb", [], "float64")
            grads = [gw, gb]
            if clip == "by hand":
                grads = sg.optimizer.clip_by_global_norm(grads, 1.0)
            optimizer = sg.optimizer.SGD(1.0, max_grad_norm=1.0 if clip == "built in" else None)
            optimizer.apply_gradients([(w, grads[0]), (b, grads[1])])
        return sg.compile(prog, [])

    built_in, by_hand = step_program("built in"), step_program("by hand")
    for fn in (built_in, by_hand):
        fn(gw=np.array([3.0, 0.0]), gb=4.0)      # norm 5: scaled by 1/5
        np.testing.assert_allclose(fn.state["w"], [-0.6, 0.0], rtol=1e-15)
        np.testing.assert_allclose(fn.state["b"], -0.8, rtol=1e-15)


def test_bad_gradients_to_clip():
    prog, grads = _gradient_program()
    other, other_grads = _gradient_program()
    with sg.program_guard(prog):
        ids = sg.data("ids", [3], "int64")
    clip = sg.optimizer.clip_by_global_norm
    with pytest.raises(ValueError, match="max_norm must be a positive number, got 0"):
        clip(grads, 0)
    with pytest.raises(TypeError, match="grads must be a list or tuple"):
        clip(grads[0], 1.0)
    with pytest.raises(TypeError, match=r"each gradient must be a float Value or None, "
                                        r"got int64\[3\]"):
        clip([grads[0], ids], 1.0)
    with pytest.raises(ValueError, match="holds no gradient"):
        clip([None], 1.0)
    with pytest.raises(ValueError, match="different programs"):
        sg.optimizer.global_norm([grads[0], other_grads[0]])


def test_a_non_finite_norm_clips_as_pytorchs_default_does():
    prog = sg.Program()
    with sg.program_guard(prog):
        g = sg.data("g", [3], "float64")
        clipped, = sg.optimizer.clip_by_global_norm([g], 1.0)
    fn = sg.compile(prog, [clipped])
    with np.errstate(invalid="ignore"):
        nan, = fn(g=np.array([1.0, np.nan, 2.0]))
        inf, = fn(g=np.array([1.0, np.inf, 2.0]))
    assert np.isnan(nan).all()
    np.testing.assert_array_equal(inf, [0.0, np.nan, 0.0])
