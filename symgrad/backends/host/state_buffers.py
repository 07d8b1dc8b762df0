"""In-place parameter updates: which new parameter values a generated module writes into
output buffers its caller gives it.

A program compiled with state returns, after its fetches, the new value of each assigned
parameter (the *state outputs*: ``assign`` results, whose value is the assign's first
operand). When the op computing that operand writes its result through ``out=`` (an exact
ufunc, or a map value of a fused group), the module takes an output buffer for the parameter
from its caller instead of allocating one: ``run(_dims, _buffers, **feeds)`` with
``_buffers[name]`` an array of the parameter's type. The runtime hands it a spare buffer of
the parameter (double buffering: the new value is written beside the current one, which the
program still reads, and the state then points at it), so a training step allocates no new
arrays for its weights, and a call that fails leaves the state untouched.
"""
from __future__ import annotations

import dataclasses

from ...ops.state import assign_p
from ...passes.memory import writes_into_buffer

BUFFERS = "_buffers"   # the generated run's parameter holding the output buffers


@dataclasses.dataclass(frozen=True)
class StateBuffer:
    """A buffer slot (in the generator's buffer plan) that is the caller's output buffer for
    parameter ``name``."""

    name: str


def in_place_slots(program, state, smallest=1) -> dict:
    """``{Value: StateBuffer}``: the operand of each state output (``state``: [(parameter
    name, assign result)]) of ``smallest`` elements or more that its op writes into a
    buffer; at most one per Value."""
    slots = {}
    for name, result in state:
        if result.op is None or result.op.opdef is not assign_p:
            continue
        value = result.op.inputs[0]
        op = value.op
        if op is None or op.block is not program.global_block() or value in slots \
                or None in value.shape or value.size < smallest:
            continue
        if writes_into_buffer(op)[value.index]:
            slots[value] = StateBuffer(name)
    return slots
