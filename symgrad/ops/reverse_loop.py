"""The ``reverse_loop`` region op: the backward of a loop checkpointed by a run-time schedule
(``checkpoint=("binomial", s)``, or ``k``/``"sqrt"`` when the trip count is known only at run
time; :mod:`symgrad.ops.checkpoint`).

It reverses the ``T`` steps of a loop, last to first, keeping only the carries that the schedule
:func:`~symgrad.ops.checkpoint._sg_reverse_plan` stores (at most ``s`` for ``("binomial", s)``):

- inputs: the loop's initial carries (``num_carry``), its per-step inputs ``xs`` (``num_xs``),
  the cotangents of its final carries followed by the running sums the steps add to (one per
  captured Value wanting a gradient; ``num_ct`` in all), the cotangents of its stacked outputs
  (``num_yct``, stacks of ``T`` slices), the trip count ``T`` as an int scalar when it is
  known neither at build time (attr ``length``) nor from the ``xs`` (:func:`trip_input`),
  then the captures;
- block ``advance``: arguments the carries and one slice of each ``xs``; yields the next
  carries (the loop's body without its per-step outputs);
- block ``reverse``: arguments the cotangents, the running sums, one slice of each stacked
  cotangent, the carries at the step and its slices of ``xs``; yields the cotangents and sums
  before the step, then the cotangents of the step's ``xs`` slices (the body recomputed from the
  carries and differentiated);
- results: the cotangents of the initial carries, the sums, then the ``xs`` cotangents stacked
  along a new axis 0.

Step ``i`` (in the order the loop ran them) reads slice ``i`` of each stack, ``T - 1 - i``
when ``reverse``. Each step is reversed once, last to first, so sums accumulate in the order
of a reverse scan that stored every step: the results are the same bit for bit. Its VJP
(:mod:`symgrad.autodiff.regions`) differentiates those two scans, the one stacking the carries
and the reverse one.
"""
from __future__ import annotations

import numpy as np

from .checkpoint import ADVANCE, RESTORE, REVERSE, STORE, _sg_reverse_plan, plan_slots
from .core import REGION, OpDef, Region, register

__all__ = ["reverse_loop_p", "reverse_loop_counts", "trip_input"]

_COUNTS = ("num_carry", "num_xs", "num_ct", "num_yct")


def reverse_loop_counts(attrs) -> list[int]:
    """``[carries, xs, cotangents and sums, stacked cotangents]``: how many of each input."""
    return [attrs[name] for name in _COUNTS]


def trip_input(attrs) -> bool:
    """Does a reverse_loop with ``attrs`` take its trip count as an input?"""
    return attrs["length"] is None and attrs["num_xs"] == 0


def _explicit(attrs) -> int:
    return sum(reverse_loop_counts(attrs)) + trip_input(attrs)


def _rule(types, attrs, blocks):
    _, reverse = blocks
    carries, xs, cts, _ = reverse_loop_counts(attrs)
    out = [(tuple(s), np.dtype(d)) for s, d in types[carries + xs:carries + xs + cts]]
    if trip_input(attrs):
        trip_shape, trip_dtype = types[_explicit(attrs) - 1]
        if tuple(trip_shape) != () or np.dtype(trip_dtype).kind not in "iu":
            raise TypeError("reverse_loop: the trip count must be an int scalar")
    length = attrs["length"] if not xs else types[carries][0][0]
    return out + [((length,) + v.shape, v.dtype) for v in reverse.yields[cts:]]


def _dims(input_dims, attrs, shapes, blocks):
    _, reverse = blocks
    carries, xs, cts, _ = reverse_loop_counts(attrs)
    length = attrs["length"] if not xs else input_dims[carries][0]
    out = [tuple(d) for d in input_dims[carries + xs:carries + xs + cts]]
    return out + [(length,) + v.dims for v in reverse.yields[cts:]]


def _run(op, args, run_block):
    advance, reverse = op.blocks
    parts, position = [], 0
    for count in reverse_loop_counts(op.attrs):
        parts.append(list(args[position:position + count]))
        position += count
    carry, xs, sums, y_cts = parts
    cts = len(sums)
    steps = op.attrs["length"] if op.attrs["length"] is not None else \
        len(xs[0]) if xs else int(args[position])
    stacks = [None] * (len(reverse.yields) - cts)
    slots = {}
    last = steps - 1
    for action, a, b in _sg_reverse_plan(steps, *op.attrs["plan"]):
        if action == ADVANCE:
            for i in range(a, b):
                t = last - i if op.attrs["reverse"] else i
                carry = run_block(advance, carry + [x[t] for x in xs])
        elif action == STORE:
            slots[a] = carry
        elif action == RESTORE:
            carry = slots[a]
        elif action == REVERSE:
            t = last - a if op.attrs["reverse"] else a
            out = run_block(reverse, sums + [y[t] for y in y_cts] + carry + [x[t] for x in xs])
            sums = out[:cts]
            for index, item in enumerate(out[cts:]):
                if stacks[index] is None:
                    stacks[index] = np.empty((steps,) + np.shape(item), np.asarray(item).dtype)
                stacks[index][t] = item
    for index, value in enumerate(reverse.yields[cts:]):
        if stacks[index] is None:    # no step ran
            stacks[index] = np.empty((0,) + tuple(d or 0 for d in value.shape), value.dtype)
    return sums + stacks


def _held(op, nbytes, sizes) -> int:
    """The bytes of the carries the schedule stores at most at once."""
    attrs = op.attrs
    carries, xs, _, _ = reverse_loop_counts(attrs)
    if attrs["length"] is not None:
        steps = attrs["length"]
    elif xs:
        (steps,) = sizes(op.inputs[carries].dims[:1])
    else:
        raise ValueError(f"the trip count of reverse_loop %{op.results[0].id} is known only "
                         f"at run time")
    return plan_slots(steps, *attrs["plan"]) * sum(nbytes(a) for a in op.blocks[0].args[:carries])


def _repeats(op) -> list:
    """The reverse block runs once per step; the advance block from 2 steps on (1 step is
    reversed from the initial carries)."""
    steps = op.attrs["length"] or 0
    return [k for k, least in enumerate((2, 1)) if steps >= least]


reverse_loop_p = register(OpDef(
    "reverse_loop", REGION, infer=_rule, impl=None, dims=_dims,
    region=Region(("advance", "reverse"), _explicit, _run, held=_held, repeats=_repeats),
    doc="Reverses a loop's steps last to first from its initial carries, recomputing them "
        "by a checkpointing schedule (the backward of ``checkpoint=('binomial', s)``)."))
