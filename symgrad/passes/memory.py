"""Memory plan: liveness and buffer reuse.

Each value that its op writes into a preallocated buffer (see :func:`writes_into_buffer`)
gets a buffer *slot*; a slot is reused by a later value of the same dtype and shape once
every value living in it (and every view of it) is dead. Program inputs, parameters,
constants and fetched values never get a reused slot, and a buffer that a fetched value may
alias is never freed. Other ops' results are assumed to possibly alias their inputs (views),
so they extend their inputs' lifetimes. The plan is stored on each op as the hidden attribute
``_buffers`` (one slot number or None per result); ``stats`` reports the planned peak bytes
(statically sized values only) with and without reuse.
"""
from __future__ import annotations

from ..ops.core import ELEMENTWISE
from .fusion import is_fusion, map_outputs
from .rewrite import Rebuilder

NEVER = float("inf")


def writes_into_buffer(op) -> list[bool]:
    """Per result: does the op write it into a buffer given to it (``out=``)?"""
    if is_fusion(op):
        return map_outputs(op)
    emitter = op.opdef.emitters.get("numpy")
    exact = op.opdef.category == ELEMENTWISE and getattr(emitter, "ufunc", None) is not None
    return [exact] * len(op.results)


def _nbytes(value):
    size = value.size
    return 0 if size is None else size * value.dtype.itemsize


def plan(program, fetches):
    """``{op: [slot or None per result]}`` and the stats of the plan."""
    ops = program.ops
    fetched = set(fetches)
    root: dict = {}          # value -> its storage root (a value owning memory)
    planned: dict = {}       # root value -> True when it lives in a slot
    for op in ops:
        flags = writes_into_buffer(op)
        for value, flag in zip(op.results, flags):
            own = flag and value not in fetched and None not in value.shape
            planned[value] = own
            root[value] = value
    # a non-planned op's results may be views of its inputs: they keep the inputs' roots alive
    last_use: dict = {}
    alias_roots: dict = {}
    for index, op in enumerate(ops):
        for value in op.inputs:
            for r in alias_roots.get(value, (root[value],)):
                last_use[r] = index
        for value, own in zip(op.results, (planned[v] for v in op.results)):
            if not own and not op.opdef.feedable:
                roots = set()
                for v in op.inputs:
                    roots.update(alias_roots.get(v, (root[v],)))
                roots.add(value)
                alias_roots[value] = tuple(roots)
    for value in fetched:
        for r in alias_roots.get(value, (root[value],)):
            last_use[r] = NEVER
    free: dict = {}
    slots: dict = {}
    slot_count = 0
    dying_at: dict = {}
    for r, index in last_use.items():
        if index != NEVER:
            dying_at.setdefault(index, []).append(r)
    live_bytes = peak = unplanned_live = unplanned_peak = 0
    for index, op in enumerate(ops):
        for value in op.results:
            nbytes = 0 if op.opdef.feedable or op.opdef.category == "source" else _nbytes(value)
            unplanned_live += nbytes
            if not planned[value]:
                live_bytes += nbytes
                continue
            key = (value.dtype.str, value.shape)
            pool = free.get(key)
            if pool:
                slots[value] = pool.pop()
            else:
                slots[value] = slot_count
                slot_count += 1
                live_bytes += nbytes
        peak = max(peak, live_bytes)
        unplanned_peak = max(unplanned_peak, unplanned_live)
        for value in op.results:
            if value not in last_use:      # never read: dies at once
                dying_at.setdefault(index, []).append(value)
        for r in dying_at.get(index, ()):
            nbytes = _nbytes(r) if not (r.op.opdef.feedable or r.op.opdef.category == "source") \
                else 0
            unplanned_live -= nbytes
            if planned.get(r):
                free.setdefault((r.dtype.str, r.shape), []).append(slots[r])
            else:
                live_bytes -= nbytes
    table = {op: [slots.get(v) for v in op.results] for op in ops}
    stats = {"buffers": slot_count, "planned_peak_bytes": peak,
             "unplanned_peak_bytes": unplanned_peak}
    return table, stats


def memory_plan(program, fetches, options):
    """Copy of ``program`` whose ops carry their buffer plan in ``attrs["_buffers"]``."""
    table, stats = plan(program, fetches)
    builder = Rebuilder(program)
    for op in program.ops:
        slots = table[op]
        if any(s is not None for s in slots):
            builder.copy(op, attrs=dict(op.attrs, _buffers=tuple(slots)))
        else:
            builder.copy(op)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, stats
