"""``sg.optimizer``'s learning-rate schedules against PyTorch's schedulers, step by step, and
their argument checks."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.optimizer import CosineAnnealingLR, LinearLR, SequentialLR, StepLR

# The rates at steps 0..9, computed once in float64 from the closed forms PyTorch documents
# (they agree with torch 2.13's schedulers, stepped once per optimizer step, to 1e-15).
SCHEDULES = {
    "step": (lambda: StepLR(0.1, step_size=3, gamma=0.5),
             [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125]),
    "cosine": (lambda: CosineAnnealingLR(0.1, T_max=4, eta_min=0.001),
               [0.1, 0.0855017856687341, 0.0505, 0.0154982143312659, 0.001,
                0.01549821433126589, 0.05049999999999999, 0.0855017856687341, 0.1,
                0.08550178566873412]),
    "linear-warm-up": (lambda: LinearLR(0.1, start_factor=0.25, end_factor=1.0, total_iters=4),
                       [0.025, 0.043750000000000004, 0.0625, 0.08125, 0.1, 0.1, 0.1, 0.1, 0.1,
                        0.1]),
    "warm-up-then-cosine": (lambda: SequentialLR([LinearLR(0.1, 0.1, 1.0, 3),
                                                  CosineAnnealingLR(0.1, 5)], milestones=[3]),
                            [0.010000000000000002, 0.04000000000000001, 0.06999999999999999, 0.1,
                             0.09045084971874738, 0.06545084971874737, 0.03454915028125263,
                             0.009549150281252633, 0.0, 0.009549150281252623]),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_rates_match_pytorchs_schedulers(name):
    make, expected = SCHEDULES[name]
    prog = sg.Program()
    with sg.program_guard(prog):
        step = sg.data("step", [], "int64")
        rate = make()(step)
    assert rate.dtype == np.float64 and rate.shape == ()
    fn = sg.compile(prog, [rate])
    got = [float(fn(step=t)[0]) for t in range(len(expected))]
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-17)


def test_an_optimizer_reads_its_schedule_from_its_own_step_counter():
    prog = sg.Program()
    with sg.program_guard(prog):
        w = sg.parameter("w", [2], "float64", init=np.zeros(2))
        g = sg.data("g", [2], "float64")
        sg.optimizer.SGD(StepLR(1.0, step_size=2, gamma=0.1)).apply_gradients([(w, g)])
    assert [p.name for p in prog.parameters] == ["w", "w@sgd_t"]
    step = sg.compile(prog, [])
    for _ in range(5):                      # rates 1, 1, 0.1, 0.1, 0.01
        step(g=np.array([1.0, -2.0]))
    np.testing.assert_allclose(step.state["w"], -2.21 * np.array([1.0, -2.0]), rtol=1e-14)
    assert step.state["w@sgd_t"] == 5


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: StepLR(0.1, step_size=0), ValueError, "StepLR: step_size must be a positive int"),
    (lambda: StepLR(0.1, 2, gamma=-1), ValueError, r"StepLR: gamma must be a number in \[0.0"),
    (lambda: StepLR(-0.1, 2), ValueError, "StepLR: learning_rate"),
    (lambda: CosineAnnealingLR(0.1, T_max=2.5), ValueError, "T_max must be a positive int"),
    (lambda: LinearLR(0.1, start_factor=0.0), ValueError, r"start_factor .*\(0.0, 1.0\]"),
    (lambda: LinearLR(0.1, end_factor=1.5), ValueError, r"end_factor .*\[0.0, 1.0\]"),
    (lambda: SequentialLR([StepLR(0.1, 2)], milestones=[3]), ValueError,
     "milestones must be a list of 0 step"),
    (lambda: SequentialLR([StepLR(0.1, 2), StepLR(0.1, 2), StepLR(0.1, 2)], [4, 4]),
     ValueError, "milestones must increase"),
    (lambda: SequentialLR([0.1, StepLR(0.1, 2)], [4]), TypeError, "list of schedules"),
])
def test_bad_schedule_arguments(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_the_step_must_be_an_integer_scalar_value():
    prog = sg.Program()
    with sg.program_guard(prog):
        t = sg.data("t", [], "float64")
    with pytest.raises(TypeError, match=r"StepLR: the step must be an integer scalar Value, "
                                        r"got float64\[\]"):
        StepLR(0.1, 2)(t)
    with pytest.raises(TypeError, match="got int"):
        StepLR(0.1, 2)(3)
