"""Prune to the fetches (dead-code elimination): keep only the ops the fetches depend on.

Ops have no side effects, so an op is live exactly when some fetch depends on it; the same
pass serves as DCE after rewrites that orphan ops (simplify, folding). When every op is live
the input program is returned as it is (passes never modify their input, so sharing it is
safe): DCE after a simplify that left nothing dead costs one liveness sweep.
"""
from __future__ import annotations

from .rewrite import Rebuilder, live_ops


def prune(program, fetches, options):
    """``program`` restricted to the ancestors of ``fetches`` (in program order)."""
    live = live_ops(program.ops, fetches)
    dropped = len(program.ops) - len(live)
    if not dropped:
        return program, list(fetches), {"pruned_ops": 0}
    builder = Rebuilder(program)
    builder.copy_all(live)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"pruned_ops": dropped}
