"""The reverse sweep: seed the outputs, call each live op's VJP in reverse program order and
sum cotangents; then :func:`sweep_unused` keeps only the backward ops that feed a needed
gradient (a VJP returns gradients for all its inputs, some of which nobody needs).

Every op built here records the forward op it differentiates (``Program.backward_of``): a
VJP's ops record the op whose VJP built them; seeds, cotangent sums and zeros record the op
that produced the Value they belong to (:func:`producer`).
"""
from __future__ import annotations

import contextlib

from ..errors import GradError
from ..ir.graph import walk_defined, walk_ops
from ..ir.printer import format_op_head
from ..ir.value import Value
from ..ops.core import evaluate_vjp
from ..ops.elementwise import add, multiply, ones_like
from ..ops.shape import zeros_for
from ..ops.source import full
from .context import calling_vjp


def producer(value):
    """The op ``value`` comes from, for provenance: the op that produced it, or for a block
    argument (which has no producing op) the region op that owns the block."""
    if value.op is not None:
        return value.op
    return value.arg_of.parent_op if value.arg_of is not None else None


def shapes_match(shape, expected) -> bool:
    """Same rank, and equal dims wherever both are known."""
    return len(shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected))


def sweep_unused(block, start, first_id, keep, session=None):
    """Remove the ops appended to ``block`` since position ``start`` (their results numbered
    from ``first_id`` on) that do not feed any Value in ``keep``, and renumber what was made
    since so that numbering stays dense: the kept ops' Values (nested blocks included), then
    the new Values of the new forward ops that took the place of loops to record their
    residuals (``session.merged``, :mod:`symgrad.autodiff.merge`), whose old ops the kept ops
    then name as their forward op no more. Linear in the appended ops and the merged ones."""
    program = block.program
    appended = block.ops[start:]
    marked = set()
    stack = [v.op for v in keep if v.id >= first_id and v.op is not None]
    while stack:
        op = stack.pop()
        if op in marked:
            continue
        marked.add(op)
        stack.extend(u.op for u in op.inputs
                     if u.id >= first_id and u.op is not None and u.op not in marked)
    kept = [op for op in appended if op in marked]
    if len(kept) != len(appended):
        block.ops[start:] = kept
        program.forget_cached_constants(first_id)
    renumbered = set()
    next_id = first_id
    for value in walk_defined(kept):
        value.id = next_id
        next_id += 1
        renumbered.add(value)
    if session is None:
        program._next_id = next_id
        return
    if session.replaced:
        for op in walk_ops(kept):
            if op.forward_op is not None:
                op.forward_op = session.current(op.forward_op)
    swept = set(appended).difference(kept)
    for value in walk_defined([op for op in session.merged if op not in swept]):
        if value.id >= first_id and value not in renumbered:
            value.id = next_id
            next_id += 1
            renumbered.add(value)
    program._next_id = next_id


def filled_like(value, fill):
    """A Value shaped like ``value`` (its run-time shape if a dim is unknown) holding ``fill``."""
    if None not in value.shape:
        return full(value.shape, fill, value.dtype)
    ones = ones_like(value)
    return ones if fill == 1 else multiply(ones, fill)


