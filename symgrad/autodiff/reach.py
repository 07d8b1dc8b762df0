"""Which Values a ``grad`` call differentiates (smallest-path pruning), and why an input is
left out when it is.

A cotangent flows from an output back to an input along the edges of the program. Two rules
cut those edges (the :class:`Policy`):

* a Value cannot *carry* a cotangent at all when it is listed in ``no_grad_vars`` or has an
  integer or bool dtype;
* a Value cannot pass its cotangent *through* to its producer's inputs when it has
  ``stop_gradient=True`` (gradients returned with ``create_graph=False`` are such Values) or
  its producer has no VJP rule.

The backward pass differentiates only the ops that lie on a path from some input to some
output: the *cone* (Values the outputs reach backwards, :func:`search`) intersected with what
the inputs reach forwards (:func:`live_ops`). Both walks are iterative and linear in the size of
the part of the program they visit. A region op is one node of the walk (its inputs include
its captures); the backward of a region's block walks that block alone (``within``), stopping
at the block's arguments and at the Values it captures.
"""
from __future__ import annotations

import weakref

from .. import dtypes
from ..ir.printer import value_label

class IdentityWeakSet:
    """A set of objects held weakly and compared by identity (``weakref.WeakSet`` compares
    its members with ``==``, which builds an op for Values)."""

    def __init__(self):
        self._refs: dict = {}

    def add(self, obj):
        key = id(obj)
        self._refs[key] = weakref.ref(obj, lambda _, key=key: self._refs.pop(key, None))

    def __contains__(self, obj):
        ref = self._refs.get(id(obj))
        return ref is not None and ref() is obj

    def __len__(self):
        return len(self._refs)


class Twins:
    """Which op reverse mode differentiates in place of which, in one grad call: an op whose
    results are named by another op's ``twin_of`` (:mod:`symgrad.ir.operation`: a
    checkpointed loop's backward and its store-all twin, :mod:`symgrad.autodiff.regions`) is
    differentiated as that *twin*: the cotangents of its results go to the twin's, and the
    twin's VJP runs in its place. A twin is in the block of the op it stands in for and reads
    nothing of it; each block is indexed once, when an op of it is first asked about."""

    def __init__(self):
        self._indexed: set = set()
        self._ops: dict = {}        # op -> its twin
        self._values: dict = {}     # result of such an op -> the twin's result

    def _index(self, block) -> None:
        self._indexed.add(block)
        for op in block.ops:
            if op.twin_of is not None:
                for mine, theirs in zip(op.results, op.twin_of):
                    if theirs is not None:
                        self._values[theirs] = mine
                        self._ops[theirs.op] = op

    def twin(self, op):
        """The op whose VJP differentiates ``op``: its twin, or ``op`` itself."""
        if op.block not in self._indexed:
            self._index(op.block)
        return self._ops.get(op, op)

    def value(self, value):
        """The twin's Value that receives the cotangents of ``value``, or ``value`` itself."""
        op = value.op
        if op is None:
            return value
        if op.block not in self._indexed:
            self._index(op.block)
        return self._values.get(value, value)


# Gradients returned by ``grad(..., create_graph=False)``: they carry ``stop_gradient=True``,
# and an error message tells the user when a path needed them.
FROZEN_GRADIENTS = IdentityWeakSet()

# Reasons that cut a path, in the order the diagnosis tries relaxing them one at a time.
NO_GRAD_VARS = "no_grad_vars"
FROZEN = "create_graph=False"
STOP_GRADIENT = "stop_gradient"
INTEGER = "integer"
NO_VJP = "no VJP"
REASONS = (NO_GRAD_VARS, FROZEN, STOP_GRADIENT, INTEGER, NO_VJP)
BOUNDARY = "block boundary"   # a block argument, or a capture of the block being differentiated


class Policy:
    """The edge-cutting rules of one ``grad`` call; ``no_grad`` is a set of Values; ``twins``
    the call's :class:`Twins` (which op is differentiated in place of which)."""

    def __init__(self, no_grad):
        self.no_grad = no_grad
        self.twins = Twins()

    def follow(self, copies) -> None:
        """Cut the copies too: ``copies`` maps Values to their copies (a loop's blocks copied
        for its VJP); a copy of a no-grad Value is no-grad, one of a frozen gradient frozen."""
        for old, new in copies.items():
            if old in self.no_grad:
                self.no_grad.add(new)
            if old.stop_gradient and old in FROZEN_GRADIENTS:
                FROZEN_GRADIENTS.add(new)

    def carry_block(self, value):
        """Why ``value`` can receive no cotangent at all, or None if it can."""
        if value in self.no_grad:
            return NO_GRAD_VARS
        if not dtypes.is_float(value.dtype):
            return INTEGER
        return None

    def through_block(self, value):
        """Why ``value`` (which can carry a cotangent) does not pass it on to its producer's
        inputs, or None if it does."""
        if value.stop_gradient:
            return FROZEN if value in FROZEN_GRADIENTS else STOP_GRADIENT
        if not dtypes.is_float(value.dtype):  # (only met when the diagnosis relaxes INTEGER)
            return INTEGER
        op = value.op
        if op is None:
            return BOUNDARY
        if op.opdef.vjp is None:
            return NO_VJP
        return None


