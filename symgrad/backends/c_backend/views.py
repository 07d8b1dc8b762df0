"""The views that segments absorb: data movement that needs no copy in C.

A segment's arrays are C-contiguous (its arguments are acquired so, its temporaries are
allocated so), so a reshape of one (``reshape``, ``reshape_like``, ``expand_dims``,
``squeeze``) is the same buffer read with other dims, and the transpose of a matrix is the
same buffer read by a GEMM with its transpose flag. :func:`absorbed_views` picks those of one
block whose every reader is a member of a segment (a loop group or a native op) that reads
them so: the host makes no view for them, and their readers, in whichever segment, get their
operand's buffer (:class:`~.segments.SegmentRenderer` resolves a chain of them). The host then
counts a read of such a view as a read of its operand when it deletes values
(:meth:`~.host.CHostGenerator.last_uses`).
"""
from __future__ import annotations

from .native_ops import transposable

RESHAPES = ("reshape", "reshape_like", "expand_dims", "squeeze")


def _is_transpose(op) -> bool:
    return op.name == "transpose" and op.inputs[0].ndim == 2 and \
        tuple(op.attrs["axes"]) == (1, 0)


def absorbed_views(ops, members, kinds, readers, read_after, scalars) -> dict:
    """``{op: transposed}`` for the views of ``ops`` (one block's) that the segments absorb;
    ``transposed``: it is the transpose of a matrix. ``members[k]``: op ``k`` is a member of a
    segment; ``kinds[k]``: its native kind, or None; ``readers``:
    :func:`~symgrad.ir.graph.users` of ``ops``; ``read_after``: the values read after the
    block; ``scalars``: the values the host inlines as literals. A view is absorbed when
    nothing reads it after the block, its operand is an array, and every reader is a member
    or an absorbed view (for a transpose: a native matmul reading it where
    :func:`~.native_ops.transposable`). One pass from the
    last op back: a view's readers are decided before it."""
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
            fits = all(kinds[position[r]] == "matmul" and
                       all(transposable(r, "matmul", p) for p, v in enumerate(r.inputs)
                           if v is value) for r in reads)
        else:
            fits = all(members[position[r]] or r in absorbed for r in reads)
        if fits:
            absorbed[op] = transposed
    return absorbed
