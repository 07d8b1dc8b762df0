"""Batching rules: how one op of a function under ``vmap`` becomes one op over the batch.

An op declares its rule with its VJP, as ``OpDef(..., batch=rule)``; elementwise ops share the
category's rule (:func:`elementwise_batch`, used for every ``ELEMENTWISE`` op without a rule of
its own, user ops included, since their category promises NumPy broadcasting). Contract::

    rule(op, inputs, axes) -> (results, result_axes) | NotImplemented

``op`` is the per-example operation (its ``attrs``, its inputs' and results' per-example
types); ``inputs`` one Value per input of ``op``; ``axes`` one entry per input: ``0`` when the
input carries the batch as its leading axis, ``None`` when every example shares it (the vmap
transform, :mod:`symgrad.autodiff.vmap`, moves every batch axis to the front before it calls a
rule). The rule builds ops and returns one Value per result of ``op`` with its batch axis
(``0``, or ``None`` for a result every example shares). ``NotImplemented`` says the rule does
not cover this case (an operand it cannot batch, a batch size known only at run time): the
transform then batches the op by a loop, a ``scan`` over the batch axis, which is correct for
every op. A rule whose op draws random numbers is marked :func:`per_example`: it runs even when
no input is batched, so that each example draws its own numbers, and takes a fourth argument,
the static batch size (None when it is known only at run time).

This module imports only :mod:`symgrad.ops.core` (op files import it to declare rules); the
ops its helpers build are looked up by name when a rule runs.
"""
from __future__ import annotations

from .core import ELEMENTWISE, DEFAULT_BATCH, bind, get_op

__all__ = ["elementwise_batch", "axis_batch", "fold_batch", "per_example", "batch_size",
           "all_batched", "with_rank", "move_to_front", "shifted_axis"]


# --- helpers rules build with -------------------------------------------------------------------
def batch_size(inputs, axes):
    """The static batch size (the leading dim of a batched input), or None when it is known
    only at run time."""
    for value, axis in zip(inputs, axes):
        if axis is not None:
            size = value.shape[0]
            if size is not None:
                return size
    return None


def with_rank(value, ndim):
    """A batched ``value`` with size-1 axes inserted after the batch axis up to per-example
    rank ``ndim``, so that it broadcasts like the per-example value did."""
    missing = ndim - (value.ndim - 1)
    if missing <= 0:
        return value
    return bind(get_op("expand_dims"), [value], {"axis": tuple(range(1, missing + 1))})


def move_to_front(value, axis):
    """``value`` with its axis ``axis`` moved to the front (a transpose; none when it is
    there already)."""
    axis %= value.ndim
    if axis == 0:
        return value
    order = (axis,) + tuple(a for a in range(value.ndim) if a != axis)
    return bind(get_op("transpose"), [value], {"axes": order})


def all_batched(inputs, axes):
    """Every input batched: shared inputs are broadcast to the batch (a new leading axis),
    which needs a static batch size and shape; None when they are not known."""
    size = batch_size(inputs, axes)
    out = []
    for value, axis in zip(inputs, axes):
        if axis is None:
            if size is None or None in value.shape:
                return None
            value = bind(get_op("broadcast_to"), [value], {"shape": (size,) + value.shape})
        out.append(value)
    return out


def shifted_axis(axis):
    """A per-example ``axis`` attr (an int, a tuple of them, or None) for the batched value:
    non-negative axes move up by one, negative ones count from the end and stay."""
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return tuple(shifted_axis(a) for a in axis)
    return axis + 1 if axis >= 0 else axis


def _results(out, axis=0):
    results = list(out) if isinstance(out, tuple) else [out]
    return results, [axis] * len(results)


# --- generic rules ------------------------------------------------------------------------------
def elementwise_batch(op, inputs, axes):
    """Every ``ELEMENTWISE`` op: batched inputs get size-1 axes after the batch axis up to
    the per-example rank of the result, so NumPy broadcasting pairs elements as it did per
    example; shared inputs broadcast against the batch unchanged."""
    ndim = max(len(v.shape) for v in op.results)
    aligned = [v if a is None else with_rank(v, ndim) for v, a in zip(inputs, axes)]
    return _results(bind(op.opdef, aligned, op.attrs))


DEFAULT_BATCH[ELEMENTWISE] = elementwise_batch


def axis_batch(*attrs, shared_ok=False, shared_result=False):
    """The rule of an op that works along the axes its attrs ``attrs`` name (reductions,
    softmax, cumulative sums, concatenate...): the batch axis goes in front and each
    non-negative axis moves up by one. Its inputs must all be batched (shared ones are
    broadcast to the batch), unless ``shared_ok``: then only the batched first input moves
    and the others are read as they are. ``shared_result``: the results are the same for
    every example (``size``)."""
    def rule(op, inputs, axes):
        if shared_ok:
            if axes[0] is None or any(a is not None for a in axes[1:]):
                return NotImplemented
            values = list(inputs)
        else:
            values = all_batched(inputs, axes)
            if values is None:
                return NotImplemented
        new_attrs = dict(op.attrs)
        for name in attrs:
            new_attrs[name] = shifted_axis(new_attrs[name])
        return _results(bind(op.opdef, values, new_attrs), None if shared_result else 0)
    return rule


def fold_batch(*carriers):
    """The rule of an op whose inputs at positions ``carriers`` and whose results all lead
    with the same axis of examples (N of an NCHW convolution or pooling): the batch is folded
    into that axis (``B*N``), the op runs once, and the results are unfolded. Needs static
    shapes and the other inputs shared."""
    def rule(op, inputs, axes):
        if any((a is None) == (i in carriers) for i, a in enumerate(axes)):
            return NotImplemented
        size = batch_size(inputs, axes)
        if size is None or any(None in v.shape for v in inputs) or \
                any(None in v.shape for v in op.results):
            return NotImplemented
        reshape = get_op("reshape")
        folded = [bind(reshape, [v], {"shape": (-1,) + tuple(v.shape[2:])}) if i in carriers
                  else v for i, v in enumerate(inputs)]
        out = bind(op.opdef, folded, op.attrs)
        results = list(out) if isinstance(out, tuple) else [out]
        return ([bind(reshape, [r], {"shape": (size,) + tuple(e.shape)})
                 for r, e in zip(results, op.results)], [0] * len(results))
    return rule


def per_example(rule):
    """Mark ``rule(op, inputs, axes, size)`` as one to run even when no input is batched
    (random draws: every example draws its own numbers); ``size`` is the static batch size or
    None."""
    rule.per_example = True
    return rule
