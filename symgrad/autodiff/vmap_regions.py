"""The batching rules of the region ops ``cond``, ``scan``, ``while_loop`` (``fori_loop``
builds one of these two) and ``reverse_loop`` (the backward of a checkpointed loop), registered on their OpDefs at the bottom of this module like the
region VJPs of :mod:`symgrad.autodiff.regions` (``show_registry`` lists them).

Each rule batches the op's blocks once, with :func:`symgrad.autodiff.vmap.batch_ops` (every
op inside rewritten by its own rule), and builds one region op over the batch: the program
gains one region op per region op, whatever the batch size. The rules take the static batch
size and run even when no input is batched (:func:`~symgrad.ops.batching.per_example`), so
that random ops inside draw their own numbers per example.

Which block Values depend on the examples is found first, by a linear walk over the block's
ops (:func:`_batched_yields`): an op's results are batched when an input is, and the results
of a random op (or of a region holding one) always are. A loop carry whose next value is
batched is batched from the start (its initial value broadcast along the batch), found by
iterating that walk to a fixpoint (at most one round per carry).

``cond``, shared predicate
    one ``cond`` on the same predicate; its branches are the batched branches, and a result
    batched in either branch is batched in both.
``cond``, batched predicate
    both branches are inlined, each computed for every example, and each result is
    ``where(pred, then, else)`` per example (JAX's ``select``).
``scan``
    one ``scan`` whose body is the batched body: batched carries carry the batch in front;
    a batched ``xs`` is scanned along its step axis with the batch second (``[T, B, ...]``,
    a transpose), and a batched per-step output comes back as ``[T, B, ...]`` and is
    transposed to ``[B, T, ...]``.
``while_loop``, shared predicate
    one ``while_loop`` over the batched body, as ``scan``.
``while_loop``, batched predicate
    every loop var is batched; the loop runs while ``any(pred)``, and its body computes
    ``pred`` per example again and keeps the vars of an example whose ``pred`` is false
    (``where(pred, next, vars)``): finished examples are frozen. ``grad`` of such a loop
    works; a loop that records per-step values or its trip count for a ``grad`` taken
    inside ``vmap`` would need a trip count per example, and is a ``ValueError``.
``reverse_loop``
    one ``reverse_loop`` whose ``advance`` and ``reverse`` blocks are batched, as ``scan``'s
    body: batched carries, cotangents and running sums carry the batch in front (each found
    by the fixpoint over its own block); batched ``xs`` and stacked cotangents are read along
    their step axis with the batch second, and the stacked ``xs`` cotangents come back as
    ``[T, B, ...]`` and are transposed. Every example follows the one schedule, since the
    trip count is shared.

A case a rule does not cover (a batched run-time length, a broadcast that needs a batch size
known only at run time) returns ``NotImplemented``: the op is batched by the loop fallback.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import walk_blocks
from ..ir.program import Block, current_block, insertion_point
from ..ops.batching import batch_size, per_example, with_rank
from ..ops.control_flow import cond_p, loop_layout, scan_p, while_p
from ..ops.core import batch_rule, bind, bind_region
from ..ops.reverse_loop import reverse_loop_counts, reverse_loop_p, trip_input
from ..ops.elementwise import cast, greater, where
from ..ops.reduction import max as reduce_max
from .vmap import batch_ops

__all__ = ["cond_batch", "scan_batch", "while_batch", "reverse_loop_batch"]


# --- which Values depend on the examples --------------------------------------------------------
def _draws(op) -> bool:
    """Does ``op`` (or an op nested in its blocks) draw per example even with shared inputs
    (a random op, whose rule runs with no batched input)?"""
    def draws(one):
        return not one.blocks and getattr(batch_rule(one.opdef), "per_example", False)

    return draws(op) or any(draws(inner) for block in walk_blocks(op.blocks)
                            for inner in block.ops)


def _batched_yields(block, arg_flags, outer) -> list:
    """For each yield of ``block``: does it depend on the examples, when its args do as
    ``arg_flags`` say and a Value of an enclosing block does when ``outer`` maps it to a batch
    axis that is not None?"""
    batched = {arg for arg, flag in zip(block.args, arg_flags) if flag}

    def is_batched(value):
        return value in batched or outer.get(value, (None, None))[1] is not None

    for op in block.ops:
        if _draws(op) or any(is_batched(v) for v in op.inputs):
            batched.update(op.results)
    return [is_batched(v) for v in block.yields]


# --- helpers ------------------------------------------------------------------------------------
def _broadcast(value, size):
    """``value`` (shared) broadcast along a new leading batch axis of ``size``, or None when
    the size is known only at run time."""
    if size is None:
        return None
    shape = (size,) + tuple(-1 if d is None else d for d in value.shape)
    return bind("broadcast_to", [value], {"shape": shape})


def _swap_leading(value):
    """``value`` with its first two axes swapped (``[B, T, ...]`` <-> ``[T, B, ...]``)."""
    order = (1, 0) + tuple(range(2, value.ndim))
    return bind("transpose", [value], {"axes": order})


def _batched_block(block, arg_values, arg_axes, env, size, yield_flags):
    """A new block (not attached) holding ``block``'s ops batched: its args typed like
    ``arg_values`` (axes ``arg_axes``), the Values of enclosing blocks read through ``env``.
    A yield flagged in ``yield_flags`` is batched (broadcast if it came out shared). Returns
    ``(block, yield axes)``, or None when a broadcast needs an unknown batch size."""
    program = block.program
    new = Block(program, outer=current_block(program))
    inner = dict(env)
    for old, value, axis in zip(block.args, arg_values, arg_axes):
        inner[old] = (new.add_arg(value.dims, value.dtype), axis)
    with insertion_point(new):
        batch_ops(block.ops, inner, size)
        yields, axes = _yielded(block.yields, inner, size, yield_flags)
    if yields is None:
        return None
    new.yields = yields
    return new, axes


def _yielded(values, env, size, flags):
    """``values`` read through ``env``, each flagged one batched (broadcast when shared);
    ``(None, None)`` when a broadcast needs an unknown size."""
    out, axes = [], []
    for value, flag in zip(values, flags):
        value, axis = env.get(value, (value, None))
        if flag and axis is None:
            value, axis = _broadcast(value, size), 0
            if value is None:
                return None, None
        out.append(value)
        axes.append(axis)
    return out, axes


def _outer_env(op, inputs, axes) -> dict:
    return dict(zip(op.inputs, zip(inputs, axes)))


def _as_batched(values, axes, flags, size):
    """Each value whose flag is set batched (broadcast when shared); None when a broadcast
    needs an unknown batch size."""
    out = []
    for value, axis, flag in zip(values, axes, flags):
        if flag and axis is None:
            value = _broadcast(value, size)
            if value is None:
                return None
        out.append(value)
    return out


def _carry_flags(body, carry_flags, other_flags, env) -> list:
    """Loop carries that depend on the examples: those that start batched, and those the body
    makes batched (iterated to a fixpoint)."""
    flags = list(carry_flags)
    while True:
        given = _batched_yields(body, flags + list(other_flags), env)
        grown = [f or g for f, g in zip(flags, given)]
        if grown == flags:
            return flags
        flags = grown


def _swap_batched(values, axes):
    """Each batched stack with its first two axes swapped (``[B, T, ...]`` <-> ``[T, B,
    ...]``); shared ones as they are."""
    return [v if a is None else _swap_leading(v) for v, a in zip(values, axes)]


def _unstack(results, axes):
    """Per-step outputs stacked as ``[T, B, ...]`` back to ``[B, T, ...]``."""
    return _swap_batched(results, axes), [None if axis is None else 0 for axis in axes]


# --- cond ---------------------------------------------------------------------------------------
@per_example
def cond_batch(op, inputs, axes, size):
    """``cond`` over a batch (see the module docstring)."""
    size = size if size is not None else batch_size(inputs, axes)
    if all(a is None for a in axes) and not _draws(op):
        return NotImplemented
    count = op.attrs["num_operands"]
    env = _outer_env(op, inputs, axes)
    then_block, else_block = op.blocks
    operands, operand_axes = inputs[1:1 + count], axes[1:1 + count]
    if axes[0] is not None:
        return _select_branches(op, inputs[0], operands, operand_axes, env, size)
    flags = [a is not None for a in operand_axes]
    out_flags = [t or e for t, e in zip(_batched_yields(then_block, flags, env),
                                        _batched_yields(else_block, flags, env))]
    branches = [_batched_block(block, operands, operand_axes, env, size, out_flags)
                for block in op.blocks]
    if None in branches:
        return NotImplemented
    new = bind_region(cond_p, [inputs[0], *operands], dict(op.attrs),
                      [block for block, _ in branches], op.block.program)
    return list(new.results), [0 if f else None for f in out_flags]


def _select_branches(op, pred, operands, operand_axes, env, size):
    """Both branches computed for every example, each result selected by ``pred`` [B]."""
    results = []
    for block in op.blocks:
        inner = dict(env)
        for old, value, axis in zip(block.args, operands, operand_axes):
            inner[old] = (value, axis)
        batch_ops(block.ops, inner, size)
        results.append([inner.get(v, (v, None)) for v in block.yields])
    out = []
    for (then_value, _), (else_value, _), result in zip(*results, op.results):
        out.append(where(with_rank(pred, result.ndim), then_value, else_value))
    return out, [0] * len(out)


# --- scan ---------------------------------------------------------------------------------------
@per_example
def scan_batch(op, inputs, axes, size):
    """``scan`` over a batch (see the module docstring)."""
    size = size if size is not None else batch_size(inputs, axes)
    if all(a is None for a in axes) and not _draws(op):
        return NotImplemented
    layout = loop_layout(op)
    carries, count = layout.num_carry, layout.num_xs
    if layout.has_length_input and axes[carries + count] is not None:
        return NotImplemented
    env = _outer_env(op, inputs, axes)
    x_axes = axes[carries:carries + count]
    flags = _carry_flags(layout.body, [a is not None for a in axes[:carries]],
                         [a is not None for a in x_axes], env)
    inits = _as_batched(inputs[:carries], axes[:carries], flags, size)
    if inits is None:
        return NotImplemented
    xs = inputs[carries:carries + count]
    body = _batched_block(layout.body, inits + [_Slice(x, a) for x, a in zip(xs, x_axes)],
                          [0 if f else None for f in flags] + list(x_axes), env, size,
                          flags + [False] * len(layout.stacked_yields))
    if body is None:
        return NotImplemented
    block, yield_axes = body
    xs = _swap_batched(xs, x_axes)
    explicit = inits + xs + ([inputs[carries + count]] if layout.has_length_input else [])
    new = bind_region(scan_p, explicit, dict(op.attrs), [block], op.block.program)
    finals = list(new.results[:carries])
    stacked, stacked_axes = _unstack(new.results[carries:], yield_axes[carries:])
    return finals + stacked, [0 if f else None for f in flags] + stacked_axes


class _Slice:
    """The type of one step's slice of ``xs`` (what a scan body's argument takes); a batched
    ``xs`` (batch axis ``axis`` = 0) is scanned with its batch second, so its slice keeps the
    batch in front."""

    def __init__(self, xs, axis):
        self.dims = xs.dims[1:] if axis is None else xs.dims[:1] + xs.dims[2:]
        self.dtype = xs.dtype


# --- while_loop ---------------------------------------------------------------------------------
@per_example
def while_batch(op, inputs, axes, size):
    """``while_loop`` over a batch (see the module docstring)."""
    size = size if size is not None else batch_size(inputs, axes)
    if all(a is None for a in axes) and not _draws(op):
        return NotImplemented
    layout = loop_layout(op)
    count = layout.num_carry
    cond_block, body = op.blocks
    env = _outer_env(op, inputs, axes)
    flags = [a is not None for a in axes[:count]]
    while True:
        flags = _carry_flags(body, flags, [], env)
        if not _batched_yields(cond_block, flags, env)[0]:
            break
        if all(flags):
            return _frozen_while(op, layout, inputs, axes, env, size)
        flags = [True] * count
    inits = _as_batched(inputs[:count], axes[:count], flags, size)
    if inits is None:
        return NotImplemented
    var_axes = [0 if f else None for f in flags]
    pred_block = _batched_block(cond_block, inits, var_axes, env, size, [False])
    new_body = _batched_block(body, inits, var_axes, env, size,
                              flags + [False] * len(layout.stacked_yields))
    if pred_block is None or new_body is None or pred_block[1][0] is not None:
        return NotImplemented
    new = bind_region(while_p, inits, dict(op.attrs), [pred_block[0], new_body[0]],
                      op.block.program)
    results = list(new.results)
    stacked_count = len(layout.stacked_yields)
    stacked, stacked_axes = _unstack(results[count:count + stacked_count],
                                     new_body[1][count:])
    trips = results[count + stacked_count:]
    return (results[:count] + stacked + trips,
            var_axes + stacked_axes + [None] * len(trips))


def _frozen_while(op, layout, inputs, axes, env, size):
    """A ``while_loop`` whose predicate differs between examples: every var batched, the loop
    running while any example's predicate holds and freezing the others."""
    if layout.stacked_yields or layout.counted:
        raise ValueError(
            "vmap: a while_loop whose predicate differs between examples runs a different "
            "number of steps per example, so it cannot record per-step values for a grad "
            "taken inside vmap: take grad outside vmap, or give the loop a trip count every "
            "example shares (fori_loop with shared bounds, or scan)")
    count = layout.num_carry
    inits = _as_batched(inputs[:count], axes[:count], [True] * count, size)
    if inits is None:
        return NotImplemented
    cond_block, body = op.blocks
    program = op.block.program

    def read(block, args):
        """``block`` batched into the insertion block on the vars ``args``: its yields and
        their batch axes."""
        inner = dict(env)
        for old, arg in zip(block.args, args):
            inner[old] = (arg, 0)
        batch_ops(block.ops, inner, size)
        return [inner.get(v, (v, None)) for v in block.yields]

    test = Block(program, outer=current_block(program))
    test_args = [test.add_arg(v.dims, v.dtype) for v in inits]
    with insertion_point(test):
        (pred, axis), = read(cond_block, test_args)
        if axis is not None:
            pred = greater(reduce_max(cast(pred, "int32")), np.int32(0))
        test.yields = [pred]
    step = Block(program, outer=current_block(program))
    step_args = [step.add_arg(v.dims, v.dtype) for v in inits]
    with insertion_point(step):
        (pred, axis), = read(cond_block, step_args)
        nexts = read(body, step_args)
        step.yields = [where(pred if axis is None else with_rank(pred, arg.ndim - 1), new, arg)
                       for (new, _), arg in zip(nexts, step_args)]
    new = bind_region(while_p, inits, dict(op.attrs), [test, step], program)
    return list(new.results), [0] * count


