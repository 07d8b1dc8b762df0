"""Prune to the fetches (dead-code elimination): keep only the ops the fetches depend on.

Ops have no side effects, so an op is live exactly when some fetch depends on it; the same
pass serves as DCE after rewrites that orphan ops (simplify, folding). Inside regions the same
holds for what a block yields, and a region op whose OpDef can drop results
(``Region.narrow``) loses the results nobody reads, with the yields (and the ops) that only fed
them: a scan that ``grad`` made record residuals computes none of them when only its forward
results are fetched. When every op is live the input program is returned as it is (passes never
modify their input, so sharing it is safe): DCE after a simplify that left nothing dead costs
one liveness sweep.
"""
from __future__ import annotations

from .rewrite import Rebuilder


def _sweep(ops, needed, plans) -> tuple[list, set, int]:
    """One backward sweep over a block's ``ops``: ``(live ops, Values read, ops dropped)``.
    For each live region op, ``plans[op]`` records ``(narrowing or None, [live ops of each
    block])``; only the captures its live inner ops read count as read. Recursion is over
    nesting depth only."""
    needed = set(needed)
    live = []
    dropped = 0
    for op in reversed(ops):
        used = [value in needed for value in op.results]
        if not any(used):
            dropped += 1
            continue
        live.append(op)
        if not op.blocks:
            needed.update(op.inputs)
            continue
        region = op.opdef.region
        narrowing = region.narrow(op, used) if region.narrow is not None else None
        kept_yields = narrowing[2] if narrowing is not None else \
            [range(len(b.yields)) for b in op.blocks]
        inner_live = []
        captures = op.inputs[op.opdef.explicit_inputs(op.attrs):]   # what blocks read outside
        for block, keep in zip(op.blocks, kept_yields):
            block_live, block_needed, block_dropped = _sweep(
                block.ops, [block.yields[i] for i in keep], plans)
            inner_live.append(block_live)
            dropped += block_dropped
            needed.update(v for v in captures if v in block_needed)
        needed.update(op.inputs[:op.opdef.explicit_inputs(op.attrs)])
        if narrowing is not None or _shrinks(inner_live, op) or any(
                inner in plans for ops in inner_live for inner in ops if inner.blocks):
            plans[op] = (narrowing, inner_live)    # (a region inside it shrinks: rebuild it)
    live.reverse()
    return live, needed, dropped


def _shrinks(inner_live, op) -> bool:
    """Do the live ops of ``op``'s blocks leave some op out?"""
    return any(len(ops) != len(block.ops) for ops, block in zip(inner_live, op.blocks))


def _copy(builder, ops, plans) -> None:
    for op in ops:
        plan = plans.get(op)
        if plan is None:
            builder.copy(op)
            continue
        narrowing, inner_live = plan
        attrs, kept = (None, None) if narrowing is None else \
            (narrowing[0], (narrowing[1], narrowing[2]))
        builder.copy_region(op, lambda index, _, inner=inner_live: _copy(builder, inner[index],
                                                                         plans),
                            attrs=attrs, kept=kept)


def prune(program, fetches, options):
    """``program`` restricted to the ancestors of ``fetches`` (in program order), with
    regions narrowed to what is read of them."""
    plans: dict = {}
    live, _, dropped = _sweep(program.ops, fetches, plans)
    if not dropped and not plans:
        return program, list(fetches), {"pruned_ops": 0}
    builder = Rebuilder(program)
    _copy(builder, live, plans)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"pruned_ops": dropped}
