"""Optimizers that live in the program: ``SGD``, ``Adam`` and ``AdamW``; learning-rate
schedules (:mod:`symgrad.lr_schedules`, re-exported here); gradient clipping by global norm.

``opt.minimize(loss)`` appends the backward of ``loss`` (as ``ir_backward.append_backward``)
and, for each parameter that gets a gradient, the ops of its update, which ``sg.assign``
makes the parameter's next value. The optimizer's own state -- momentum buffers, Adam's
moments and step count -- are parameters too (``stop_gradient=True``, starting at zero, named
after their parameter: ``"w1@adam_m"``), so a compiled program keeps them in ``fn.state``
and saves them in artifacts. The update formulas are PyTorch's (``torch.optim.SGD``,
``torch.optim.Adam`` and ``torch.optim.AdamW`` without ``amsgrad``), which are Paddle's as
well; ``g`` is the gradient, after clipping (``max_grad_norm``)::

    SGD:   g = g + weight_decay * p
           buf = momentum * buf + (1 - dampening) * g   (buf = g at the first step)
           g = g + momentum * buf if nesterov else buf;  p = p - lr * g
    Adam:  g = g + weight_decay * p   (AdamW instead: p = p * (1 - lr * weight_decay))
           t = t + 1;  m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
           p = p - lr / (1 - beta1**t) * (m / (sqrt(v) / sqrt(1 - beta2**t) + epsilon))

(``momentum=0``: ``p = p - lr * g``, no buffer.) The scalars of a step (the learning rate,
the bias corrections) are computed once per step in float64, shared by all the parameters;
each parameter's elementwise update is computed from its gradient in one fused loop.

``learning_rate`` is a number, a float scalar Value (a ``data`` input fed each step, or a
parameter), or a schedule (:class:`StepLR`, :class:`CosineAnnealingLR`, :class:`LinearLR`,
:class:`SequentialLR`), which the program computes from the optimizer's step counter: the
number of updates before the current one, a slot (Adam's ``"<first param>@adam_t"``,
SGD's ``"<first param>@sgd_t"``, made where a schedule or ``dampening`` needs it).

``opt.apply_gradients([(param, grad)])`` appends the updates alone, for gradients computed
elsewhere (a ``data`` input fed with the mean gradient of a data-parallel run, say).

Several ``minimize`` calls on one program (two optimizers, or one optimizer twice) are
allowed: gradients are always those at the parameters' values when the call starts, and an
update applies to the latest value the program assigns to its parameter so far, so two
updates of one parameter compose (``p = update2(update1(p))``); each call makes slots of its
own.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import dtypes
from .autodiff.ir_backward import append_backward
from .ir.program import program_guard
from .ir.value import Value
from .lr_schedules import CosineAnnealingLR, LinearLR, LRSchedule, SequentialLR, StepLR
from .ops import elementwise as ew
from .ops.reduction import sum as reduce_sum
from .ops.source import parameter
from .ops.state import assign, assign_p, assignments, is_parameter

__all__ = ["Adam", "AdamW", "CosineAnnealingLR", "LRSchedule", "LinearLR", "Optimizer", "SGD",
           "SequentialLR", "StepLR", "clip_by_global_norm", "global_norm"]


def _number(name, value, low=0.0, high=math.inf, high_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            low <= value < high if high_open else low <= value <= high):
        bound = f"[{low}, {high})" if high_open else f"[{low}, {high}]"
        raise ValueError(f"{name} must be a number in {bound}, got {value!r}")
    return float(value)


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _learning_rate(value):
    """A learning rate: a non-negative number, a float scalar Value (a ``data`` input fed each
    step, or a parameter), or an :class:`LRSchedule`."""
    if isinstance(value, LRSchedule):
        return value
    if isinstance(value, Value):
        if value.ndim != 0 or not dtypes.is_float(value.dtype):
            raise ValueError(f"learning_rate must be a float scalar Value, got {value.type_str}")
        return value
    return _number("learning_rate", value)


def _value_of(value):
    """The value an ``assign`` result stands for (reading it instead lets the ops that use it
    fuse with the ops computing it)."""
    op = value.op
    return op.inputs[0] if op is not None and op.opdef is assign_p else value


# --- gradient clipping ----------------------------------------------------------------------
def _gradients(grads, what):
    """The Values of ``grads`` (a list or tuple of float Values and Nones), all of one
    program, and that program."""
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"{what}: grads must be a list or tuple of gradient Values (None "
                        f"entries allowed), got {type(grads).__name__}")
    values = [g for g in grads if g is not None]
    for g in values:
        if not isinstance(g, Value) or not dtypes.is_float(g.dtype):
            shown = g.type_str if isinstance(g, Value) else type(g).__name__
            raise TypeError(f"{what}: each gradient must be a float Value or None, got {shown}")
    if not values:
        raise ValueError(f"{what}: grads holds no gradient (only None)")
    program = values[0].program
    if any(g.program is not program for g in values):
        raise ValueError(f"{what}: the gradients belong to different programs")
    return values, program


def global_norm(grads) -> Value:
    """The global norm of ``grads`` (a list or tuple of Values; None entries are skipped):
    ``sqrt(sum over the gradients of sum(g * g))``, the 2-norm of all their elements taken
    as one vector, a float64 scalar Value (each square is summed in float64, so float16 or
    bfloat16 gradients do not overflow)."""
    return _global_norm(*_gradients(grads, "global_norm"))


def _global_norm(values, program) -> Value:
    with program_guard(program):
        squares = [reduce_sum(ew.square(g if g.dtype == np.float64 else ew.cast(g, "float64")))
                   for g in values]
        total = squares[0]
        for square in squares[1:]:
            total = total + square
        return ew.sqrt(total)


def clip_by_global_norm(grads, max_norm) -> list:
    """``grads`` scaled together so that their global norm (:func:`global_norm`) is at most
    ``max_norm`` (a positive number): each ``g`` becomes ``g * max_norm / max(norm,
    max_norm)``, so gradients whose norm is within ``max_norm`` pass unchanged and the
    direction of the whole gradient is kept. Returns a list, one entry per entry of
    ``grads`` (None stays None). The scale is computed in float64 and cast to each
    gradient's dtype. This is TensorFlow's ``clip_by_global_norm`` and Paddle's
    ``ClipGradByGlobalNorm``; ``torch.nn.utils.clip_grad_norm_`` divides by ``norm + 1e-6``
    instead, which scales by a relative ``1e-6 / norm`` less. A non-finite norm is not an
    error, as with PyTorch's default: a NaN norm makes every gradient NaN, an infinite one
    makes the finite gradients 0. Optimizers apply it to the gradients of each call with
    ``max_grad_norm=``."""
    max_norm = _positive("clip_by_global_norm: max_norm", max_norm)
    norm = _global_norm(*_gradients(grads, "clip_by_global_norm"))
    with program_guard(norm.program):
        scale = max_norm / ew.maximum(norm, max_norm)
        return [None if g is None else g * (scale if g.dtype == scale.dtype
                                             else ew.cast(scale, g.dtype)) for g in grads]


class Optimizer:
    """Base class: :meth:`minimize` appends the backward and one update per parameter
    (:meth:`_update`, which subclasses define). ``weight_decay`` (>= 0) and
    ``max_grad_norm`` (None, or the positive bound of :func:`clip_by_global_norm` applied
    to the gradients of each call) are common to every optimizer."""

    _counter = "t"   # the suffix of the step count slot (subclasses name theirs)

    def __init__(self, learning_rate, weight_decay=0.0, max_grad_norm=None):
        self.learning_rate = _learning_rate(learning_rate)
        self.weight_decay = _number("weight_decay", weight_decay)
        self.max_grad_norm = (None if max_grad_norm is None
                              else _positive("max_grad_norm", max_grad_norm))

    def minimize(self, loss, parameter_list=None, no_grad_set=None):
        """Append the backward of ``loss`` and the update of each parameter that gets a
        gradient; returns ``[(param, grad or None)]`` as ``append_backward`` does, for
        ``parameter_list`` (Values or names; default: every trainable parameter of the
        program, i.e. not ``stop_gradient``, which leaves out the slots of optimizers).
        ``no_grad_set``: Values or names through which no gradient flows. Build it in the
        program's global block. A failed call leaves the program unchanged."""
        if not isinstance(loss, Value):
            raise TypeError(f"minimize: loss must be a Value, got {type(loss).__name__}")
        if loss.ndim != 0 or not dtypes.is_float(loss.dtype):
            raise ValueError(f"minimize: loss must be a float scalar, got {loss.type_str}")
        program = loss.program
        if parameter_list is None:
            parameter_list = [p for p in program.parameters if not p.stop_gradient]
        with program.transaction(), program_guard(program):
            pairs = append_backward(loss, parameter_list, no_grad_set)
            self.apply_gradients(pairs)
        return pairs

    def apply_gradients(self, params_grads):
        """Append the update of each ``(param, grad)`` pair (pairs whose grad is None are
        skipped): ``grad`` is a Value of the parameter's type, a gradient the program computes
        or one computed elsewhere and fed (a ``data`` input), as Paddle's
        ``Optimizer.apply_gradients``. With ``max_grad_norm``, the gradients of the call are
        clipped together first. Returns ``params_grads`` as a list. A failed call leaves the
        program unchanged."""
        pairs = [(p, g) for p, g in params_grads if g is not None]
        if not pairs:
            return list(params_grads)
        program = pairs[0][0].program
        for param, grad in pairs:
            if not is_parameter(param) or not isinstance(grad, Value):
                raise TypeError(f"apply_gradients: expected (parameter, gradient Value) pairs, "
                                f"got ({type(param).__name__}, {type(grad).__name__})")
            if param.program is not program or grad.program is not program:
                raise ValueError("apply_gradients: the pairs belong to different programs")
            if grad.shape != param.shape or grad.dtype != param.dtype:
                raise ValueError(f"apply_gradients: the gradient {grad.type_str} of "
                                 f"{param.name!r} must have its type {param.type_str}")
        if isinstance(self.learning_rate, Value) and self.learning_rate.program is not program:
            raise ValueError("the learning rate Value belongs to another program")
        with program.transaction(), program_guard(program):
            latest = assignments(program)
            if self.max_grad_norm is not None:
                clipped = clip_by_global_norm([g for _, g in pairs], self.max_grad_norm)
                pairs = [(p, g) for (p, _), g in zip(pairs, clipped)]
            self._begin(pairs)
            for param, grad in pairs:
                assign(self._update(param, grad, _value_of(latest.get(param, param))), param)
        return list(params_grads)

    # --- the scalars one call's updates share -------------------------------------------
    def _begin(self, pairs) -> None:
        """Build what the updates of one call share, before any update: the step count (a
        slot named after the first parameter, where :meth:`_counts_steps`), the learning
        rate, and what :meth:`_share` adds."""
        self._shared, self._typed = {}, {}
        count = None
        if self._counts_steps():
            count = self._slot(pairs[0][0], self._counter, (), "int64")
            self._shared["number"] = count + 1      # this update's number, from 1
            assign(self._shared["number"], count)
        rate = self.learning_rate
        if isinstance(rate, LRSchedule):
            rate = rate(count)
        elif isinstance(rate, Value) and rate.dtype != np.float64:
            rate = ew.cast(rate, "float64")
        self._shared["rate"] = rate
        self._share(count)

    def _counts_steps(self) -> bool:
        """Whether the updates need the step count (a schedule reads it)."""
        return isinstance(self.learning_rate, LRSchedule)

    def _share(self, count) -> None:
        """Add the subclass's shared scalars (``count``: the step count slot's value, the
        number of updates before this one, or None)."""

    def _scalar(self, name, dtype):
        """The shared scalar ``name`` (a number, or a float64 Value) in ``dtype``: a Value
        is cast once per dtype."""
        value = self._shared[name]
        if not isinstance(value, Value) or value.dtype == dtype:
            return value
        typed = self._typed.get((name, dtype))
        if typed is None:
            typed = self._typed[name, dtype] = ew.cast(value, dtype)
        return typed

    # --- what subclasses define -----------------------------------------------------------
    def _update(self, param, grad, base) -> Value:
        """The new value of ``param`` from its gradient and ``base``, its latest value."""
        raise NotImplementedError

    # --- helpers --------------------------------------------------------------------------
    @staticmethod
    def _slot(param, suffix, shape=None, dtype=None) -> Value:
        """A zero-initialized, non-trainable parameter named ``"<param>@<suffix>"`` (a
        number is added when that name is taken)."""
        taken = {p.name for p in param.program.parameters}
        name = f"{param.name}@{suffix}"
        base, number = name, 1
        while name in taken:
            number += 1
            name = f"{base}_{number}"
        shape = param.shape if shape is None else shape
        dtype = param.dtype if dtype is None else dtype
        return parameter(name, list(shape), dtype, init=np.zeros(shape, dtype),
                         stop_gradient=True)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class SGD(Optimizer):
    """Stochastic gradient descent with momentum (PyTorch's ``torch.optim.SGD``; Paddle's
    ``Momentum``): ``g = g + weight_decay * p``; ``buf = momentum * buf + (1 - dampening) *
    g`` (a parameter ``"<param>@momentum"``; ``buf = g`` at the first step); ``g = g +
    momentum * buf`` with ``nesterov``, else ``g = buf``; ``p = p - learning_rate * g``. With
    ``momentum=0`` (default) there is no buffer: ``p = p - learning_rate * g``. Nesterov
    momentum needs ``momentum > 0`` and ``dampening = 0`` (as PyTorch). A schedule or a
    non-zero ``dampening`` makes a step count slot, ``"<first param>@sgd_t"``."""

    _counter = "sgd_t"

    def __init__(self, learning_rate, momentum=0.0, *, dampening=0.0, weight_decay=0.0,
                 nesterov=False, max_grad_norm=None):
        super().__init__(learning_rate, weight_decay, max_grad_norm)
        self.momentum = _number("momentum", momentum)
        self.dampening = _number("dampening", dampening, 0.0, 1.0)
        if not isinstance(nesterov, bool):
            raise TypeError(f"nesterov must be a bool, got {type(nesterov).__name__}")
        if nesterov and (not self.momentum or self.dampening):
            raise ValueError(f"SGD: Nesterov momentum needs momentum > 0 and dampening = 0, "
                             f"got momentum={self.momentum}, dampening={self.dampening}")
        self.nesterov = nesterov

    def _counts_steps(self):
        return super()._counts_steps() or bool(self.momentum and self.dampening)

    def _share(self, count):
        if self.momentum and self.dampening:   # the first step keeps all of g: buf = g
            self._shared["gain"] = ew.where(count > 0, 1.0 - self.dampening, 1.0)

    def _update(self, param, grad, base):
        step = grad
        if self.weight_decay:
            step = step + base * self.weight_decay
        if self.momentum:
            buffer = self._slot(param, "momentum")
            damped = step * self._scalar("gain", param.dtype) if self.dampening else step
            new_buffer = buffer * self.momentum + damped
            assign(new_buffer, buffer)
            step = step + new_buffer * self.momentum if self.nesterov else new_buffer
        return base - self._scalar("rate", param.dtype) * step


