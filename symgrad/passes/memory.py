"""Memory plan: liveness and buffer reuse.

Each value that its op writes into a preallocated buffer (see :func:`writes_into_buffer`)
gets a buffer *slot*; a slot is reused by a later value of the same dtype and shape once
every value living in it (and every view of it) is dead. Program inputs, parameters,
constants and fetched values never get a reused slot, and a buffer that a fetched value may
alias is never freed. Other ops' results are assumed to possibly alias their inputs (views),
so they extend their inputs' lifetimes. The plan is stored on the new program as
``program.buffer_plan``: ``{Value: slot number}`` for the planned values (backends look it up
with ``getattr(program, "buffer_plan", {})``); ``stats`` reports the planned peak bytes
(statically sized values only) with and without reuse.
"""
from __future__ import annotations

from ..ops.core import ELEMENTWISE
from ..ops.fused import is_fusion
from .fusion import map_outputs
from .rewrite import clone

NEVER = float("inf")


def writes_into_buffer(op) -> list[bool]:
    """Per result: does the op write it into a buffer given to it (``out=``)?"""
    if is_fusion(op):
        return map_outputs(op)
    exact = op.opdef.category == ELEMENTWISE and op.opdef.ufunc is not None
    return [exact] * len(op.results)


def _nbytes(value):
    size = value.size
    return 0 if size is None else size * value.dtype.itemsize


def _owned_bytes(value):
    """Bytes a value allocates (program inputs and constants allocate nothing here)."""
    op = value.op
    return 0 if op.opdef.feedable or op.opdef.category == "source" else _nbytes(value)


def plan(program, fetches):
    """``{Value: slot number}`` for the planned values, and the stats of the plan."""
    ops = program.ops
    fetched = set(fetches)
    planned: dict = {}       # value -> True when it lives in a slot
    for op in ops:
        for value, flag in zip(op.results, writes_into_buffer(op)):
            planned[value] = flag and value not in fetched and None not in value.shape
    # lifetimes: a value lives until its last use, or until the last use of any value that may
    # be a view of it (a non-planned op's results may alias its inputs); fetched values forever.
    # ``last`` keeps first-use order, which orders the slots freed at one op.
    last: dict = {}
    for index, op in enumerate(ops):
        for value in op.inputs:
            last[value] = index
    for value in fetched:
        last[value] = NEVER
    for op in reversed(ops):   # views come after their bases: extend bases backwards
        if op.opdef.feedable:
            continue
        for value in op.results:
            end = last.get(value)
            if end is not None and not planned[value]:
                for base in op.inputs:
                    if last[base] < end:
                        last[base] = end
    dying_at: dict = {}
    for value, index in last.items():
        if index != NEVER:
            dying_at.setdefault(index, []).append(value)
    # assign slots; bytes[i] = memory allocated at op i, freed[i] = memory released after it
    free: dict = {}
    slots: dict = {}
    slot_bytes: list = []
    slot_start: list = []
    slot_end: list = []
    allocated = [0] * len(ops)
    released = [0] * len(ops)
    unplanned_allocated = [0] * len(ops)
    unplanned_released = [0] * len(ops)
    for index, op in enumerate(ops):
        for value in op.results:
            nbytes = _owned_bytes(value)
            unplanned_allocated[index] += nbytes
            if value not in last:          # never read: dies at once
                dying_at.setdefault(index, []).append(value)
            if not planned[value]:
                allocated[index] += nbytes
                continue
            key = (value.dtype.str, value.shape)
            pool = free.get(key)
            if pool:
                slots[value] = pool.pop()
            else:
                slots[value] = len(slot_bytes)
                slot_bytes.append(nbytes)
                slot_start.append(index)
                slot_end.append(index)
        for r in dying_at.get(index, ()):
            nbytes = _owned_bytes(r)
            unplanned_released[index] += nbytes
            if planned.get(r):
                free.setdefault((r.dtype.str, r.shape), []).append(slots[r])
                slot_end[slots[r]] = index
            else:
                released[index] += nbytes
    for number, nbytes in enumerate(slot_bytes):   # a slot lives until its last occupant dies
        allocated[slot_start[number]] += nbytes
        released[slot_end[number]] += nbytes
    stats_peak = []
    for alloc, free_ in ((allocated, released), (unplanned_allocated, unplanned_released)):
        live = peak = 0
        for index in range(len(ops)):
            live += alloc[index]
            peak = max(peak, live)
            live -= free_[index]
        stats_peak.append(peak)
    slot_count = len(slot_bytes)
    peak, unplanned_peak = stats_peak
    stats = {"buffers": slot_count, "planned_peak_bytes": peak,
             "unplanned_peak_bytes": unplanned_peak}
    return slots, stats


def attach_plan(program, fetches, options) -> dict:
    """Plan ``program`` and store the plan on it as ``program.buffer_plan`` (modifies
    ``program``: for a program no one else holds); returns the stats."""
    slots, stats = plan(program, fetches)
    program.buffer_plan = slots
    return stats


def memory_plan(program, fetches, options):
    """Copy of ``program`` carrying its buffer plan as ``program.buffer_plan``."""
    new, new_fetches = clone(program, fetches)
    return new, new_fetches, attach_plan(new, new_fetches, options)
