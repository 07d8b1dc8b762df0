"""Prune to the fetches (dead-code elimination): keep only the ops the fetches depend on.

Ops have no side effects, so an op is live exactly when some fetch depends on it; the same
pass serves as DCE after rewrites that orphan ops (simplify, folding).
"""
from __future__ import annotations

from ..ir.graph import ancestors_of
from .rewrite import Rebuilder


def prune(program, fetches, options):
    """Copy of ``program`` holding only the ancestors of ``fetches`` (in program order)."""
    live = ancestors_of(fetches)
    builder = Rebuilder(program)
    for op in program.ops:
        if op in live:
            builder.copy(op)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"pruned_ops": len(program.ops) - len(new.ops)}
