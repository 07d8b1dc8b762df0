"""Loop-invariant code motion: ops of a loop's body that read only what the loop captures
run once, before the loop.

A reverse-mode scan reads its weights transposed at every step (``%46 = transpose(%W)`` in
the backward body of an RNN); a model may scale or cast a captured weight inside its step.
Such an op gives the same result at every step, so this pass moves it out of the body, and
the loop captures its result instead::

    %25, ... = scan(%21, ...) captures(%W)           %46 = transpose(%W)
      body(%30, ...):                         ->     %25, ... = scan(%21, ...) captures(%46)
        %46 = transpose(%W)                            body(%30, ...):
        %47 = matmul(%40, %46)                           %47 = matmul(%40, %46)

An op of a body is hoisted when

- it is not a region op and reads at least one Value, every one of them defined outside the
  body or by an op hoisted before it (an op without inputs, a constant, stays where the code
  generators inline it);
- its result has no more elements than its largest input, so a broadcast a body's loops
  read in place is not made into an array;
- it is not a user's custom op (whose Python may do more than compute its result);
- its block runs at least once whenever the loop runs (``Region.repeats``: the body of a
  ``scan`` whose trip count is known at build time and at least 1, the blocks of a
  checkpointed ``reverse_loop`` of such a count; never a ``while_loop``'s or a ``cond``'s), so
  no hoisted op runs, or raises, where the program would have run none.

Ops are pure, so the hoisted op's value is the one every step computed. Each loop is
handled once, inner loops first; an op that an inner loop's hoisting leaves in an outer
body stays there. One forward sweep per body: linear in program size, recursing only over
nesting depth. Returns its input program when nothing moves.
"""
from __future__ import annotations

import math

from .rewrite import Rebuilder, rewrites_inside


def _elements(value) -> float:
    """Elements of ``value`` (inf when a dim is symbolic)."""
    return math.inf if value.size is None else value.size


def _no_larger(op) -> bool:
    """Has ``op``'s result no more elements than its largest input (by static shape, else
    by its dims being some input's dims in some order)?"""
    results = [_elements(v) for v in op.results]
    largest = max(_elements(v) for v in op.inputs)
    if max(results) < math.inf:
        return max(results) <= largest
    dims = [sorted(map(repr, v.dims)) for v in op.inputs]
    return all(sorted(map(repr, r.dims)) in dims for r in op.results)


def hoistable(op) -> list:
    """The ops of region ``op``'s blocks that the pass moves before it, block by block in
    order: from the blocks its Region's ``repeats`` names (those that run at least once each
    time ``op`` runs: :class:`~symgrad.ops.core.Region`)."""
    repeats = op.opdef.region.repeats if op.opdef.region is not None else None
    moved = []
    for index in repeats(op) if repeats is not None else ():
        block, moved_values = op.blocks[index], set()
        for inner in block.ops:
            if inner.blocks or not inner.inputs or inner.opdef.user_defined:
                continue
            if all(v.block is not block or v in moved_values for v in inner.inputs) and \
                    _no_larger(inner):
                moved.append(inner)
                moved_values.update(inner.results)
    return moved


def _plan(ops, plans) -> None:
    """``plans[op] = hoistable(op)`` for each loop of ``ops`` (nested ones included) that
    hoists something, or holds a loop that does. Recursion over nesting depth only."""
    for op in ops:
        if not rewrites_inside(op):
            continue
        for block in op.blocks:
            _plan(block.ops, plans)
        moved = hoistable(op)
        if moved or any(inner in plans for block in op.blocks for inner in block.ops):
            plans[op] = moved


def _copy(builder, ops, plans) -> None:
    for op in ops:
        moved = plans.get(op)
        if moved is None:
            builder.copy(op)
            continue
        for inner in moved:              # into the block the loop is in, before it
            builder.copy(inner)
        skipped = set(moved)
        builder.copy_region(op, lambda index, block: _copy(
            builder, [o for o in block.ops if o not in skipped], plans))


def hoist(program, fetches, options):
    """``program`` with loop-invariant ops of its scans' bodies moved before the loops (see
    the module docstring); stats: ``hoisted_ops``."""
    plans: dict = {}
    _plan(program.ops, plans)
    count = sum(len(moved) for moved in plans.values())
    if not count:
        return program, list(fetches), {"hoisted_ops": 0}
    builder = Rebuilder(program)
    _copy(builder, program.ops, plans)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"hoisted_ops": count}
