"""Merging the new forward ops that partial evaluation emits back into their blocks.

A loop's VJP that needs values the loop does not give (per-step residuals, a trip count) never
changes the loop op: it emits a *new* forward op, the loop with its blocks copied and more
results (:func:`~symgrad.autodiff.regions._Loop.finish`), in no block yet, and :func:`emit`
records it. Once the sweep over the loop's block is done, :func:`merge` puts each new op in
its old op's place and hands it the old op's result Values (the objects themselves, so every
reader, and every Python reference to a result, reads the new op): the old op leaves the
program and the loop runs once. Inside a block that a VJP differentiates (a copied loop body,
an inlined branch) that happens when its sweep ends (so an enclosing loop stacks what the
inner one records); in the blocks ``grad`` differentiates, at the end of the call, recorded
for the transaction's undo. One pass over each block's op list per sweep, so a grad call stays
linear in the program.

The :func:`merge_session` (a grad call's, or that of an enclosing transformation making
several, such as ``jvp``) lists the new ops merged at top level, for
:func:`~symgrad.autodiff.backward.sweep_unused` to number their new Values densely, and which op
replaced which, so that the backward ops name the op now in the program as their forward op.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses

from .context import current

__all__ = ["emit", "merge", "merge_session", "pending"]

_session: contextvars.ContextVar = contextvars.ContextVar("symgrad_merged_ops", default=None)


@dataclasses.dataclass
class Session:
    merged: dict = dataclasses.field(default_factory=dict)    # new top-level ops (ordered set)
    replaced: dict = dataclasses.field(default_factory=dict)  # old op -> the op in its place

    def current(self, op):
        """The op in the program in place of ``op`` (``op`` itself if none replaced it)."""
        while op in self.replaced:
            op = self.replaced[op]
        return op


@contextlib.contextmanager
def merge_session():
    """Yield the :class:`Session` of the ``with`` block: a new one, or the enclosing one."""
    session = _session.get()
    if session is not None:
        yield session
        return
    session = Session()
    token = _session.set(session)
    try:
        yield session
    finally:
        _session.reset(token)


def emit(op, new, clones) -> None:
    """Record that ``new`` (a forward op in no block yet, whose results start with ``op``'s
    result Values) is to take ``op``'s place; ``clones`` maps the ops of ``op``'s blocks to
    their copies in ``new``'s. ``op`` may itself be a new op still waiting (:func:`pending`):
    ``new`` then takes the place of the op that one was to replace."""
    call = current()
    pairs = call.copies.setdefault(op.block, {})
    old = next((key for key, waiting in pairs.items() if waiting is op), op)
    pairs[old] = new
    call.clones.update(clones)


def pending(op):
    """The new forward op recorded (:func:`emit`) to take ``op``'s place in this call, or
    ``op`` itself: a second VJP of the same loop (a store-all twin) grows that one."""
    return current().copies.get(op.block, {}).get(op, op)


def merge(block=None) -> None:
    """Put the new forward ops recorded for ``block`` (for every block when None: the end of a
    grad call, which also makes the dim constraints of copied ops follow their copies) in
    place of their old ops."""
    call = current()
    blocks = [block] if block is not None else list(call.copies)
    session = _session.get()
    for target in blocks:
        pairs = call.copies.pop(target, None)
        if pairs:
            _replace(target, pairs, session, top_level=block is None)
    if block is None and call.clones:
        _follow_clones(call.clones)
        call.clones = {}


def _replace(block, pairs, session, top_level) -> None:
    program = block.program
    ops = block.ops
    replaced = []
    for index, op in enumerate(ops):
        new = pairs.get(op)
        if new is not None:
            ops[index] = new
            replaced.append((index, op))
    if len(replaced) != len(pairs):
        raise AssertionError("a new forward op's old op is not in its block")
    for _, op in replaced:
        new = pairs[op]
        for index, value in enumerate(new.results):
            value.op, value.index = new, index
        session.replaced[op] = new
        if top_level:
            session.merged.pop(op, None)    # a new op of an earlier call, replaced in its turn
            session.merged[new] = None

    def undo():
        for index, op in replaced:
            ops[index] = op
            for position, value in enumerate(op.results):
                value.op, value.index = op, position
            session.replaced.pop(op, None)
            session.merged.pop(pairs[op], None)

    program.record_undo(undo)


def _follow_clones(clones) -> None:
    """Each dim constraint of an op that a merged new op copied now names the copy (the copy
    of the copy, for nested loops): one pass over the program's constraints."""
    program = next(iter(clones)).block.program
    old = program.dim_constraints

    def follow(op):
        while op in clones:
            op = clones[op]
        return op

    program.dim_constraints = [(constraint, follow(op)) for constraint, op in old]

    def undo():
        program.dim_constraints = old

    program.record_undo(undo)
