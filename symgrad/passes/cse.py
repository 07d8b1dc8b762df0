"""Common-subexpression elimination by hash-consing on ``(op, inputs, attrs)``.

Two ops are the same when they apply the same OpDef to the same (already deduplicated)
inputs with equal attributes. Array attributes compare by value when small
(:data:`SMALL_ARRAY`) and by identity otherwise; floats compare by their exact repr (so
``0.0`` and ``-0.0`` stay apart). Feedable sources (data, parameters) and ops owning blocks
are never merged. One forward sweep, linear in program size.
"""
from __future__ import annotations

import numpy as np

from .rewrite import Rebuilder

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


def op_key(opdef, inputs, attrs):
    return (id(opdef), tuple(id(v) for v in inputs),
            tuple(sorted((k, attr_key(v)) for k, v in attrs.items())))


def cse(program, fetches, options):
    """Copy of ``program`` in which each distinct computation appears once."""
    builder = Rebuilder(program)
    seen: dict = {}
    merged = 0
    for op in program.ops:
        inputs = builder.inputs_of(op)
        if op.opdef.feedable or op.blocks:
            builder.copy(op, inputs)
            continue
        key = op_key(op.opdef, inputs, op.attrs)
        twin = seen.get(key)
        if twin is None:
            seen[key] = builder.copy(op, inputs)
            continue
        merged += 1
        for old, new in zip(op.results, twin.results):
            builder.alias(old, new)
            if new.name is None and old.name is not None:
                new.name = old.name
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"cse_merged": merged}
