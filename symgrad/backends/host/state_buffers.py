"""In-place parameter updates: which new parameter values a generated module writes into
output buffers its caller gives it, and which of those buffers may be the parameter's current
value itself.

A program compiled with state returns, after its fetches, the new value of each assigned
parameter (the *state outputs*: ``assign`` results, whose value is the assign's first
operand). When the op computing that operand writes its result through ``out=`` (an exact
ufunc, or a map value of a fused group), the module takes an output buffer for the parameter
from its caller instead of allocating one: ``run(_dims, _buffers, **feeds)`` with
``_buffers[name]`` an array of the parameter's type (``IN_PLACE``: those names). The runtime
hands it either

- the parameter's current array, when that array is private to the state and the name is one
  of the module's ``OVERWRITES`` (:func:`overwrites`): the step updates the weights and
  optimizer slots in place, as a hand-written training loop does, allocating nothing and
  writing each array once; or
- a spare buffer of the parameter (double buffering: the new value is written beside the
  current one, and the state then points at it), for the other names, and whenever the current
  array is not private (the parameter's init, or an array a caller has seen).

Either way a call that raises leaves the state as it was: a parameter is overwritten only
where nothing after its update can raise (see :func:`overwrites`), so the first write into
the state happens after the last op that may fail.
"""
from __future__ import annotations

import dataclasses

from ...dtypes import is_float
from ...ops.core import ELEMENTWISE, REDUCTION, SOURCE
from ...ops.elementwise import power_p
from ...ops.fused import is_fusion
from ...ops.state import assign_p
from ...passes.fusion import split_body
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


# --- which buffers may be the parameter itself --------------------------------------------------
def overwrites(program, fetches, slots) -> dict:
    """``{O: P}`` for the new values ``O`` of the :func:`in_place_slots` ``slots`` whose
    buffer may be the current array of the parameter ``P`` they replace (the module's
    ``OVERWRITES`` are those parameters' names): ``O``, computed by top-level op ``G``,
    overwrites ``P`` when

    1. nothing reads ``P``, or a value that may alias it (:func:`may_alias`: a view, an
       ``assign`` of it...), after ``G``: every other reader comes earlier in the block, and
       no fetch is ``P`` or a view of it;
    2. ``G`` reads ``P`` itself (not a view) only element by element where it writes ``O``:
       ``G`` is the elementwise op computing ``O`` from ``P``, or a fused group whose members
       reading ``P`` are elementwise ops of ``O``'s phase and shape (the map phase for a map
       value, the epilogue for a reduced one) that come before the member computing ``O``;
    3. no op from ``G`` on can raise (:func:`may_raise`): a call that raises has written
       nothing into the state yet.

    Rule 2 makes each element of ``P`` read (in every loop that reads it) before the same
    element of ``O`` is written, in the NumPy backend's chunks as in C's loops."""
    ops = program.global_block().ops
    raising = [index for index, op in enumerate(ops) if may_raise(op)]
    first_safe = raising[-1] + 1 if raising else 0
    targets = {value: _assigned_parameter(fetches, slot.name) for value, slot in slots.items()}
    writers = {target: value.op for value, target in targets.items() if target is not None}
    last, position = _last_reads(ops, writers, set(fetches))
    chosen = {}
    for value, target in targets.items():
        index = position.get(value.op)
        if target is not None and index is not None and index >= first_safe \
                and last.get(target, -1) < index and _aligned(value.op, value, target):
            chosen[value] = target
    return chosen


def _assigned_parameter(fetches, name):
    """The parameter Value named ``name`` that a state output among ``fetches`` assigns."""
    for value in fetches:
        op = value.op
        if op is not None and op.opdef is assign_p and op.inputs[1].name == name:
            return op.inputs[1]
    return None