class Backward:
    """Cotangents of one grad call. ``live`` is the set of Values that receive one;
    ``targets`` those whose own cotangents are wanted. A result of an op marked
    ``passes_cotangents`` (the reshape, and concatenation, laying out the ``y``s of a scan cut
    into segments from the segment loops' stacks, :func:`~symgrad.ops.control_flow.scan`) that
    is not a target passes each cotangent on through the op's VJP as it comes, to be summed on
    the op's inputs: the loops' backward also reads those stacks (as residuals), so each
    number's cotangent is one sum, as without segments, and the derivatives of every order
    are those of ``checkpoint=None`` bit for bit. The cotangents of an op's results go to its
    twin's (``policy.twins``, :class:`~symgrad.autodiff.reach.Twins`)."""

    def __init__(self, program, policy, live, targets=()):
        self.program = program
        self.policy = policy
        self.twins = policy.twins
        self.live = live
        self.targets = set(targets)
        self.cotangent: dict = {}

    def accumulate(self, value, contribution):
        """Add ``contribution`` to the cotangent of ``value`` (of its twin's Value, if it has
        one), or pass it on to its op's inputs if that op is marked ``passes_cotangents`` and
        ``value`` is not a target."""
        value = self.twins.value(value)
        op = value.op
        if op is not None and op.passes_cotangents and value not in self.targets:
            cotangents = [None] * len(op.results)
            cotangents[value.index] = contribution
            wanted = [u in self.live for u in op.inputs]
            grads, _ = self._call_vjp(op, cotangents, wanted)
            for u, g, w in zip(op.inputs, grads, wanted):
                if w and g is not None:
                    self.accumulate(u, g)
            return
        current = self.cotangent.get(value)
        self.cotangent[value] = contribution if current is None else \
            self._sum(value, current, contribution)

    def get(self, value):
        """The cotangent summed for ``value`` (on its twin's Value, if it has one)."""
        return self.cotangent.get(self.twins.value(value))

    def seed(self, outputs, seeds, loss_scale):
        """Seed every live output with the sum of its seeds (``None``: ones; a number: that
        number everywhere; a Value), times ``loss_scale``. Duplicated outputs sum their seeds."""
        grouped: dict = {}
        for y, s in zip(outputs, seeds):
            if y in self.live:
                grouped.setdefault(y, []).append(s)
        for y, group in grouped.items():
            constant = sum(1 if s is None else s for s in group if not isinstance(s, Value))
            given = [s for s in group if isinstance(s, Value)]
            with self.program.backward_of(producer(y)):
                if not given:
                    seed = filled_like(y, constant * loss_scale)
                else:
                    seed = given[0]
                    for s in given[1:]:
                        seed = add(seed, s)
                    if constant:
                        seed = add(seed, constant)
                    if loss_scale != 1:
                        seed = multiply(seed, loss_scale)
            self.accumulate(y, seed)

    def run(self, ops):
        """Differentiate ``ops`` (live ops in program order, an op's twin in its place,
        :func:`~symgrad.autodiff.reach.search`), last to first: the cotangents of the results
        of an op with a twin were summed on the twin's (:meth:`accumulate`), in the order they
        came, as if the twin's results were read in their place."""
        for op in reversed(ops):
            cotangents = self._cotangents(op.results)
            if all(c is None for c in cotangents):
                continue
            wanted = [u in self.live for u in op.inputs]
            grads, continued = self._call_vjp(op, cotangents, wanted)
            for index in continued:     # sums the VJP continued: first, the others add to them
                self.cotangent[self.twins.value(op.inputs[index])] = grads[index]
            for index, (u, g, w) in enumerate(zip(op.inputs, grads, wanted)):
                if w and g is not None and index not in continued:
                    self.accumulate(u, g)

    def _cotangents(self, results) -> list:
        through = self.policy.through_block
        return [self.cotangent.get(r) if through(r) is None else None for r in results]

    def _sum(self, value, a, b):
        with self.program.backward_of(producer(value)):
            return add(a, b)

    def _call_vjp(self, op, cotangents, wanted):
        """The VJP's gradients, checked against the types of the inputs that need one, and
        the positions whose gradient continues the input's running sum
        (:mod:`symgrad.autodiff.context`). Ops it builds for gradients nobody needs are left
        for the final :func:`sweep_unused`."""
        # only region ops' VJPs read which inputs are wanted and their sums (autodiff.context)
        if op.blocks:
            known = calling_vjp(wanted, [self.get(u) if w else None
                                         for u, w in zip(op.inputs, wanted)])
        else:
            known = contextlib.nullcontext(frozenset())
        with self.program.backward_of(op), known as continued:
            grads = evaluate_vjp(op, cotangents, wanted)
        if len(grads) != len(op.inputs):
            raise GradError(f"the VJP of `{format_op_head(op)}` returned {len(grads)} "
                            f"gradients for {len(op.inputs)} inputs")
        for index, (u, g, w) in enumerate(zip(op.inputs, grads, wanted)):
            if not w or g is None:
                continue
            if not isinstance(g, Value) or g.dtype != u.dtype or not (
                    g.shape == u.shape or shapes_match(g.shape, u.shape)):
                got = g.type_str if isinstance(g, Value) else type(g).__name__
                raise GradError(f"the VJP of `{format_op_head(op)}` returned {got} as the "
                                f"gradient of input {index}, which is {u.type_str}")
        return grads, continued

    def zeros(self, value):
        """Zeros shaped like ``value``, recorded as backward of its producer."""
        with self.program.backward_of(producer(value)):
            return zeros_for(value)
