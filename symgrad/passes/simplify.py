"""Algebraic simplification and constant folding, in one forward sweep.

Rules (each an entry of :data:`_RULES`, applied to every op after its inputs were simplified,
so chains collapse in the same sweep):

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
* shape sources: an input read only for its shape (``size``, ``broadcast_like``'s reference)
  reads the earliest Value certainly of that run-time shape;
* broadcast elimination: an elementwise op reads the source of a broadcast input directly,
  or the 0-d Value under a chain of data movement (``expand_dims(broadcast_like(s))``, as in
  the gradient of ``mean``), when its result type stays the same (NumPy broadcasting does the
  rest); an elementwise op of a broadcast 0-d Value and other 0-d Values runs on the scalars
  and is broadcast after (``broadcast_like(s) * 0.3`` -> ``broadcast_like(s * 0.3)``), so the
  next consumer can drop that broadcast.

Which rule may apply to which op is declared on the op itself: its category and its
:class:`~symgrad.ops.core.Algebra` (identity elements, negation, involution, no-op and chain
facts, fills, shape-only inputs), never its name, so user-defined ops take part too. Each op
is offered only the rules that can apply to its OpDef (chosen once per OpDef), and what is
known about a Value holding one value everywhere is remembered, so the sweep costs a few
dictionary lookups per op (the walks through data movement and elementwise producers are
bounded). Ops that the rewrites leave unused are dropped (the result holds only what the
fetches depend on), so a following DCE finds nothing to do.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops.core import ELEMENTWISE, REGISTRY, SOURCE, get_op
from .rewrite import Rebuilder, rewrites_inside

FOLD_LIMIT = 1024       # largest constant (elements) that folding reads or produces


def constant_value(value):
    """The array of a non-feedable source Value (constant, full...) of at most
    :data:`FOLD_LIMIT` elements, or None."""
    op = value.op
    if op is None:
        return None
    opdef = op.opdef
    if opdef.category != SOURCE or opdef.feedable:
        return None
    size = value.size
    if size is None or size > FOLD_LIMIT:
        return None
    return np.asarray(opdef.impl(**op.attrs), dtype=value.dtype)


def _may_be_uniform(opdef) -> bool:
    """Can ops of ``opdef`` hold one value everywhere (where :func:`uniform_fill` looks)?"""
    return opdef.algebra.fill is not None or opdef.algebra.keeps_fill


def uniform_fill(value):
    """The single value every element of ``value`` holds, when statically known, else None."""
    for _ in range(64):  # bounded walk through data movement
        op = value.op
        if op is None:      # a block argument
            return None
        algebra = op.opdef.algebra
        if algebra.fill is not None:
            return algebra.fill(op)
        if algebra.keeps_fill and op.inputs:
            value = op.inputs[0]
            continue
        return None
    return None


def _negation_op():
    """The OpDef that declares it computes ``-x`` (``negative``)."""
    return next(opdef for opdef in REGISTRY.values() if opdef.algebra.negates)


def _same_type(a, b):
    return a.shape == b.shape and a.dtype == b.dtype


class _Sweep:
    """State of one simplify sweep: the rebuilder and the memo of :func:`uniform_fill`."""

    def __init__(self, builder):
        self.builder = builder
        self.fills: dict = {}

    def fill(self, value):
        """:func:`uniform_fill` of a new Value, computed once per Value."""
        if value.op is None or not _may_be_uniform(value.op.opdef):
            return None
        fills = self.fills
        if value in fills:
            return fills[value]
        fill = fills[value] = uniform_fill(value)
        return fill


def _operand_beside_fill(sweep, op, inputs, fact):
    """For a binary op whose algebraic ``fact`` is ``(fill, positions)``: the other operand
    when one at those positions holds ``fill`` everywhere and the other already has the
    result's type; else None."""
    if len(inputs) != 2:
        return None
    wanted, positions = fact
    for position in positions:
        other = inputs[1 - position]
        fill = sweep.fill(inputs[position])
        if fill is not None and _same_fill(fill, wanted) and _same_type(other, op.results[0]):
            return other
    return None


