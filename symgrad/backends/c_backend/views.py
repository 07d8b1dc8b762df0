"""The data movement that segments absorb: views that need no copy in C, and broadcasts
that a segment computes.

A segment's arrays are C-contiguous (its arguments are acquired so, its temporaries are
allocated so), so a reshape of one (``reshape``, ``reshape_like``, ``expand_dims``,
``squeeze``) is the same buffer read with other dims, and the transpose of a matrix (or of each
matrix of a stack) is the same buffer read by a GEMM with its transpose flag.
:func:`absorbed_views` picks those of one block whose every reader is a member of a segment (a
loop group or a native op) that reads them so: the host makes no view for them, and their
readers, in whichever segment, get their operand's buffer (:class:`~.segments.SegmentRenderer`
resolves a chain of them). The host then counts a read of such a view as a read of its operand
when it deletes values (:meth:`~.host.CHostGenerator.last_uses`).

A broadcast (``broadcast_to``, ``broadcast_like``) is a view on the host, which the
segments' members, reading dense buffers, cannot take: :func:`computed_broadcasts` picks those
whose every reader is a member, which become members themselves, loops writing the broadcast
into a temporary of the segment (:func:`~.kernels.broadcast_plan`). The mean's cotangent of a
classifier's loss, broadcast over the batch for the cross-entropy gradient's row op, no longer
ends the segment: a training step (W1, W7, W8 of ``benchmarks/cpu.py``) is one call.
"""
from __future__ import annotations

from .kernels import broadcast_plan

RESHAPES = ("reshape", "reshape_like", "expand_dims", "squeeze")


def _is_transpose(op) -> bool:
    """Does ``op`` swap the last two axes of its operand (a matrix's transpose, or that of
    each matrix of a stack), keeping the others in place?"""
    if op.name != "transpose" or op.inputs[0].ndim < 2:
        return False
    rank = op.inputs[0].ndim
    return tuple(op.attrs["axes"]) == (*range(rank - 2), rank - 1, rank - 2)


def absorbed_views(ops, members, kinds, readers, read_after, scalars) -> dict:
    """``{op: transposed}`` for the views of ``ops`` (one block's) that the segments absorb;
    ``transposed``: it is the transpose of a matrix or of a stack's matrices. ``members[k]``:
    op ``k`` is a member of a segment; ``kinds[k]``: its native kind, or None; ``readers``:
    :func:`~symgrad.ir.graph.users` of ``ops``; ``read_after``: the values read after the
    block; ``scalars``: the values the host inlines as literals. A view is absorbed when
    nothing reads it after the block, its operand is an array, and every reader is a member
    or an absorbed view (for a transpose: a native matmul, which reads any operand
    transposed). One pass from the last op back: a view's readers are decided before it."""
    position = {op: k for k, op in enumerate(ops)}
    absorbed = {}
    for op in reversed(ops):
        transposed = _is_transpose(op)
        if not (transposed or op.name in RESHAPES) or op.inputs[0] in scalars:
            continue
        value = op.results[0]
        reads = readers.get(value, ())
        if value in read_after or not reads:
            continue
        if transposed:
            fits = all(kinds[position[r]] == "matmul" for r in reads)
        else:
            fits = all(members[position[r]] or r in absorbed for r in reads)
        if fits:
            absorbed[op] = transposed
    return absorbed


def computed_broadcasts(ops, members, readers, read_after) -> dict:
    """``{k: plan}`` for the broadcasts among ``ops`` (one block's) that become members of a
    segment (see the module docstring), ``plan`` their :func:`~.kernels.broadcast_plan`:
    those that C computes, that nothing reads after the block (the host keeps its view
    there), and whose every reader is a member (``members[k]``: op ``k`` is one) or such a
    broadcast. One pass from the last op back: a broadcast's readers are decided before
    it."""
    position = {op: k for k, op in enumerate(ops)}
    plans = {}
    for index in range(len(ops) - 1, -1, -1):
        op = ops[index]
        plan = broadcast_plan(op)
        if plan is None or members[index]:
            continue
        reads = readers.get(op.results[0], ())
        if op.results[0] in read_after or not reads:
            continue
        if all(members[position[r]] or position[r] in plans for r in reads):
            plans[index] = plan
    return plans
