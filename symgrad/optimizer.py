"""Optimizers that live in the program: ``SGD`` (with momentum) and ``Adam``.

``opt.minimize(loss)`` appends the backward of ``loss`` (as ``ir_backward.append_backward``)
and, for each parameter that gets a gradient, the ops of its update, which ``sg.assign``
makes the parameter's next value. The optimizer's own state -- momentum buffers, Adam's
moments and step count -- are parameters too (``stop_gradient=True``, starting at zero, named
after their parameter: ``"w1@adam_m"``), so a compiled program keeps them in ``fn.state``
and saves them in artifacts. The update formulas are PyTorch's (``torch.optim.SGD`` with
``dampening=0``, ``nesterov=False``, no weight decay; ``torch.optim.Adam`` without
``amsgrad``), which are Paddle's as well::

    SGD:   buf = momentum * buf + g   (buf = g at the first step);  p = p - lr * buf
    Adam:  t = t + 1;  m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
           p = p - lr / (1 - beta1**t) * (m / (sqrt(v) / sqrt(1 - beta2**t) + epsilon))

(``momentum=0``: ``p = p - lr * g``, no buffer.) The bias corrections are computed once per
step in float64, shared by all the parameters; each parameter's elementwise update is
computed from its gradient in one fused loop.

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
from .ops import elementwise as ew
from .ops.source import as_value, parameter
from .ops.state import assign, assign_p, assignments, is_parameter

__all__ = ["Adam", "Optimizer", "SGD"]


def _number(name, value, low=0.0, high=math.inf, high_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            low <= value < high if high_open else low <= value <= high):
        bound = f"[{low}, {high})" if high_open else f"[{low}, {high}]"
        raise ValueError(f"{name} must be a number in {bound}, got {value!r}")
    return float(value)


def _learning_rate(value):
    """A learning rate: a non-negative number, or a float scalar Value (a schedule the
    program reads: a ``data`` input fed each step, or a parameter)."""
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


class Optimizer:
    """Base class: :meth:`minimize` appends the backward and one update per parameter
    (:meth:`_update`, which subclasses define)."""

    def __init__(self, learning_rate):
        self.learning_rate = _learning_rate(learning_rate)

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
        ``Optimizer.apply_gradients``. Returns ``params_grads`` as a list. A failed call leaves
        the program unchanged."""
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
            self._begin(program, pairs)
            for param, grad in pairs:
                assign(self._update(param, grad, _value_of(latest.get(param, param))), param)
        return list(params_grads)

    # --- what subclasses define -----------------------------------------------------------
    def _begin(self, program, updated) -> None:
        """Build what the updates of one ``minimize`` share (before any update)."""

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

    def _rate(self, param) -> Value | float:
        """The learning rate in ``param``'s dtype."""
        rate = self.learning_rate
        if isinstance(rate, Value) and rate.dtype != param.dtype:
            return ew.cast(rate, param.dtype)
        return rate

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class SGD(Optimizer):
    """Stochastic gradient descent with momentum (PyTorch's ``torch.optim.SGD`` with
    ``dampening=0``, ``nesterov=False``; Paddle's ``Momentum``): ``buf = momentum * buf + g``
    (a parameter ``"<param>@momentum"``, so ``buf = g`` at the first step) and
    ``p = p - learning_rate * buf``; with ``momentum=0`` (default), ``p = p - learning_rate
    * g``."""

    def __init__(self, learning_rate, momentum=0.0):
        super().__init__(learning_rate)
        self.momentum = _number("momentum", momentum)

    def _update(self, param, grad, base):
        step = grad
        if self.momentum:
            buffer = self._slot(param, "momentum")
            step = buffer * self.momentum + grad
            assign(step, buffer)
        return base - self._rate(param) * step


class Adam(Optimizer):
    """Adam (PyTorch's ``torch.optim.Adam``, Paddle's ``Adam``; see the module docstring for
    the update). Slots: ``"<param>@adam_m"`` and ``"<param>@adam_v"`` (the moments, shaped
    like the parameter) and one int64 step count per ``minimize``, ``"<first param>@adam_t"``
    (the bias corrections use it)."""

    def __init__(self, learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(learning_rate)
        self.beta1 = _number("beta1", beta1, 0.0, 1.0, high_open=True)
        self.beta2 = _number("beta2", beta2, 0.0, 1.0, high_open=True)
        self.epsilon = _number("epsilon", epsilon)

    def _begin(self, program, updated):
        count = self._slot(updated[0][0], "adam_t", (), "int64")
        step = count + 1
        assign(step, count)
        step = ew.cast(step, "float64")
        # in float64, then in each parameter's dtype (cached per dtype)
        correction1 = 1.0 - ew.power(as_value(self.beta1, "float64", program), step)
        correction2 = 1.0 - ew.power(as_value(self.beta2, "float64", program), step)
        rate = self.learning_rate
        if isinstance(rate, Value):
            rate = ew.cast(rate, "float64")
        self._scalars = {"step_size": rate / correction1,
                         "root_correction2": ew.sqrt(correction2)}
        self._typed: dict = {}

    def _typed_scalars(self, dtype):
        scalars = self._typed.get(dtype)
        if scalars is None:
            scalars = self._typed[dtype] = {
                name: value if value.dtype == dtype else ew.cast(value, dtype)
                for name, value in self._scalars.items()}
        return scalars

    def _update(self, param, grad, base):
        m_slot, v_slot = self._slot(param, "adam_m"), self._slot(param, "adam_v")
        m = m_slot + (grad - m_slot) * (1.0 - self.beta1)
        v = v_slot * self.beta2 + grad * grad * (1.0 - self.beta2)
        assign(m, m_slot)   # the updates read the values, not the assigns: they fuse
        assign(v, v_slot)
        scalars = self._typed_scalars(param.dtype)
        denominator = ew.sqrt(v) / scalars["root_correction2"] + self.epsilon
        return base - scalars["step_size"] * (m / denominator)