def _same_fill(fill, wanted) -> bool:
    """``fill == wanted``, a float zero of the same sign only (``-0.0 + x`` is ``x`` for every
    float ``x``, ``0.0 + x`` is not at ``x = -0.0``); an integer zero is every zero."""
    if fill != wanted:
        return False
    if fill == 0 and isinstance(fill, float) and isinstance(wanted, float):
        return math.copysign(1.0, fill) == math.copysign(1.0, wanted)
    return True


def _try_identity(sweep, op, inputs):
    return _operand_beside_fill(sweep, op, inputs, op.opdef.algebra.identity)


def _try_negation(sweep, op, inputs):
    other = _operand_beside_fill(sweep, op, inputs, op.opdef.algebra.negation)
    if other is None:
        return None
    result = op.results[0]
    if other.op is not None and other.op.opdef.algebra.negates:           # -(-x)
        return other.op.inputs[0] if _same_type(other.op.inputs[0], result) else None
    return sweep.builder.emit(_negation_op(), [other], {}, like=result)


def _try_involution(sweep, op, inputs):
    producer = inputs[0].op
    if producer is not None and producer.opdef is op.opdef:
        inner = producer.inputs[0]
        if _same_type(inner, op.results[0]):
            return inner
    return None


def _try_no_op(sweep, op, inputs):
    algebra = op.opdef.algebra
    if algebra.no_op_when_same_type and _same_type(inputs[0], op.results[0]):
        return inputs[0]
    attr = algebra.permutation
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


def _cannot_stretch(other, shape) -> bool:
    """Is ``other`` (an operand of an elementwise op whose result has ``shape``) statically 1,
    or absent, at every unknown dim of ``shape``, so that it cannot stretch a size-1 dim?"""
    offset = len(shape) - other.ndim
    return all(d is not None or k < offset or other.shape[k - offset] == 1
               for k, d in enumerate(shape))


def _shape_source(value):
    """The earliest Value certainly of ``value``'s run-time shape along a chain of elementwise
    producers: an operand with the result's static shape whose unknown dims no other operand
    can stretch (``tanh(x)`` and ``x * x`` have ``x``'s shape, ``x + b`` too for ``b`` of
    static shape)."""
    for _ in range(64):   # bounded walk
        op = value.op
        if op is None or op.opdef.category != ELEMENTWISE:
            return value
        shape = value.shape
        for operand in op.inputs:
            if operand.shape == shape and all(
                    other is operand or _cannot_stretch(other, shape) for other in op.inputs):
                value = operand
                break
        else:
            return value
    return value


def _try_shape_source(sweep, op, inputs):
    """Inputs read only for their shape (``size(x)``, ``broadcast_like(g, ref)``) read the
    earliest Value of that shape instead (:func:`_shape_source`), so that a fused loop need
    not export an array for its shape alone."""
    changed = list(inputs)
    for position in op.opdef.algebra.shape_only:
        if position < len(inputs):     # an optional input (a random op's run-time shape)
            changed[position] = _shape_source(inputs[position])
    if all(new is old for new, old in zip(changed, inputs)):
        return None
    return _rebind(sweep.builder, op, changed, op.attrs)


def _try_chain(sweep, op, inputs):
    producer = inputs[0].op
    if producer is None or producer.opdef is not op.opdef:
        return None
    algebra = op.opdef.algebra
    if algebra.collapses:
        return _rebind(sweep.builder, op, [producer.inputs[0]] + inputs[1:], op.attrs)
    attr = algebra.permutation
    if attr is not None:
        inner, outer = producer.attrs[attr], op.attrs[attr]
        composed = tuple(int(inner[a]) for a in outer)
        if composed == tuple(range(len(composed))):
            source = producer.inputs[0]
            return source if _same_type(source, op.results[0]) else None
        return _rebind(sweep.builder, op, [producer.inputs[0]],
                       dict(op.attrs, **{attr: composed}))
    return None


