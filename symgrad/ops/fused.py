"""The fusion op: a group of ops that a backend runs as one loop (or one kernel).

The fusion pass (:mod:`symgrad.passes.fusion`) makes these; users never build them, so the op
is internal (kept out of the public registry, still loadable from artifacts). A fusion op is an
ordinary region op: its one block has no arguments, its ops read the group's external inputs
directly (all of the op's inputs are captures) and it yields the group's values used outside
it, which are the op's results (each result keeps the id and name of the inner Value it
yields)::

    %12, %13 = fusion(%3, %4) {group=0} : float32[?, 10], float32[]
      %11 = add(%3, %4) : float32[?, 10]
      %12 = tanh(%11) : float32[?, 10]
      %13 = sum(%12) : float32[]
      yield %12, %13
"""
from __future__ import annotations

from .core import REGION, OpDef, Region, kept_yields, register_internal_op


def _fusion_types(types, attrs, blocks):
    return [(v.shape, v.dtype) for v in blocks[0].yields]


def _run_fused(op, args, run_block):
    return run_block(op.blocks[0], [])


def _narrow_fused(op, used):
    kept = kept_yields(used)
    return None if kept is None else (dict(op.attrs), kept, [kept])


FUSION = register_internal_op(OpDef(
    "fusion", REGION, infer=_fusion_types, impl=None,
    region=Region((), lambda attrs: 0, _run_fused, _narrow_fused),
    doc="Internal: a fused group of ops (one block); made by the fusion pass."))


def is_fusion(op) -> bool:
    return op.opdef is FUSION