# --- reverse_loop -------------------------------------------------------------------------------
@per_example
def reverse_loop_batch(op, inputs, axes, size):
    """``reverse_loop`` over a batch (see the module docstring)."""
    size = size if size is not None else batch_size(inputs, axes)
    if all(a is None for a in axes) and not _draws(op):
        return NotImplemented
    counts = reverse_loop_counts(op.attrs)
    starts = [sum(counts[:k]) for k in range(len(counts) + 1)]
    carry_in, x_in, ct_in, y_in = (list(inputs[a:b]) for a, b in zip(starts, starts[1:]))
    carry_axes, x_axes, ct_axes, y_axes = (list(axes[a:b]) for a, b in zip(starts, starts[1:]))
    if trip_input(op.attrs) and axes[starts[-1]] is not None:
        return NotImplemented
    env = _outer_env(op, inputs, axes)
    advance, reverse = op.blocks
    x_flags = [a is not None for a in x_axes]
    y_flags = [a is not None for a in y_axes]
    carry_flags = _carry_flags(advance, [a is not None for a in carry_axes], x_flags, env)
    ct_flags = _carry_flags(reverse, [a is not None for a in ct_axes],
                            y_flags + carry_flags + x_flags, env)
    inits = _as_batched(carry_in, carry_axes, carry_flags, size)
    cts = _as_batched(ct_in, ct_axes, ct_flags, size)
    if inits is None or cts is None:
        return NotImplemented
    carry_arg_axes = [0 if f else None for f in carry_flags]
    x_slices = [_Slice(x, a) for x, a in zip(x_in, x_axes)]
    stepped = _batched_block(advance, inits + x_slices, carry_arg_axes + x_axes, env, size,
                             carry_flags)
    reversed_ = _batched_block(
        reverse, cts + [_Slice(y, a) for y, a in zip(y_in, y_axes)] + inits + x_slices,
        [0 if f else None for f in ct_flags] + y_axes + carry_arg_axes + x_axes, env, size,
        ct_flags + [False] * (len(reverse.yields) - len(cts)))
    if stepped is None or reversed_ is None:
        return NotImplemented
    block, yield_axes = reversed_
    explicit = inits + _swap_batched(x_in, x_axes) + cts + _swap_batched(y_in, y_axes) \
        + list(inputs[starts[-1]:starts[-1] + trip_input(op.attrs)])
    new = bind_region(reverse_loop_p, explicit, dict(op.attrs), [stepped[0], block],
                      op.block.program)
    sums = list(new.results[:len(cts)])
    stacked, stacked_axes = _unstack(new.results[len(cts):], yield_axes[len(cts):])
    return sums + stacked, [0 if f else None for f in ct_flags] + stacked_axes


# --- registration (like the region VJPs in regions.py) -------------------------------------------
cond_p.batch = cond_batch
scan_p.batch = scan_batch
while_p.batch = while_batch
reverse_loop_p.batch = reverse_loop_batch