def _try_fold(sweep, op, inputs):
    """Fold an op whose inputs are all small constants; True when folded."""
    for value in inputs:        # cheap test first: every input is made by a non-feedable source
        if value.op is None:
            return None
        opdef = value.op.opdef
        if opdef.category != SOURCE or opdef.feedable:
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
        sweep.builder.emit(constant_p, [], {"value": array}, like=old)
    return True


def _uniform_result(sweep, opdef, inputs, attrs, dtype):
    """The 0-d array of ``dtype`` that ``opdef`` gives on ``inputs`` when each of them holds
    one known value everywhere, else None."""
    fills = []
    for value in inputs:
        fill = sweep.fill(value)
        if fill is None:
            return None
        fills.append(fill)
    try:
        with np.errstate(all="ignore"):
            scalar = opdef.impl(*[np.asarray(f, dtype=v.dtype) for f, v in zip(fills, inputs)],
                                **attrs)
        scalar = np.array(scalar, dtype=dtype)
    except Exception:  # the op fails on these values: leave it for run time
        return None
    if scalar.ndim:
        return None
    scalar.flags.writeable = False
    return scalar


def _try_uniform(sweep, op, inputs):
    result = op.results[0]
    if None in result.shape:
        return None
    scalar = _uniform_result(sweep, op.opdef, inputs, op.attrs, result.dtype)
    if scalar is None:
        return None
    builder = sweep.builder
    if not result.shape:
        return builder.emit(get_op("constant"), [], {"value": scalar}, like=result)
    value = builder.emit(get_op("constant"), [], {"value": scalar})
    return builder.emit(get_op("broadcast_to"), [value], {"shape": result.shape}, like=result)


def _scalar_under(value):
    """The 0-d Value at the bottom of a chain of data movement making ``value`` (so every
    element of ``value`` equals it), or None."""
    op = value.op
    for _ in range(64):   # bounded walk through data movement
        if op is None or not op.opdef.algebra.keeps_fill or not op.inputs:
            return None
        value = op.inputs[0]
        if value.ndim == 0:
            return value
        op = value.op
    return None


def _direct_source(value):
    """What an elementwise consumer may read instead of ``value`` (NumPy broadcasting doing
    the rest), or None: the 0-d Value under a chain of data movement, or the input of a
    broadcast."""
    scalar = _scalar_under(value)
    if scalar is not None:
        return scalar
    op = value.op
    return op.inputs[0] if op is not None and op.opdef.algebra.broadcast else None


def _moved(inputs) -> bool:
    """Is one of ``inputs`` made by data movement (the cheap test before the walks)?"""
    return any(v.op is not None and v.op.opdef.algebra.keeps_fill for v in inputs)


def _try_drop_broadcast(sweep, op, inputs):
    if not _moved(inputs):
        return None
    sources = [_direct_source(v) for v in inputs]
    if all(source is None for source in sources):
        return None
    changed = [v if source is None else source for v, source in zip(inputs, sources)]
    return _rebind(sweep.builder, op, changed, op.attrs)