def search(outputs, policy, relaxed=frozenset(), within=None):
    """Walk backwards from ``outputs``, ignoring the cuts whose reason is in ``relaxed``; with
    ``within`` (a block), Values defined outside that block are reached but not walked
    through.

    Returns ``(parent, ops)``: ``parent`` maps every reached Value to the Value whose
    producer consumed it on the walk (None for an output), in visiting order; ``ops`` is the
    set of ops whose results pass their cotangent through (an op's twin in its place,
    :class:`Twins`, the twin's inputs walked).
    """
    parent: dict = {}
    ops: set = set()
    stack = [(y, None) for y in reversed(outputs)]
    while stack:
        value, child = stack.pop()
        if value in parent:
            continue
        reason = policy.carry_block(value)
        if reason is not None and reason not in relaxed:
            continue
        parent[value] = child
        reason = policy.through_block(value)
        if reason is not None and reason not in relaxed:
            continue
        op = value.op
        if within is not None and op.block is not within:
            continue
        op = policy.twins.twin(op)
        if op in ops:
            continue
        ops.add(op)
        stack.extend((u, value) for u in op.inputs if u not in parent)
    return parent, ops


def live_ops(targets, cone, cone_ops, policy):
    """The ops of ``cone_ops`` that some target reaches forwards, in program order, and the
    set of *live* Values (targets in the cone plus results that pass a cotangent on, those of
    the op a twin stands in for among them): exactly the Values that receive a cotangent. A
    twin comes after the op it stands in for and before any op reading that op's results, so
    its VJP runs after their cotangents are summed and before those of its inputs are."""
    live = {x for x in targets if x in cone}
    order = sorted(cone_ops, key=lambda op: op.results[0].id)  # ids follow program order
    ops = []
    for op in order:
        if not any(u in live for u in op.inputs):
            continue
        ops.append(op)
        for r in op.results if op.twin_of is None else op.results + list(op.twin_of):
            if r is not None and r in cone and policy.through_block(r) is None:
                live.add(r)
    return ops, live


# --- diagnosis of an unreachable input ----------------------------------------------------------
def _blockers_on_path(value, parent, policy, reasons):
    """Values on the walk from ``value`` up to an output whose cut has a reason in ``reasons``."""
    found = []
    child = parent.get(value)
    while child is not None:
        reason = policy.carry_block(child) or policy.through_block(child)
        if reason in reasons:
            found.append(child)
        child = parent[child]
    return found


def _describe(values, limit=3):
    shown = ", ".join(f"{value_label(v)} = {v.op.name}(...)" for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")


_WHY = {
    NO_GRAD_VARS: "every path from the outputs to it passes through a Value listed in "
                  "no_grad_vars ({})",
    FROZEN: "it is reached only through gradients built with create_graph=False ({}); pass "
            "create_graph=True to the grad call that built them to differentiate through them",
    STOP_GRADIENT: "every path from the outputs to it is blocked by stop_gradient=True on {}",
    INTEGER: "every path from the outputs to it passes through integer or bool Values "
             "(comparisons, argmax/argmin, casts to integers), which carry no gradient ({})",
    NO_VJP: "every path from the outputs to it passes through ops without a VJP rule ({})",
}


def explain_unreachable(value, outputs, policy) -> str:
    """Why no cotangent reaches ``value`` from ``outputs`` under ``policy``: one sentence."""
    reason = policy.carry_block(value)
    if reason == NO_GRAD_VARS:
        return "it is listed in no_grad_vars"
    if reason == INTEGER:
        return f"it has dtype {value.dtype}; integer and bool Values carry no gradient"
    everything, _ = search(outputs, policy, relaxed=frozenset(REASONS))
    if value not in everything:
        return "no output depends on it (there is no path from it to the outputs)"
    normal, _ = search(outputs, policy)
    if value in normal:
        return "the VJP rules on every path from the outputs return no gradient for it"
    for reason in REASONS:
        parent, _ = search(outputs, policy, relaxed=frozenset([reason]))
        if value in parent:
            return _WHY[reason].format(_describe(
                _blockers_on_path(value, parent, policy, (reason,))))
    reasons = sorted({policy.carry_block(v) or policy.through_block(v)
                      for v in _blockers_on_path(value, everything, policy, REASONS)},
                     key=REASONS.index)
    return ("every path from the outputs to it is cut, by a combination of: "
            + ", ".join(reasons))
