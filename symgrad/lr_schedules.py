"""Learning-rate schedules that the program computes from a step count.

A schedule is a rule, not a Value: ``schedule(step)`` builds, in the program of ``step`` (an
integer scalar Value, the number of updates done before the current one: 0 at the first),
the float64 scalar Value of the learning rate for that step. An optimizer given a schedule
as its ``learning_rate`` calls it with its own step counter, a slot it keeps in the program's
state, so a compiled training step follows the schedule as it is called, with no
recompilation and nothing fed.

The formulas are the closed forms of PyTorch's schedulers (``torch.optim.lr_scheduler``),
with ``t`` the step count and ``lr`` the base learning rate given to the schedule:

- :class:`StepLR`: ``lr * gamma ** (t // step_size)``;
- :class:`CosineAnnealingLR`: ``eta_min + (lr - eta_min) * (1 + cos(pi * t / T_max)) / 2``
  (periodic: after ``T_max`` the rate rises again, as PyTorch's does);
- :class:`LinearLR`: ``lr * (start_factor + (end_factor - start_factor) * min(t,
  total_iters) / total_iters)``, a linear warm-up when ``start_factor < end_factor``;
- :class:`SequentialLR`: one schedule after another, each from its own step 0 at its
  milestone.
"""
from __future__ import annotations

import math
import numbers

from . import dtypes
from .ir.program import program_guard
from .ir.value import Value
from .ops import elementwise as ew

__all__ = ["CosineAnnealingLR", "LRSchedule", "LinearLR", "SequentialLR", "StepLR"]


def _real(owner, name, value, low, high=math.inf, low_open=False):
    """``value`` as a float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            (low < value if low_open else low <= value) and value <= high):
        bound = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{owner}: {name} must be a number in {bound}, got {value!r}")
    return float(value)


def _count(owner, name, value):
    """``value`` as a positive int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


class LRSchedule:
    """Base class: ``schedule(step)`` is the learning rate at ``step`` (see the module
    docstring); subclasses define :meth:`_rate`."""

    def __call__(self, step) -> Value:
        """The float64 scalar Value of the learning rate at ``step``, an integer scalar Value
        (the number of updates before the current one), built in ``step``'s program."""
        if not isinstance(step, Value) or step.ndim != 0 or dtypes.kind(step.dtype) not in "iu":
            shown = step.type_str if isinstance(step, Value) else type(step).__name__
            raise TypeError(f"{type(self).__name__}: the step must be an integer scalar Value, "
                            f"got {shown}")
        with program_guard(step.program):
            return self._rate(step)

    def _rate(self, step) -> Value:
        """The rate at ``step`` (an integer scalar Value), a float64 scalar Value."""
        raise NotImplementedError

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _steps(step):
    """The step count as a float64 Value."""
    return ew.cast(step, "float64")


class StepLR(LRSchedule):
    """``learning_rate * gamma ** (t // step_size)``: the rate decays by ``gamma`` every
    ``step_size`` steps (PyTorch's ``StepLR``)."""

    def __init__(self, learning_rate, step_size, gamma=0.1):
        self.learning_rate = _real("StepLR", "learning_rate", learning_rate, 0.0)
        self.step_size = _count("StepLR", "step_size", step_size)
        self.gamma = _real("StepLR", "gamma", gamma, 0.0)

    def _rate(self, step):
        decays = ew.floor(_steps(step) / float(self.step_size))
        return self.gamma ** decays * self.learning_rate


class CosineAnnealingLR(LRSchedule):
    """``eta_min + (learning_rate - eta_min) * (1 + cos(pi * t / T_max)) / 2``: from
    ``learning_rate`` at step 0 down to ``eta_min`` at step ``T_max`` along half a cosine
    (PyTorch's ``CosineAnnealingLR``, whose closed form this is: after ``T_max`` the rate
    rises again along the cosine). To hold ``eta_min`` from ``T_max`` on, follow it with
    ``LinearLR(eta_min, 1.0, 1.0, 1)`` in a :class:`SequentialLR`."""

    def __init__(self, learning_rate, T_max, eta_min=0.0):  # noqa: N803  (PyTorch's name)
        self.learning_rate = _real("CosineAnnealingLR", "learning_rate", learning_rate, 0.0)
        self.T_max = _count("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _real("CosineAnnealingLR", "eta_min", eta_min, 0.0)

    def _rate(self, step):
        cosine = ew.cos(_steps(step) * math.pi / float(self.T_max))
        return self.eta_min + (self.learning_rate - self.eta_min) * (cosine + 1.0) / 2.0


class LinearLR(LRSchedule):
    """``learning_rate`` times a factor that goes linearly from ``start_factor`` at step 0 to
    ``end_factor`` at step ``total_iters`` and stays there (PyTorch's ``LinearLR``): with
    ``start_factor < end_factor = 1`` a linear warm-up to ``learning_rate``."""

    def __init__(self, learning_rate, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        self.learning_rate = _real("LinearLR", "learning_rate", learning_rate, 0.0)
        self.start_factor = _real("LinearLR", "start_factor", start_factor, 0.0, 1.0,
                                  low_open=True)
        self.end_factor = _real("LinearLR", "end_factor", end_factor, 0.0, 1.0)
        self.total_iters = _count("LinearLR", "total_iters", total_iters)

    def _rate(self, step):
        done = ew.minimum(_steps(step), float(self.total_iters)) / float(self.total_iters)
        factor = self.start_factor + (self.end_factor - self.start_factor) * done
        return factor * self.learning_rate


class SequentialLR(LRSchedule):
    """``schedules[0]`` until ``milestones[0]``, then ``schedules[1]`` from its own step 0, and
    so on (PyTorch's ``SequentialLR``): at step ``t >= milestones[i - 1]`` the rate is
    ``schedules[i]`` at ``t - milestones[i - 1]``. ``milestones``: increasing positive ints,
    one fewer than ``schedules``. A linear warm-up into a cosine decay::

        SequentialLR([LinearLR(0.1, 0.01, 1.0, 100), CosineAnnealingLR(0.1, 900)], [100])
    """

    def __init__(self, schedules, milestones):
        if not isinstance(schedules, (list, tuple)) or not schedules or not all(
                isinstance(s, LRSchedule) for s in schedules):
            raise TypeError(f"SequentialLR: schedules must be a non-empty list of schedules, "
                            f"got {schedules!r}")
        if not isinstance(milestones, (list, tuple)) or len(milestones) != len(schedules) - 1:
            raise ValueError(f"SequentialLR: milestones must be a list of "
                             f"{len(schedules) - 1} step(s), one per schedule after the first, "
                             f"got {milestones!r}")
        milestones = [_count("SequentialLR", "each milestone", m) for m in milestones]
        if any(a >= b for a, b in zip(milestones, milestones[1:])):
            raise ValueError(f"SequentialLR: milestones must increase, got {milestones}")
        self.schedules = list(schedules)
        self.milestones = milestones

    def _rate(self, step):
        rate = self.schedules[0](step)
        for milestone, schedule in zip(self.milestones, self.schedules[1:]):
            since = ew.maximum(step - milestone, 0)     # never a negative step, even unused
            rate = ew.where(step >= milestone, schedule(since), rate)
        return rate
