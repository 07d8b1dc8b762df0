"""Algebraic simplification and constant folding, in one forward sweep.

Rules (each a table entry, applied to every op after its inputs were simplified, so chains
collapse in the same sweep):

* identity elements: ``x*1``, ``1*x``, ``x+0``, ``0+x``, ``x-0``, ``x/1``, ``x**1`` -> ``x``
  when the result has ``x``'s exact type (so no broadcast or cast is lost). "1" and "0" are any
  Value known to hold one value everywhere: a constant, ``full``, ``ones_like``/``zeros_like``,
  or data movement of such a Value. This also removes seeds of ones (``ones_like(y) * g``);
* involutions: ``-(-x)`` -> ``x``; negations: ``x * -1``, ``-1 * x``, ``x / -1`` -> ``-x``;
* collapsing chains: ``reshape(reshape(x))`` and ``broadcast_to(broadcast_to(x))`` keep only
  the outer op; ``transpose(transpose(x))`` composes the permutations;
* no-ops: a reshape/broadcast/cast/squeeze whose result has its input's type, an identity
  transpose;
* constant folding: an op whose inputs are all constants of at most :data:`FOLD_LIMIT`
  elements (and whose result is that small) becomes a constant computed by its reference;
  an elementwise op whose inputs each hold one value everywhere becomes a broadcast scalar;
* broadcast elimination: an elementwise op reads the source of a broadcast input directly
  when its result type stays the same (NumPy broadcasting does the rest).
"""
from __future__ import annotations

import numpy as np

from ..ops.core import ELEMENTWISE, SOURCE, get_op
from .rewrite import Rebuilder

FOLD_LIMIT = 1024       # largest constant (elements) that folding reads or produces
UNIFORM_CHECK_LIMIT = 1 << 16

# op name -> (identity element, operand positions that may hold it)
IDENTITY_ELEMENTS = {
    "add": (0, (0, 1)),
    "subtract": (0, (1,)),
    "multiply": (1, (0, 1)),
    "divide": (1, (1,)),
    "power": (1, (1,)),
}
INVOLUTIONS = ("negative",)
# op name -> (value that makes it a negation, operand positions that may hold it): x*-1, x/-1
NEGATIONS = {"multiply": (-1, (0, 1)), "divide": (-1, (1,))}
NEGATE = "negative"
COLLAPSING_CHAINS = ("reshape", "broadcast_to")
NO_OP_WHEN_SAME_TYPE = ("reshape", "reshape_like", "broadcast_to", "broadcast_like", "cast",
                        "squeeze", "expand_dims")
PERMUTATIONS = {"transpose": "axes"}
# broadcasts an elementwise consumer can drop (it broadcasts by itself)
BROADCASTS = ("broadcast_to", "broadcast_like")        # op name -> attr holding the permutation
# ops whose result holds one value everywhere: op name -> fill value (from the op)
FILLS = {
    "full": lambda op: op.attrs["fill_value"],
    "ones_like": lambda op: 1,
    "zeros_like": lambda op: 0,
}
# data movement that keeps "one value everywhere" of its first input
UNIFORM_PRESERVING = ("reshape", "reshape_like", "broadcast_to", "broadcast_like", "transpose",
                      "expand_dims", "squeeze")


def constant_value(value):
    """The array of a non-feedable source Value (constant, full...), or None."""
    op = value.op
    if op.opdef.category != SOURCE or op.opdef.feedable:
        return None
    if op.name == "constant":
        return op.attrs["value"]
    size = value.size
    if size is None or size > FOLD_LIMIT:
        return None
    return np.asarray(op.opdef.impl(**op.attrs), dtype=value.dtype)


def uniform_fill(value):
    """The single value every element of ``value`` holds, when statically known, else None."""
    for _ in range(64):  # bounded walk through data movement
        op = value.op
        fill = FILLS.get(op.name)
        if fill is not None:
            return fill(op)
        if op.name == "constant":
            array = op.attrs["value"]
            if array.size == 0 or array.size > UNIFORM_CHECK_LIMIT:
                return None
            first = array.flat[0]
            return first.item() if np.all(array == first) else None
        if op.name in UNIFORM_PRESERVING and op.inputs:
            value = op.inputs[0]
            continue
        return None
    return None


def _same_type(a, b):
    return a.shape == b.shape and a.dtype == b.dtype


def _try_identity(op, inputs):
    rule = IDENTITY_ELEMENTS.get(op.name)
    if rule is None or len(inputs) != 2:
        return None
    neutral, positions = rule
    result = op.results[0]
    for position in positions:
        other = inputs[1 - position]
        fill = uniform_fill(inputs[position])
        if fill is not None and fill == neutral and _same_type(other, result):
            return other
    return None


def _try_negation(builder, op, inputs):
    rule = NEGATIONS.get(op.name)
    if rule is None or len(inputs) != 2:
        return None
    minus_one, positions = rule
    result = op.results[0]
    for position in positions:
        other = inputs[1 - position]
        if uniform_fill(inputs[position]) == minus_one and _same_type(other, result):
            if other.op.name == NEGATE:           # -(-x)
                return other.op.inputs[0] if _same_type(other.op.inputs[0], result) else None
            return builder.emit(get_op(NEGATE), [other], {}, like=result)
    return None