def _try_sink_broadcast(sweep, op, inputs):
    """``f(spread(a), b)`` with ``a``, ``b`` 0-d and ``spread`` data movement (the only input
    that is not 0-d): ``broadcast_like(f(a, b), spread(a))``. The math runs once, on scalars,
    and the next elementwise consumer reads the scalar directly (:func:`_try_drop_broadcast`),
    so ``sum``'s gradient seed times constants no longer ties a loop to the summed value."""
    if not _moved(inputs):
        return None
    result = op.results[0]
    spread = [v for v in inputs if v.ndim]
    if len(spread) != 1 or spread[0].shape != result.shape:
        return None
    scalar = _scalar_under(spread[0])
    if scalar is None:
        return None
    scalars = [scalar if v.ndim else v for v in inputs]
    try:
        types = op.opdef.infer_types([(v.shape, v.dtype) for v in scalars], op.attrs)
    except (ValueError, TypeError):
        return None
    if types != [((), result.dtype)]:
        return None
    builder = sweep.builder
    known = _uniform_result(sweep, op.opdef, scalars, op.attrs, result.dtype)
    if known is not None:
        value = builder.emit(get_op("constant"), [], {"value": known})
    else:
        forward_op = builder.op_map.get(op.forward_op, op.forward_op)
        value = builder.emit(op.opdef, scalars, op.attrs, forward_op=forward_op)
    return builder.emit(get_op("broadcast_like"), [value, spread[0]], {}, like=result)


# rules for one-result ops, in the order they are tried, each with the test on the OpDef (its
# category and :class:`~symgrad.ops.core.Algebra`) that tells whether it can apply at all
_RULES = (
    (_try_shape_source, lambda d: bool(d.algebra.shape_only)),
    (_try_identity, lambda d: d.algebra.identity is not None),
    (_try_involution, lambda d: d.algebra.involution),
    (_try_no_op, lambda d: d.algebra.no_op_when_same_type or d.algebra.permutation is not None),
    (_try_uniform, lambda d: d.category == ELEMENTWISE),
    (_try_negation, lambda d: d.algebra.negation is not None),
    (_try_chain, lambda d: d.algebra.collapses or d.algebra.permutation is not None),
    (_try_drop_broadcast, lambda d: d.category == ELEMENTWISE),
    (_try_sink_broadcast, lambda d: d.category == ELEMENTWISE),
)


_RULES_BY_OPDEF: dict = {}


def _rules_for(opdef):
    """The rules of :data:`_RULES` that can apply to ops of ``opdef`` (a tuple, cached)."""
    rules = _RULES_BY_OPDEF.get(opdef)
    if rules is None:
        rules = tuple(rule for rule, applies in _RULES if applies(opdef))
        _RULES_BY_OPDEF[opdef] = rules
    return rules


def simplify(program, fetches, options):
    """Copy of ``program`` with the rules of the module docstring applied (inside regions
    too: a rule only ever reads Values its op can see)."""
    builder = Rebuilder(program)
    sweep = _Sweep(builder)
    rewritten = _simplify_ops(sweep, program.ops)
    before = len(builder.program.ops)
    new, new_fetches = builder.finish(fetches, drop_dead=True)
    return new, new_fetches, {"simplified": rewritten, "pruned_ops": before - len(new.ops)}


def _simplify_ops(sweep, ops) -> int:
    """Append the simplified ``ops`` (one block's) to the builder's insertion block; returns
    how many were rewritten. Recursion is over nesting depth only."""
    builder = sweep.builder
    value_map = builder.value_map
    copy = builder.copy
    rewritten = 0
    for op in ops:
        if rewrites_inside(op):
            counts = []
            builder.copy_region(op, lambda index, block: counts.append(
                _simplify_ops(sweep, block.ops)))
            rewritten += sum(counts)
            continue
        if not op.inputs or op.blocks:
            copy(op)
            continue
        inputs = [value_map[v] for v in op.inputs]
        if op.opdef.category != SOURCE and _try_fold(sweep, op, inputs):
            rewritten += 1
            continue
        replacement = None
        if len(op.results) == 1:
            for rule in _RULES_BY_OPDEF.get(op.opdef) or _rules_for(op.opdef):
                replacement = rule(sweep, op, inputs)
                if replacement is not None:
                    break
        if replacement is None:
            copy(op, inputs)
            continue
        rewritten += 1
        result = op.results[0]
        value_map[result] = replacement
        if replacement.name is None and result.name is not None \
                and (replacement.op is None or replacement.op.opdef.category != SOURCE):
            replacement.name = result.name
    return rewritten
