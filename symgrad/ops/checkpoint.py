"""Checkpointed loops: what ``checkpoint=`` of ``scan``, ``fori_loop`` and ``while_loop``
plans, and the copy of a region op that a checkpointed scan's last, shorter segment runs.

``checkpoint=None`` stores every step's residuals for reverse mode. ``checkpoint=k`` (an int
>= 1) and ``checkpoint="sqrt"`` (``k = ceil(sqrt(T))``) cut the ``T`` steps into ``T // k``
segments of ``k`` steps and, when ``k`` does not divide ``T``, one last segment of ``T % k``
steps. :func:`segment_length` picks ``k``; :func:`~symgrad.ops.control_flow.scan` builds the
segments as ordinary region ops (an outer scan over the segments whose body is an inner scan
of ``k`` steps, the outer one marked ``remat``), so every backend runs them unchanged.

The other policies are *run-time schedules* (:func:`run_time_plan`): ``("binomial", s)`` on
any loop, and ``k`` or ``"sqrt"`` on a loop whose trip count is known only at run time (a
``while_loop``'s, which it learns only when it ends, among them). The
loop is built as it is without checkpoint, marked with attr ``plan`` (``("binomial", s)``,
``("every", k)`` or ``("sqrt", 0)``); reverse mode stores nothing of it but its initial
carries (and, for a ``while_loop``, its trip count) and builds one
:data:`~symgrad.ops.reverse_loop.reverse_loop_p` op, which follows the actions of
:func:`_sg_reverse_plan` for the trip count at run time.

The binomial schedule (Griewank & Walther's *revolve*) reverses ``l`` steps from a stored
carry with ``s`` slots (that carry's included): with ``r`` the least integer with
``C(s + r, s) >= l``, it advances to step ``m`` (chosen below), stores that carry, reverses
``[m, l)`` with ``s - 1`` slots, then ``[0, m)`` with ``s`` slots. It runs the fewest forward
steps of any schedule with ``s`` slots, ``r * l - C(s + r, r - 1)`` (each step at most ``r``
times) besides the one forward step each reverse step recomputes; the tests check it against
the exhaustive minimum. A ``while_loop``'s trip count is known only when it ends: its
forward counts the steps (storing nothing), and the backward follows the same schedule for
that count, so its bound is one more forward sweep than a scan's, ``(r + 1) * T`` steps.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import IdentityMap, walk_ops
from ..ir.program import copy_op, current_block
from .core import bind_region

__all__ = ["segment_length", "run_time_plan", "copied_region", "plan_cost", "plan_slots"]


def segment_length(op_name, policy, length) -> int | None:
    """The steps per segment that ``checkpoint=policy`` asks of a loop of ``length`` steps
    (known at build time, else None), or None when the loop stores every step (no policy, or
    segments as long as the loop). Refuses, naming ``op_name``, a policy that is not None, an
    int >= 1 or ``"sqrt"``, and any policy for a loop whose trip count is known only at run
    time (:func:`run_time_plan` plans those)."""
    steps = _steps(op_name, policy)
    if policy is None:
        return None
    if length is None:
        raise ValueError(f"{op_name}: checkpoint={policy!r} needs the trip count at build time "
                         f"(static xs leading dim, length= or int fori_loop bounds; a "
                         f"while_loop takes an int); this loop's is known only at run time")
    if steps is None:
        steps = math.isqrt(length)
        steps += steps * steps < length
    return steps if 0 < steps < length else None


def _is_count(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
        and value >= 1


def _is_binomial(policy) -> bool:
    return isinstance(policy, tuple) and len(policy) == 2 and policy[0] == "binomial" and \
        _is_count(policy[1])


def _steps(op_name, policy) -> int | None:
    """The int of an int policy, None for None and ``"sqrt"``; refuses any other policy."""
    if policy is None or (isinstance(policy, str) and policy == "sqrt"):
        return None
    if _is_count(policy):
        return int(policy)
    raise ValueError(f"{op_name}: checkpoint must be None, an int >= 1, 'sqrt' or "
                     f"('binomial', s) with s >= 1, got {policy!r}")


def run_time_plan(op_name, policy, length) -> tuple | None:
    """The ``plan`` attr of a loop whose reverse mode follows a schedule computed at run time
    (:func:`_sg_reverse_plan`), or None when ``checkpoint=policy`` is built as segments
    (:func:`segment_length`) or stores everything. ``length``: the trip count known at build
    time, else None (a while loop's)."""
    if _is_binomial(policy):
        return ("binomial", int(policy[1]))
    steps = _steps(op_name, policy)
    if policy is None or length is not None:
        return None
    return ("every", steps) if steps is not None else ("sqrt", 0)


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


# Actions of :func:`_sg_reverse_plan` (``(kind, a, b)``).
ADVANCE, STORE, RESTORE, REVERSE = 0, 1, 2, 3


def _sg_reverse_plan(steps, kind, param):
    """Yield the actions that reverse ``steps`` loop steps (numbered in the order they run)
    from the carry at step 0 under the schedule ``(kind, param)``: ``(0, a, b)`` advance the
    current carry from step ``a`` to step ``b``; ``(1, slot, t)`` store the current carry (the
    one at step ``t``) in ``slot``; ``(2, slot, t)`` make the carry stored in ``slot`` (step
    ``t``'s) current; ``(3, t, 0)`` reverse step ``t`` from the current carry (step ``t``'s).
    Steps are reversed last to first, each once. ``kind``: ``"binomial"`` (revolve with
    ``param`` slots), ``"every"`` (a slot every ``param`` steps, then one per step of the
    segment being reversed) or ``"sqrt"`` (``"every"`` with ``ceil(sqrt(steps))``).
    Generated modules contain this function (standard library only); no recursion."""
    import math

    if steps <= 0:
        return
    if kind != "binomial":
        k = param if kind == "every" else math.isqrt(steps - 1) + 1
        count = (steps + k - 1) // k
        for j in range(count):
            if j:
                yield (0, (j - 1) * k, j * k)
            yield (1, j, j * k)
        for j in range(count - 1, -1, -1):
            a, b = j * k, min(steps, (j + 1) * k)
            yield (2, j, a)
            for t in range(a, b - 1):
                yield (1, count + t - a, t)
                yield (0, t, t + 1)
            yield (3, b - 1, 0)
            for t in range(b - 2, a - 1, -1):
                yield (2, count + t - a, t)
                yield (3, t, 0)
        return

    def split(length, slots):
        # the first stored step of an optimal schedule for `length` steps from a stored
        # carry with `slots` slots (>= 2): r repetitions suffice for C(slots + r, slots) steps;
        # the right part, reversed with one slot fewer, takes as many steps as r repetitions
        # allow it, the left part the rest but at least C(slots + r - 2, slots - 1) short of all
        reps = 0
        while math.comb(slots + reps, slots) < length:
            reps += 1
        low = max(1, length - math.comb(slots - 1 + reps, slots - 1))
        high = min(math.comb(slots + reps - 1, slots), length - 1)
        return max(low, min(high, length - math.comb(slots + reps - 2, slots - 1)))

    yield (1, 0, 0)
    pending = [(0, steps, 0, param)]       # (first step, end, slot of its carry, free slots)
    while pending:
        a, b, slot, slots = pending.pop()
        if b - a == 1 or slots <= 1:
            for t in range(b - 1, a - 1, -1):
                yield (2, slot, a)
                if t > a:
                    yield (0, a, t)
                yield (3, t, 0)
            continue
        m = a + split(b - a, slots)
        yield (2, slot, a)
        yield (0, a, m)
        yield (1, slot + 1, m)
        pending.append((a, m, slot, slots))
        pending.append((m, b, slot + 1, slots - 1))


def plan_cost(steps, kind, param) -> tuple[int, int]:
    """``(forward steps advanced, most carries stored at once)`` of :func:`_sg_reverse_plan`
    (the one forward step each reverse step recomputes not counted)."""
    advanced, stored = 0, set()
    for action, a, b in _sg_reverse_plan(steps, kind, param):
        if action == ADVANCE:
            advanced += b - a
        elif action == STORE:
            stored.add(a)
    return advanced, len(stored)


def plan_slots(steps, kind, param) -> int:
    """The carries :func:`_sg_reverse_plan` stores for ``steps`` steps (the second number
    of :func:`plan_cost`, in constant time)."""
    if steps <= 0:
        return 0
    if kind == "binomial":
        return min(param, steps)
    k = param if kind == "every" else math.isqrt(steps - 1) + 1
    return -(-steps // k) + min(k, steps) - 1
