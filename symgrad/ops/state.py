"""Program state: ``assign``, the op that gives a parameter its value for the next run.

``assign(value, target)`` takes a ``parameter`` of the same program (``target``) and a
``value`` of exactly its shape and dtype; its one result is the parameter's *next* value
(``value`` itself: the op is pure, the result reads as ``value`` wherever it is used). A
program's *assignments* (:func:`assignments`, also ``Program.assignments``) map each assigned
parameter to the result of its last ``assign``; :func:`symgrad.compile` fetches those results
too (the *state outputs*, after the user's fetches, in parameter order), so the update runs
whatever the user fetches, and after each successful run the compiled program's state holds
them.

``sg.compile`` records its choice in the copy it compiles: each ``assign`` op there carries
the attr ``commit`` (whether its result is the state output of its parameter), so an optimized
program (passes may reorder ops) or one read back from an artifact keeps exactly the state
outputs it was compiled with.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ScopeError, ShapeError
from ..ir.program import Program, current_block
from ..ir.value import Value, format_shape
from .core import OPAQUE, OpDef, bind, dtypes_shape, register
from .source import as_value, parameter_p

__all__ = ["assign"]

COMMIT = "commit"   # attr set by sg.compile on the assign ops of the program it compiles


def _assign_rule(types, attrs):
    (value_shape, value_dtype), (target_shape, target_dtype) = types
    value, target = dtypes_shape(types[0]), dtypes_shape(types[1])
    if tuple(value_shape) != tuple(target_shape):
        raise ShapeError(f"the value {value} must have the shape of the parameter {target}")
    if np.dtype(value_dtype) != np.dtype(target_dtype):
        raise DTypeError(f"the value {value} must have the dtype of the parameter {target} "
                         f"(cast it)")
    return tuple(target_shape), target_dtype


assign_p = register(OpDef(
    "assign", OPAQUE, infer=_assign_rule,
    impl=lambda value, target, commit=False: value,
    vjp=lambda op, g: [g[0], None],
    doc="The next value of the parameter ``target`` (input 1): ``value`` (input 0), which "
        "the compiled program's state takes after each run (see symgrad.ops.state)."))


def is_parameter(value) -> bool:
    return isinstance(value, Value) and value.op is not None and value.op.opdef is parameter_p


def assign(value, target):
    """Give the parameter ``target`` the value ``value`` for the next run of the compiled
    program: after each successful call, ``fn.state[target.name]`` holds it. ``value`` (a
    Value, or an array or number, which becomes a constant of the parameter's dtype) must
    have exactly the parameter's shape and dtype. Returns the parameter's next value (a
    Value equal to ``value``). Build it in the program's global block (not inside a ``cond``
    branch or a loop body: return the value from the region and assign it after). When a
    parameter is assigned several times, the last ``assign`` wins."""
    if not is_parameter(target):
        shown = target.type_str if isinstance(target, Value) else type(target).__name__
        raise TypeError(f"assign: the target must be a parameter (sg.parameter), got {shown}"
                        + (f" made by {target.op.name!r}" if isinstance(target, Value)
                           and target.op is not None else ""))
    program = target.program
    if current_block(program) is not program.global_block():
        raise ScopeError(f"assign to parameter {target.name!r}: a parameter's next value is "
                         f"assigned in the program's global block, not inside a cond branch or "
                         f"a loop body; return the value from the region and assign it after")
    if not isinstance(value, Value):
        value = as_value(value, dtype=target.dtype, program=program)
    return bind(assign_p, [value, target])


def assignments(program) -> dict:
    """``{parameter Value: assign result}`` for every assigned parameter of ``program``, in
    the order of ``program.parameters``: the last ``assign`` of each parameter in the global
    block, or, in a program ``sg.compile`` made, the assigns it marked to commit."""
    last, committed, marked = {}, {}, False
    for op in program.global_block().ops:
        if op.opdef is not assign_p:
            continue
        target, result = op.inputs[1], op.results[0]
        commit = op.attrs.get(COMMIT)
        if commit is None:
            last[target] = result
        else:
            marked = True
            if commit:
                committed[target] = result
    chosen = committed if marked else last
    return {p: chosen[p] for p in program.parameters if p in chosen}


def mark_commits(program, results) -> None:
    """Mark each assign op of ``program`` (a copy ``sg.compile`` owns) with whether its result
    is among ``results``, the state outputs chosen for it."""
    chosen = {id(r) for r in results}
    for op in program.global_block().ops:
        if op.opdef is assign_p:
            op.attrs[COMMIT] = id(op.results[0]) in chosen


def split_state_fetches(program, fetches):
    """``(user fetches, [(parameter name, state output)])`` of a compiled program's fetches:
    the state outputs are the committed assignments (:func:`assignments`), which
    ``sg.compile`` appends after the user's fetches. ``ValueError`` if they are not there."""
    state = [(p.name, result) for p, result in assignments(program).items()]
    count = len(fetches) - len(state)
    tail = fetches[count:] if state else []
    if count < 0 or any(v is not result for v, (_, result) in zip(tail, state)):
        raise ValueError("the fetches do not end with the program's state outputs (the "
                         "committed assign results, in parameter order)")
    return list(fetches[:count]), state


def with_parameter_values(program, values):
    """A copy of ``program`` whose parameters named in ``values`` (name -> array) start from
    those arrays (their ``init``), and the map of old -> new Values. Used to save a compiled
    program's current state as its parameters' initial values."""
    copy, value_map = program.clone()
    for param in copy.parameters:
        array = values.get(param.name)
        if array is None:
            continue
        array = np.array(array, dtype=param.dtype, order="C")
        if array.shape != param.shape:
            raise ShapeError(f"parameter {param.name!r}: a value of shape "
                             f"{format_shape(array.shape)} for {param.type_str}")
        array.flags.writeable = False
        param.op.attrs["init"] = array
    return copy, value_map


Program.assignments = property(assignments)