def _last_reads(ops, writers, fetched) -> tuple:
    """``({P: index}, {op: index})``: for each parameter ``P`` of ``writers`` (``{P: the op
    computing its new value}``), the index of the last op reading ``P``, or a value that may
    alias it, other than its writer reading ``P`` itself (``inf`` when such a value is
    fetched); and the index of every op. One pass: each value knows the parameters it may
    alias. An ``assign`` aliases its value, not its target, whose data it does not read."""
    aliasing = {target: (target,) for target in writers}   # Value -> parameters it may be
    last, position = {}, {}
    for index, op in enumerate(ops):
        position[op] = index
        reached = set()
        for operand in data_reads(op):
            for target in aliasing.get(operand, ()):
                reached.add(target)
                if not (writers[target] is op and operand is target):
                    last[target] = index
        if reached and (op.opdef is assign_p or may_alias(op)):
            for result in op.results:
                aliasing[result] = tuple(reached)
    for value in fetched:
        for target in aliasing.get(value, ()):
            last[target] = float("inf")
    return last, position


def data_reads(op) -> list:
    """The operands whose data ``op`` reads: an ``assign``'s value, not its target, which it
    writes."""
    return op.inputs[:1] if op.opdef is assign_p else op.inputs


def may_alias(op) -> bool:
    """May a result of top-level op ``op`` be (a view of) one of its operands? Not for
    computed values: elementwise ops, reductions, fused groups, and the opaque ops of
    :data:`FRESH_OPS`; data movement (views), regions and other opaque ops may be."""
    if is_fusion(op) or op.opdef in FRESH_OPS:
        return False
    return op.opdef.category not in (ELEMENTWISE, REDUCTION, SOURCE)


def _aligned(writer, value, target) -> bool:
    """Rule 2 of :func:`overwrites` for ``writer`` computing ``value`` over ``target``."""
    if target.shape != value.shape or target.dtype != value.dtype:
        return False
    if not is_fusion(writer):
        return writer.opdef.category == ELEMENTWISE
    map_ops, reduction, epilogue = split_body(writer)
    inner = writer.blocks[0].yields[value.index].op
    phase = map_ops if inner in map_ops else epilogue if inner in epilogue else None
    if phase is None:   # the reduction's own result, accumulated in its buffer
        return not any(_reads(op, target) for op in writer.blocks[0].ops)
    if reduction is not None and _reads(reduction, target):
        return False
    before = set(phase[:phase.index(inner) + 1])
    for op in writer.blocks[0].ops:
        if _reads(op, target) and (op not in before or op.results[0].shape != target.shape):
            return False
    return True


def _reads(op, value) -> bool:
    return any(v is value for v in op.inputs)


def may_raise(op) -> bool:
    """Can top-level op ``op`` raise once the call's feeds and dims have been checked? No for
    sources, elementwise ops (NaN and inf propagate, integers wrap; but an integer
    ``power``: NumPy refuses negative exponents), reductions with an identity on floats
    (sizes are what the program declares), fused groups of those and the ops of
    :data:`SAFE_OPS`; yes for everything else (class indices, custom ops, regions, the max of
    a possibly empty extent...)."""
    if is_fusion(op):
        return any(may_raise(inner) for inner in op.blocks[0].ops)
    opdef = op.opdef
    if opdef.category == SOURCE or opdef in SAFE_OPS:
        return False
    if opdef.category == ELEMENTWISE:
        return opdef is power_p and not is_float(op.results[0].dtype)
    if opdef.category == REDUCTION and opdef.reduction is not None \
            and opdef.reduction.has_identity:
        return not all(is_float(v.dtype) for v in (*op.inputs, *op.results))
    return True


def _op_sets() -> tuple:
    """``(SAFE_OPS, FRESH_OPS)``: the OpDefs of data movement and library calls that never
    raise (:func:`may_raise`), and the opaque ops whose results are new arrays
    (:func:`may_alias`)."""
    from ...ops import linalg, nn_ops, reduction, shape

    safe = frozenset({assign_p, linalg.matmul_p, shape.transpose_p, shape.reshape_p,
                      shape.broadcast_to_p, shape.expand_dims_p, shape.squeeze_p,
                      reduction.size_p})
    fresh = frozenset({linalg.matmul_p, reduction.size_p, nn_ops.softmax_p,
                       nn_ops.log_softmax_p, nn_ops.softmax_cross_entropy_p, nn_ops.one_hot_p})
    return safe, fresh


SAFE_OPS, FRESH_OPS = _op_sets()
