"""Checking and normalising the arguments of ``grad`` (before anything is built)."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import DTypeError, GradError, ProgramMismatchError
from ..ir.printer import value_label
from ..ir.dims import unify
from ..ir.value import Value, format_shape
from .backward import shapes_match


def describe(value) -> str:
    """``%w : float32[3, 4]``."""
    return f"{value_label(value)} : {value.type_str}"


def value_list(arg, what) -> list:
    """``arg`` (a Value or a list/tuple of Values) as a list; anything else is a TypeError."""
    if isinstance(arg, Value):
        return [arg]
    if not isinstance(arg, (list, tuple)):
        raise TypeError(f"grad: {what} must be a Value or a list/tuple of Values, "
                        f"got {type(arg).__name__}")
    for index, item in enumerate(arg):
        if not isinstance(item, Value):
            raise TypeError(f"grad: {what}[{index}] must be a Value, got {type(item).__name__}")
    return list(arg)


def common_program(outputs, inputs):
    """The one program every output and input belongs to."""
    program = outputs[0].program
    for what, values in (("outputs", outputs), ("inputs", inputs)):
        for index, value in enumerate(values):
            if value.program is not program:
                raise ProgramMismatchError(
                    f"grad: {what}[{index}] ({describe(value)}) belongs to program "
                    f"#{value.program.uid}, but outputs[0] belongs to program #{program.uid}")
    return program


def _same_program(value, program, what):
    if value.program is not program:
        raise ProgramMismatchError(f"grad: {what} ({describe(value)}) belongs to another program")


def no_grad_set(arg, program) -> set:
    """``no_grad_vars``: None, a Value, or a list/tuple/set of Values (strings are rejected)."""
    if arg is None:
        return set()
    if isinstance(arg, Value):
        items = [arg]
    elif isinstance(arg, (list, tuple, set, frozenset)):
        items = list(arg)
    else:
        raise TypeError(f"grad: no_grad_vars must be a Value or a list/tuple/set of Values, "
                        f"got {type(arg).__name__}")
    for item in items:
        if not isinstance(item, Value):
            raise TypeError(f"grad: no_grad_vars must hold Values, got {type(item).__name__} "
                            f"{item!r}")
        _same_program(item, program, "a Value in no_grad_vars")
    return set(items)


def is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _per_value(arg, values, what, program):
    """A list as long as ``values`` (None entries allowed) of Python numbers or Values that
    match the type of the corresponding Value."""
    if arg is None:
        return [None] * len(values)
    if not isinstance(arg, (list, tuple)):
        raise TypeError(f"grad: {what} must be None or a list/tuple, got {type(arg).__name__}")
    if len(arg) != len(values):
        raise GradError(f"grad: {what} has {len(arg)} entries for {len(values)} "
                        f"{'outputs' if what == 'grad_outputs' else 'inputs'}")
    out = []
    for index, (item, value) in enumerate(zip(arg, values)):
        if item is None or is_number(item):
            out.append(item)
            continue
        if not isinstance(item, Value):
            raise TypeError(f"grad: {what}[{index}] must be None, a number or a Value, "
                            f"got {type(item).__name__}")
        _same_program(item, program, f"{what}[{index}]")
        if not shapes_match(item.shape, value.shape):
            raise GradError(f"grad: {what}[{index}] has shape {format_shape(item.shape)}, "
                            f"which does not match the shape {format_shape(value.shape)} of "
                            f"{describe(value)}")
        for axis, (dim, expected) in enumerate(zip(item.dims, value.dims)):
            unify(dim, expected, f"grad: {what}[{index}] {item.type_str} for "
                                 f"{describe(value)}, axis {axis}")
        if item.dtype != value.dtype:
            raise DTypeError(f"grad: {what}[{index}] has dtype {item.dtype}, but "
                             f"{describe(value)} has dtype {value.dtype}")
        out.append(item)
    return out


def seeds(grad_outputs, outputs, program) -> list:
    """``grad_outputs`` as one entry per output: None (ones), a number or a Value."""
    return _per_value(grad_outputs, outputs, "grad_outputs", program)


def offsets(grad_inputs, inputs, program) -> list:
    """``grad_inputs`` as one entry per input; numbers are rejected (offsets are Values)."""
    out = _per_value(grad_inputs, inputs, "grad_inputs", program)
    for index, item in enumerate(out):
        if item is not None and not isinstance(item, Value):
            raise TypeError(f"grad: grad_inputs[{index}] must be None or a Value, "
                            f"got {type(item).__name__}")
    return out


def loss_scale(arg):
    if arg is None:
        return 1
    if not is_number(arg):
        raise TypeError(f"grad: loss_scale must be a number, got {type(arg).__name__}")
    return arg


UNUSED_MODES = ("none", "zeros")


def unused_mode(arg):
    if not isinstance(arg, str) or arg not in UNUSED_MODES:
        raise ValueError(f"grad: unused must be one of {UNUSED_MODES}, got {arg!r}")
    return arg