def _try_involution(op, inputs):
    if op.name in INVOLUTIONS and inputs[0].op.opdef is op.opdef:
        inner = inputs[0].op.inputs[0]
        if _same_type(inner, op.results[0]):
            return inner
    return None


def _try_no_op(op, inputs):
    if op.name in NO_OP_WHEN_SAME_TYPE and _same_type(inputs[0], op.results[0]):
        return inputs[0]
    attr = PERMUTATIONS.get(op.name)
    if attr is not None and tuple(op.attrs[attr]) == tuple(range(len(op.attrs[attr]))):
        return inputs[0]
    return None


def _rebind(builder, op, inputs, attrs):
    """Re-emit ``op`` on new inputs/attrs when that gives exactly the old result type."""
    try:
        types = op.opdef.infer_types([(v.shape, v.dtype) for v in inputs], attrs)
    except (ValueError, TypeError):
        return None
    old = op.results[0]
    if types != [(old.shape, old.dtype)]:
        return None
    return builder.emit(op.opdef, inputs, attrs, like=old)


def _try_chain(builder, op, inputs):
    producer = inputs[0].op
    if producer.opdef is not op.opdef or len(op.results) != 1:
        return None
    if op.name in COLLAPSING_CHAINS:
        return _rebind(builder, op, [producer.inputs[0]] + inputs[1:], op.attrs)
    attr = PERMUTATIONS.get(op.name)
    if attr is not None:
        inner, outer = producer.attrs[attr], op.attrs[attr]
        composed = tuple(int(inner[a]) for a in outer)
        if composed == tuple(range(len(composed))):
            source = producer.inputs[0]
            return source if _same_type(source, op.results[0]) else None
        return _rebind(builder, op, [producer.inputs[0]], dict(op.attrs, **{attr: composed}))
    return None


def _try_fold(builder, op, inputs):
    if op.opdef.category == SOURCE or op.blocks or not inputs:
        return None
    arrays = []
    for value in inputs:
        array = constant_value(value)
        if array is None or array.size > FOLD_LIMIT:
            return None
        arrays.append(array)
    if any(r.size is None or r.size > FOLD_LIMIT for r in op.results):
        return None
    try:
        with np.errstate(all="ignore"):
            result = op.opdef.impl(*arrays, **op.attrs)
    except Exception:  # the op fails on these values: leave it for run time
        return None
    results = result if isinstance(result, tuple) else (result,)
    constant_p = get_op("constant")
    for old, array in zip(op.results, results):
        array = np.array(array, dtype=old.dtype, order="C")
        array.flags.writeable = False
        builder.emit(constant_p, [], {"value": array}, like=old)
    return True


def _try_uniform(builder, op, inputs):
    result = op.results[0]
    if op.opdef.category != ELEMENTWISE or None in result.shape or not inputs:
        return None
    fills = [uniform_fill(v) for v in inputs]
    if any(f is None for f in fills):
        return None
    try:
        with np.errstate(all="ignore"):
            scalar = op.opdef.impl(*[np.asarray(f, dtype=v.dtype) for f, v in
                                     zip(fills, inputs)], **op.attrs)
        scalar = np.array(scalar, dtype=result.dtype)
    except Exception:  # the op fails on these values: leave it for run time
        return None
    if scalar.ndim:
        return None
    scalar.flags.writeable = False
    if not result.shape:
        return builder.emit(get_op("constant"), [], {"value": scalar}, like=result)
    value = builder.emit(get_op("constant"), [], {"value": scalar})
    return builder.emit(get_op("broadcast_to"), [value], {"shape": result.shape}, like=result)


def _try_drop_broadcast(builder, op, inputs):
    if op.opdef.category != ELEMENTWISE:
        return None
    changed = [v.op.inputs[0] if v.op.name in BROADCASTS else v for v in inputs]
    if all(a is b for a, b in zip(changed, inputs)):
        return None
    return _rebind(builder, op, changed, op.attrs)


def simplify(program, fetches, options):
    """Copy of ``program`` with the rules of the module docstring applied."""
    builder = Rebuilder(program)
    rewritten = 0
    for op in program.ops:
        inputs = builder.inputs_of(op)
        if inputs and not op.blocks:
            if _try_fold(builder, op, inputs):
                rewritten += 1
                continue
            replacement = None
            if len(op.results) == 1:
                for rule in (_try_identity, _try_involution, _try_no_op):
                    replacement = rule(op, inputs)
                    if replacement is not None:
                        break
                else:
                    for rule in (_try_uniform, _try_negation, _try_chain, _try_drop_broadcast):
                        replacement = rule(builder, op, inputs)
                        if replacement is not None:
                            break
            if replacement is not None:
                rewritten += 1
                builder.alias(op.results[0], replacement)
                if replacement.name is None and op.results[0].name is not None \
                        and replacement.op.opdef.category != SOURCE:
                    replacement.name = op.results[0].name
                continue
        builder.copy(op, inputs)
    new, new_fetches = builder.finish(fetches)
    return new, new_fetches, {"simplified": rewritten}
