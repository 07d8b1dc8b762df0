"""Common-subexpression elimination by hash-consing on ``(op, inputs, attrs)``.

Two ops are the same when they apply the same OpDef to the same (already deduplicated)
inputs with equal attributes. Array attributes compare by value when small
(:data:`SMALL_ARRAY`) and by identity otherwise; floats compare by their exact repr (so
``0.0`` and ``-0.0`` stay apart). Feedable sources (data, parameters) and region ops are never
merged; the ops inside regions are, with the twins of enclosing blocks in scope. A forward analysis sweep finds the repeats (keys hold object ids and
attribute values, never printed text); the program is rebuilt only when there are some.
"""
from __future__ import annotations

import collections

import numpy as np

from .rewrite import Rebuilder, rewrites_inside

SMALL_ARRAY = 64   # arrays up to this many elements are compared by value


def attr_key(value):
    """A hashable key with value equality for the attribute kinds ops use."""
    if isinstance(value, np.ndarray):
        if value.size <= SMALL_ARRAY:
            return ("array", value.dtype.str, value.shape, value.tobytes())
        return ("array-id", id(value))
    if isinstance(value, (float, np.floating)):
        return ("float", type(value).__name__, repr(float(value)))
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.item())
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(attr_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, attr_key(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


def attrs_key(attrs) -> tuple:
    """A hashable key with value equality for an op's whole attribute dict."""
    return tuple(sorted((k, attr_key(v)) for k, v in attrs.items())) if attrs else ()


def op_key(opdef, inputs, attrs):
    """The hash-consing key of applying ``opdef`` to ``inputs`` with ``attrs``."""
    ids = tuple(map(id, inputs))
    if not attrs:
        return opdef, ids
    return opdef, ids, attrs_key(attrs)


def find_twins(program) -> dict:
    """``{op: earlier op computing the same}`` for the ops CSE removes (an analysis sweep on
    ``program``, which it does not modify). Inside a region an op may have a twin in an
    enclosing block (it then reads that one, a capture), never in a sibling block."""
    twins: dict = {}
    canonical: dict = {}       # result of a removed op -> the equal result of its twin
    _find(program.ops, collections.ChainMap({}), twins, canonical)
    return twins


def _find(ops, seen, twins, canonical) -> None:
    """Recursion over nesting depth only: each nested block sees ``seen`` through a new layer
    that is dropped when the block ends."""
    canon = canonical.get
    for op in ops:
        opdef = op.opdef
        if op.blocks:
            if rewrites_inside(op):
                for block in op.blocks:
                    _find(block.ops, seen.new_child(), twins, canonical)
            continue
        if opdef.feedable:
            continue
        inputs = [canon(v, v) for v in op.inputs] if canonical else op.inputs
        key = op_key(opdef, inputs, op.attrs)
        twin = seen.get(key)
        if twin is None:
            seen[key] = op
            continue
        twins[op] = twin
        for old, new in zip(op.results, twin.results):
            canonical[old] = new


def cse(program, fetches, options):
    """``program`` with each distinct computation once (the input itself when none repeats)."""
    twins = find_twins(program)
    if not twins:
        return program, list(fetches), {"cse_merged": 0}
    builder = Rebuilder(program)
    value_map = builder.value_map

    def rebuild(ops):
        for op in ops:
            twin = twins.get(op)
            if twin is None:
                if rewrites_inside(op):
                    builder.copy_region(op, lambda index, block: rebuild(block.ops))
                else:
                    builder.copy(op)
                continue
            for old, kept in zip(op.results, twin.results):
                new = value_map[kept]
                value_map[old] = new
                if new.name is None and old.name is not None:
                    new.name = old.name

    rebuild(program.ops)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"cse_merged": len(twins)}
