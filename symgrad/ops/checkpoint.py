"""Checkpointed loops: what ``checkpoint=`` of ``scan``, ``fori_loop`` and ``while_loop``
plans, and the copy of a region op that a checkpointed scan's last, shorter segment runs.

``checkpoint=None`` stores every step's residuals for reverse mode. ``checkpoint=k`` (an int
>= 1) and ``checkpoint="sqrt"`` (``k = ceil(sqrt(T))``) cut the ``T`` steps into ``T // k``
segments of ``k`` steps and, when ``k`` does not divide ``T``, one last segment of ``T % k``
steps. :func:`segment_length` picks ``k``; :func:`~symgrad.ops.control_flow.scan` builds the
segments as ordinary region ops (an outer scan over the segments whose body is an inner scan
of ``k`` steps, the outer one marked ``remat``), so every backend runs them unchanged. A
``while_loop``, whose trip count is known only when it ends, takes an int ``k``: an outer
``remat`` while loop whose body is a while loop of at most ``k`` steps.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import IdentityMap, walk_ops
from ..ir.program import copy_op, current_block
from .core import bind_region

__all__ = ["segment_length", "copied_region"]


def segment_length(op_name, policy, length, open_ended=False) -> int | None:
    """The steps per segment that ``checkpoint=policy`` asks of a loop of ``length`` steps
    (known at build time, else None), or None when the loop stores every step (no policy, or
    segments as long as the loop). Refuses, naming ``op_name``, a policy that is not None, an
    int >= 1 or ``"sqrt"``, and ``"sqrt"`` for a loop whose trip count is known only at run
    time (an int policy too, unless the loop is ``open_ended``: a while loop)."""
    steps = _steps(op_name, policy)
    if policy is None:
        return None
    if length is None:
        if steps is not None and open_ended:
            return steps
        raise ValueError(f"{op_name}: checkpoint={policy!r} needs the trip count at build time "
                         f"(static xs leading dim, length= or int fori_loop bounds; a "
                         f"while_loop takes an int); this loop's is known only at run time")
    if steps is None:
        steps = math.isqrt(length)
        steps += steps * steps < length
    return steps if 0 < steps < length else None


def _steps(op_name, policy) -> int | None:
    """The int of an int policy, None for None and ``"sqrt"``; refuses any other policy."""
    if policy is None or (isinstance(policy, str) and policy == "sqrt"):
        return None
    if isinstance(policy, (int, np.integer)) and not isinstance(policy, (bool, np.bool_)) \
            and policy >= 1:
        return int(policy)
    raise ValueError(f"{op_name}: checkpoint must be None, an int >= 1 or 'sqrt', got "
                     f"{policy!r}")


def copied_region(op, operands, attrs):
    """A new region op like ``op`` in the insertion block, reading ``operands`` (its captures
    follow: the Values its blocks read), with ``attrs`` and copies of ``op``'s blocks (fresh
    ids; ops keep their attrs, so a random op of the copy draws as the original does)."""
    program = op.block.program
    outer = current_block(program)
    blocks = copy_op(op, op.inputs, op.attrs, outer, IdentityMap(), {}).blocks
    for block in blocks:
        block.parent_op, block.outer = None, outer
        for value in block.args:
            value.id = program._take_id()
        for inner in walk_ops(block.ops):
            for value in inner.results:
                value.id = program._take_id()
            for nested in inner.blocks:
                for value in nested.args:
                    value.id = program._take_id()
    return bind_region(op.opdef, operands, attrs, blocks, program)
