"""Planned peak memory of a program run, for given sizes of its symbolic dims
(``CompiledProgram.memory``): the bytes its Values occupy at once at worst, control flow and
checkpointing included, so that memory is testable without measuring a process.

The model (a pure function of the program; nothing runs):

- a Value owns ``size * itemsize`` bytes from the op that makes it until its last reader in
  its block; fetched Values and a block's yields until the block ends; program inputs,
  parameters and constants are not counted (the caller holds them);
- while an op runs it holds its results, and a region op (``cond``, loops) also the largest
  peak of one run of one of its blocks (a loop body's peak is per step: a step's Values die
  before the next step's; a loop's stacked outputs are its results, sized by its trip count).
  A fused group holds its results only (its inner Values are never arrays of their own);
- a region op also holds what its OpDef's ``Region.held`` says (a ``reverse_loop``, the
  carries its checkpointing schedule stores at most at once for its trip count).

The ops whose NumPy result is a view of their first input (:data:`VIEW_OPS`: reshapes,
transposes, slices, splits) own no bytes and keep that input alive as long as they live. Buffer
reuse (:mod:`.memory`) is ignored. The walk is linear in the ops; recursion is over nesting
depth only.
"""
from __future__ import annotations

from ..ops.fused import is_fusion

__all__ = ["peak_bytes", "VIEW_OPS"]

# Ops whose results NumPy makes as views of their first input (no bytes of their own).
VIEW_OPS = frozenset({"reshape", "reshape_like", "transpose", "expand_dims", "squeeze",
                      "broadcast_to", "broadcast_like", "slice", "split", "split_like"})


def peak_bytes(program, fetches, size_of) -> int:
    """The planned peak bytes of computing ``fetches`` of ``program``; ``size_of(dim)`` gives
    a dim's size (an int, or a symbolic dim evaluated for the sizes the caller binds) and
    raises ValueError for a dim it cannot size."""
    return _peak(program.ops, set(fetches), _Sizer(size_of))


class _Sizer:
    def __init__(self, size_of):
        self.size_of = size_of
        self.cache: dict = {}

    def dims(self, dims, what) -> list[int]:
        try:
            return [self.size_of(d) for d in dims]
        except ValueError as exc:
            raise ValueError(f"memory: the size of {what} is known only at run time ({exc})") \
                from None

    def __call__(self, value) -> int:
        nbytes = self.cache.get(value)
        if nbytes is None:
            size = 1
            for dim in self.dims(value.dims, f"%{value.id} ({value.type_str})"):
                size *= dim
            nbytes = self.cache[value] = size * value.dtype.itemsize
        return nbytes


def _owns(value) -> bool:
    op = value.op
    return op is not None and not op.opdef.feedable and op.opdef.category != "source" and \
        op.opdef.name not in VIEW_OPS


def _peak(ops, kept, nbytes) -> int:
    """The peak bytes of running ``ops`` in order, the Values in ``kept`` living to the end."""
    last: dict = {}
    for index, op in enumerate(ops):
        for value in op.inputs:
            last[value] = index
    for value in kept:
        last[value] = len(ops)
    for op in reversed(ops):        # a view keeps its base alive (views come after bases)
        if op.opdef.name in VIEW_OPS and op.inputs:
            end = max((last.get(v, -1) for v in op.results), default=-1)
            if end > last.get(op.inputs[0], -1):
                last[op.inputs[0]] = end
    dying: dict = {}
    for value, index in last.items():
        if value not in kept:
            dying.setdefault(index, []).append(value)
    live = peak = 0
    owned: set = set()
    for index, op in enumerate(ops):
        made = [v for v in op.results if _owns(v)]
        held = sum(nbytes(v) for v in made)
        peak = max(peak, live + held + _inner_peak(op, nbytes))
        live += held
        owned.update(made)
        for value in made:
            if value not in last and value not in kept:   # never read: dies at once
                live -= nbytes(value)
                owned.discard(value)
        for value in dying.get(index, ()):
            if value in owned:
                live -= nbytes(value)
                owned.discard(value)
    return peak


def _inner_peak(op, nbytes) -> int:
    """What a region op holds while it runs besides its results (see the module docstring)."""
    if not op.blocks or is_fusion(op):
        return 0
    inner = max(_peak(block.ops, set(block.yields), nbytes) for block in op.blocks)
    held = op.opdef.region.held
    if held is not None:
        try:
            inner += held(op, nbytes, lambda dims: nbytes.dims(dims, "a trip count"))
        except ValueError as exc:
            raise ValueError(f"memory: {exc}") from None
    return inner