class Adam(Optimizer):
    """Adam (PyTorch's ``torch.optim.Adam``, Paddle's ``Adam``; see the module docstring for
    the update). ``weight_decay`` adds ``weight_decay * p`` to the gradient (L2
    regularization, PyTorch's Adam); :class:`AdamW` decays the parameter instead. Slots:
    ``"<param>@adam_m"`` and ``"<param>@adam_v"`` (the moments, shaped like the parameter)
    and one int64 step count per call, ``"<first param>@adam_t"`` (the bias corrections and
    a schedule read it)."""

    _counter = "adam_t"
    _decoupled = False   # AdamW: the weight decay scales the parameter, not the gradient

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, *,
                 weight_decay=0.0, max_grad_norm=None):
        super().__init__(learning_rate, weight_decay, max_grad_norm)
        self.beta1 = _number("beta1", beta1, 0.0, 1.0, high_open=True)
        self.beta2 = _number("beta2", beta2, 0.0, 1.0, high_open=True)
        self.epsilon = _number("epsilon", epsilon)

    def _counts_steps(self):
        return True      # the bias corrections read it

    def _share(self, count):
        number = ew.cast(self._shared["number"], "float64")
        correction1 = 1.0 - self.beta1 ** number
        correction2 = 1.0 - self.beta2 ** number
        rate = self._shared["rate"]
        self._shared["step_size"] = rate / correction1
        self._shared["root_correction2"] = ew.sqrt(correction2)
        if self._decoupled and self.weight_decay:
            self._shared["decay"] = 1.0 - rate * self.weight_decay

    def _update(self, param, grad, base):
        dtype = param.dtype
        if self.weight_decay and not self._decoupled:
            grad = grad + base * self.weight_decay
        m_slot, v_slot = self._slot(param, "adam_m"), self._slot(param, "adam_v")
        m = m_slot + (grad - m_slot) * (1.0 - self.beta1)
        v = v_slot * self.beta2 + grad * grad * (1.0 - self.beta2)
        assign(m, m_slot)   # the updates read the values, not the assigns: they fuse
        assign(v, v_slot)
        denominator = ew.sqrt(v) / self._scalar("root_correction2", dtype) + self.epsilon
        if self._decoupled and self.weight_decay:
            base = base * self._scalar("decay", dtype)
        return base - self._scalar("step_size", dtype) * (m / denominator)


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's ``torch.optim.AdamW``, Paddle's
    ``AdamW``): before the Adam step, ``p = p * (1 - learning_rate * weight_decay)``, with
    the step's learning rate (a schedule's too); the gradient is left as it is. Slots as
    :class:`Adam`'s."""

    _decoupled = True

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, *,
                 weight_decay=1e-2, max_grad_norm=None):
        super().__init__(learning_rate, beta1, beta2, epsilon, weight_decay=weight_decay,
                         max_grad_norm=max_grad_norm)
