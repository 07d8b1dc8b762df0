"""Fusion partition: group ops that a backend can run as one loop (or one kernel).

The pass returns a program in which every fused group of two or more ops is ONE op of the
internal region OpDef :data:`~symgrad.ops.fused.FUSION`. That op owns a block holding the
group's ops (printed indented under it); its inputs are the group's external inputs (its
*captures*, which the inner ops read directly) and the block yields the group's values used
outside it or fetched, which are the op's results; each result keeps the id and name of the
inner Value it yields. ``op.attrs["group"]`` is the group number. Every block is partitioned
on its own, the bodies of loops and branches included (a group never spans blocks).

Rules (dispatching only on ``OpDef.category`` and ``OpDef.reduction``):

* a group has an *iteration shape*; ELEMENTWISE ops whose result has that shape join the group
  of any producer in it (their other inputs may broadcast): the *map* phase;
* a REDUCTION with a :class:`~symgrad.ops.core.Reduction` joins the group of its input as the group's reduction,
  which ends the map phase; ELEMENTWISE ops that read only the reduced result (and values from
  outside) may follow it, on the reduced shape: the *epilogue*. A group has one reduction, and
  nothing in it reads a map value after the reduction, so a reduction's result is never
  broadcast back into its own group. An ELEMENTWISE op of the iteration shape that reads no
  epilogue value still joins the map phase of a group that has its reduction (the backward
  of ``sum(f(x))`` fetched with the loss runs in the loop that sums), and the group's ops are
  ordered map phase first;
* an op joins (and several producer groups merge into) a group when it stays convex (no path
  leaves it and re-enters): no capture the join adds may depend on the group, which a search
  bounded by :data:`CONVEXITY_BUDGET` ops checks (past it, the join is refused);
* convex groups can still interleave so that two of them read each other; the groups on such
  a cycle of the group graph are dissolved (their ops stay unfused) before scheduling;
* groups hold at most ``options.max_group_size`` ops and :data:`MAX_GROUP_ARGS` captures;
* a cheap value (arithmetic of :data:`CHEAP_UFUNCS`) that one group computes from values
  stored anyway and only other groups read, each in its map phase, is recomputed in each of
  them instead of being stored and loaded back (:func:`recompute_cheap_values`): the forward
  group of ``tanh`` no longer writes ``1 - t * t`` for the backward, which computes it from
  ``t``, an input of the next matmul anyway;
* an elementwise op or a reduction that fuses with nothing still becomes a group of its own
  when it is statically big enough for the backend's :class:`~.options.FusionPolicy` to want
  it split between threads (:func:`worth_a_loop`): the NumPy backend runs groups as chunk
  loops on its thread pool, a single NumPy call runs on one thread. These groups are counted apart (``stats["single_op_groups"]``) from
  ``stats["fused_groups"]``.

Linear in program size (times the bounded checks, which only search from captures made after
the group's first op); groups merge small into large.
"""
from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from ..ir.operation import Operation
from ..ir.program import Block
from ..ir.value import Value
from ..ops.core import ELEMENTWISE, REDUCTION
from ..ops.fused import FUSION
from .rewrite import Rebuilder, rewrites_inside

MAX_GROUP_ARGS = 32
# elementwise ops cheaper to compute again than to store and load: what may be recomputed
CHEAP_UFUNCS = frozenset([np.add, np.subtract, np.multiply, np.negative, np.square])
RECOMPUTE_MAX_OPS = 4   # ops of one recomputed value's cone
CONVEXITY_BUDGET = 256


def split_body(op):
    """``(map_ops, reduction or None, epilogue_ops)`` of a fusion op's block."""
    map_ops, reduction, epilogue = [], None, []
    for inner in op.blocks[0].ops:
        if reduction is None and inner.opdef.category == REDUCTION:
            reduction = inner
        elif reduction is None:
            map_ops.append(inner)
        else:
            epilogue.append(inner)
    return map_ops, reduction, epilogue


def map_outputs(op) -> list[bool]:
    """Per result of fusion op ``op``: is it a map-phase value (of the iteration shape)?"""
    map_ops = set(split_body(op)[0])
    return [inner.op in map_ops for inner in op.blocks[0].yields]


# --- partition ---------------------------------------------------------------------------------
class _Group:
    __slots__ = ("members", "phase", "shape", "reduced_shape", "min_pos", "captures")

    def __init__(self, op, pos, phase, shape, reduced_shape=None):
        self.members = [op]
        self.phase = phase                  # "map" or "epilogue"
        self.shape = shape                  # iteration shape
        self.reduced_shape = reduced_shape  # shape of the epilogue (after the reduction)
        self.min_pos = pos
        self.captures = set(op.inputs)      # exactly the external input Values


def _fusible(op) -> bool:
    if op.blocks or len(op.results) != 1:
        return False
    category = op.opdef.category
    if category == ELEMENTWISE:
        return bool(op.inputs)
    return category == REDUCTION and op.opdef.reduction is not None and len(op.inputs) == 1


def worth_a_loop(op, options) -> bool:
    """Should ``op``, fused with nothing, run as a group of its own? Yes for a fusible op whose
    static size has at least the policy's ``alone_min_elements``, with a leading dim other
    than 1 (the rows a loop splits). A size known only at run time is not enough: for small
    arrays the loop would only add calls."""
    least = options.policy.alone_min_elements
    if least is None or not _fusible(op):
        return False
    shape = op.inputs[0].shape if op.opdef.category == REDUCTION else op.results[0].shape
    if not shape or shape[0] == 1 or None in shape:
        return False
    return math.prod(shape) >= least


class _Partitioner:
    """Greedy partition in program order into convex groups."""

    def __init__(self, ops, options):
        self.ops = ops
        self.pos = {op: i for i, op in enumerate(self.ops)}
        self.group_of: dict = {}
        self.epilogue_ops: set = set()
        self.max_size = max(1, options.max_group_size)

    def _reaches(self, start, groups, min_pos) -> bool:
        """Does op ``start`` depend on an op of one of ``groups``? Only ops from position
        ``min_pos`` on can; past :data:`CONVEXITY_BUDGET` visited ops the answer is yes."""
        group_of, pos = self.group_of, self.pos
        stack, seen = [start], {start}
        while stack:
            op = stack.pop()
            if group_of.get(op) in groups:
                return True
            if len(seen) > CONVEXITY_BUDGET:
                return True
            for value in op.inputs:
                producer = value.op
                if producer not in seen and pos.get(producer, -1) >= min_pos:
                    seen.add(producer)
                    stack.append(producer)
        return False

    def _outside(self, groups, op) -> set:
        """External inputs of ``groups`` merged with ``op``."""
        group_of = self.group_of
        values = set(op.inputs)
        for group in groups:
            values |= group.captures
        return {v for v in values if group_of.get(v.op) not in groups}

    def _merge(self, chosen, group, op):
        """May ``op`` join ``group`` and the groups ``chosen`` before it (merging them)? The
        merged group must not exceed :data:`MAX_GROUP_ARGS` captures and must stay convex: no
        capture may depend on it. Returns None when not, else the captures to give the merged
        group: all of them when groups merge; when ``op`` joins one group, only the ones it
        adds (which are all that need the search: adding ``op`` opens no path into the
        group's older captures)."""
        group_of, pos = self.group_of, self.pos
        if not chosen:
            groups = (group,)
            captures = group.captures
            check = {v for v in op.inputs if v not in captures and group_of.get(v.op) is not group}
            if len(captures) + len(check) > MAX_GROUP_ARGS:
                return None
            min_pos = group.min_pos
        else:
            groups = (*chosen, group)
            check = self._outside(groups, op)
            if len(check) > MAX_GROUP_ARGS:
                return None
            min_pos = min(g.min_pos for g in groups)
        for value in check:
            if pos.get(value.op, -1) >= min_pos and self._reaches(value.op, groups, min_pos):
                return None
        return check

    def _joins_map_phase(self, group, op) -> bool:
        """Would elementwise ``op`` be a map op of ``group`` (iteration shape, and no epilogue
        value of the group read)?"""
        group_of, epilogue_ops = self.group_of, self.epilogue_ops
        return group.shape == op.results[0].shape and not any(
            v.op in epilogue_ops for v in op.inputs if group_of.get(v.op) is group)

    def _candidates(self, op):
        """Producer groups ``op`` may join (as a map op, the reduction or an epilogue op)."""
        group_of = self.group_of
        found = []
        for value in op.inputs:
            group = group_of.get(value.op)
            if group is None or group in found:
                continue
            if op.opdef.category == REDUCTION:
                ok = group.phase == "map" and group.shape == value.shape
            elif group.phase == "map":
                ok = group.shape == op.results[0].shape
            else:
                ok = self._joins_map_phase(group, op) or (
                    group.reduced_shape == op.results[0].shape and all(
                        v.op in self.epilogue_ops for v in op.inputs
                        if group_of.get(v.op) is group))
            if ok:
                found.append(group)
        return found

    def _may_merge(self, chosen, group, op) -> bool:
        """May elementwise ``op`` join ``group`` besides the groups ``chosen`` (merging them)?
        Only as a map op of all of them, with at most one of them past its reduction, and none
        of the others reading that one's epilogue values (which would broadcast a reduction
        back into its own group)."""
        if op.opdef.category != ELEMENTWISE:
            return False
        groups = (*chosen, group)
        reduced = [g for g in groups if g.phase == "epilogue"]
        if not reduced:
            return True
        if len(reduced) > 1 or not all(self._joins_map_phase(g, op) for g in groups):
            return False
        owner, group_of, epilogue_ops = reduced[0], self.group_of, self.epilogue_ops
        return not any(group_of.get(v.op) is owner and v.op in epilogue_ops
                       for g in groups if g is not owner for member in g.members
                       for v in member.inputs)

    def _join(self, groups, op, captures):
        """Merge ``groups`` (small into large) and add ``op``, with the ``captures`` that
        :meth:`_merge` returned; returns the merged group."""
        group_of = self.group_of
        if len(groups) == 1:
            target = groups[0]
            target.captures |= captures
        else:
            groups = sorted(groups, key=lambda g: -len(g.members))
            target = groups[0]
            for other in groups[1:]:
                for member in other.members:
                    group_of[member] = target
                target.members.extend(other.members)
                target.min_pos = min(target.min_pos, other.min_pos)
                if other.phase == "epilogue":   # the one group past its reduction
                    target.phase, target.reduced_shape = other.phase, other.reduced_shape
            target.captures = captures
        target.members.append(op)
        group_of[op] = target
        if op.opdef.category == REDUCTION:
            target.phase, target.reduced_shape = "epilogue", op.results[0].shape
            self.epilogue_ops.add(op)
        elif target.phase == "epilogue" and not self._joins_map_phase(target, op):
            self.epilogue_ops.add(op)
        return target

    def run(self) -> list:
        groups = []
        max_size = self.max_size
        for position, op in enumerate(self.ops):
            if not _fusible(op):
                continue
            candidates = self._candidates(op)
            chosen, captures, size = [], None, 1
            if len(candidates) > 1:
                candidates.sort(key=lambda g: -len(g.members))
            for group in candidates:
                if chosen and not self._may_merge(chosen, group, op):
                    continue
                if size + len(group.members) > max_size:
                    continue
                merged = self._merge(chosen, group, op)
                if merged is not None:
                    chosen.append(group)
                    captures = merged
                    size += len(group.members)
            if chosen:
                self._join(chosen, op, captures)
                continue
            if op.opdef.category == REDUCTION:
                group = _Group(op, position, "epilogue", op.inputs[0].shape, op.results[0].shape)
                self.epilogue_ops.add(op)
            else:
                group = _Group(op, position, "map", op.results[0].shape)
            self.group_of[op] = group
            groups.append(group)
        unique = {id(g): g for g in self.group_of.values()}
        return [g for g in groups if id(g) in unique]


def partition(program, options) -> list[list[Operation]]:
    """The fused groups of ``program``'s global block: lists of two or more ops, each in
    program order."""
    return _partition_and_schedule(program.ops, options)[0]


def _partition_and_schedule(ops, options):
    """``(groups, units in schedule order, the epilogue ops)``. Convex groups can still
    depend on each other both ways when they interleave; the groups on such a cycle of the
    group graph are dissolved (their ops stay unfused), which leaves it acyclic."""
    partitioner = _Partitioner(ops, options)
    pos, epilogue_ops = partitioner.pos, partitioner.epilogue_ops
    groups = []
    for group in partitioner.run():   # map ops, then the reduction and the epilogue
        if len(group.members) >= 2:
            groups.append(sorted(group.members, key=lambda op: (op in epilogue_ops, pos[op])))
    groups.sort(key=lambda members: min(pos[op] for op in members))
    order, unit_of, successors = _schedule(ops, groups, pos)
    if len(order) < len(successors):
        scheduled = {unit_of[members[0]] for members in order}
        cyclic = _on_cycles(set(range(len(successors))) - scheduled, successors)
        # units 0 .. len(groups)-1 are the groups, in order
        groups = [members for i, members in enumerate(groups) if i not in cyclic]
        order, unit_of, successors = _schedule(ops, groups, pos)
        if len(order) < len(successors):  # dissolving the cycles' groups leaves none
            raise AssertionError("fusion produced a cyclic schedule")
    return groups, order, epilogue_ops


# --- recomputing cheap values in their readers' groups -----------------------------------------
def _cheap(op) -> bool:
    return op.opdef.category == ELEMENTWISE and op.opdef.ufunc in CHEAP_UFUNCS


def _is_scalar(value) -> bool:
    return None not in value.shape and math.prod(value.shape) == 1


def recompute_cheap_values(order, epilogue_ops, kept, max_size) -> list:
    """``order`` (units in schedule order: lists of ops, groups of two or more) with cheap
    values recomputed where they are read. A value ``v`` of group G is recomputed in group H
    when: every reader of ``v`` outside G is a map op of a group (of ``v``'s shape), ``v`` is
    not in ``kept`` (fetched or yielded), and ``v`` comes from a *cone* of at most
    :data:`RECOMPUTE_MAX_OPS` cheap map ops of G whose other inputs are stored anyway (made
    outside G, or read by an op outside every group, or kept); and H then reads at most one
    array more than it did (a scalar is an inlined constant) and holds at most ``max_size``
    ops. The cone's ops are added to H (the same Operations, first: emitting H copies them
    into its block), and the ops of G that no longer have a reader are dropped from it.
    Linear in the block's ops."""
    plan = _Recomputation(order, epilogue_ops, kept, max_size)
    for group, members in enumerate(order):
        if len(members) > 1:
            for op in members:
                cone = plan.cone(op, group)
                if cone is not None:
                    plan.place(op.results[0], cone, group)
    if not any(plan.added):
        return order
    return _drop_unread([list(extra) + members for members, extra in zip(order, plan.added)],
                        kept)


class _Recomputation:
    """The tables :func:`recompute_cheap_values` decides with, and what it decided."""

    def __init__(self, order, epilogue_ops, kept, max_size):
        self.epilogue_ops, self.kept, self.max_size = epilogue_ops, kept, max_size
        self.sizes = [len(members) for members in order]
        self.unit_of, self.rank, self.readers = {}, {}, {}
        for index, members in enumerate(order):
            for position, op in enumerate(members):
                self.unit_of[op], self.rank[op] = index, position
                for value in op.inputs:
                    self.readers.setdefault(value, []).append(op)
        self.in_group = {op for members in order if len(members) > 1 for op in members}
        self.reads = [_reads(members) if len(members) > 1 else set() for members in order]
        self.always_stored: dict = {}   # value made in a group -> stored whatever is decided
        self.cones: dict = {}           # value -> the ops computing it from stored values
        self.added = [{} for _ in order]   # per unit: ops to recompute there (ordered set)

    def stored(self, value, group) -> bool:
        """Is ``value`` (read by an op of ``group``) stored whatever this pass decides?"""
        if self.unit_of.get(value.op) != group:
            return True
        answer = self.always_stored.get(value)
        if answer is None:
            answer = self.always_stored[value] = value in self.kept or any(
                r not in self.in_group for r in self.readers.get(value, ()))
        return answer

    def cone(self, op, group):
        """The ops (in group order) computing ``op``'s value from stored values, when ``op``
        is a cheap map op and they are few enough; else None."""
        if not _cheap(op) or op in self.epilogue_ops:
            return None
        cone = {op}
        for source in op.inputs:
            if not self.stored(source, group):
                inner = self.cones.get(source)
                if inner is None:
                    return None
                cone.update(inner)
        if len(cone) > RECOMPUTE_MAX_OPS:
            return None
        self.cones[op.results[0]] = cone
        return sorted(cone, key=self.rank.get)

    def place(self, value, cone, group) -> None:
        """Add ``cone`` to the units that read ``value`` (made by ``group``), when every one
        of them may recompute it."""
        unit_of, epilogue_ops = self.unit_of, self.epilogue_ops
        outside = [r for r in self.readers.get(value, ()) if unit_of[r] != group]
        if not outside or value in self.kept or any(
                r not in self.in_group or r in epilogue_ops or r.opdef.category != ELEMENTWISE
                or r.results[0].shape != value.shape for r in outside):
            return
        leaves = {v for op in cone for v in op.inputs if v.op not in cone and not _is_scalar(v)}
        targets = {unit_of[r] for r in outside}
        new = {t: [op for op in cone if op not in self.added[t]] for t in targets}
        if all(len(leaves - self.reads[t]) <= 1 and self.sizes[t] + len(new[t]) <= self.max_size
               for t in targets):
            for target in targets:
                self.added[target].update(dict.fromkeys(new[target]))
                self.reads[target] |= leaves
                self.sizes[target] += len(new[target])


def _drop_unread(order, kept) -> list:
    """``order`` without the ops of groups that nothing reads any more: not a later op of
    their group, not an op of a unit that does not compute the Value itself, not ``kept``."""
    producers = [set(members) for members in order]
    outside = set(kept)
    for members, own in zip(order, producers):
        outside.update(v for op in members for v in op.inputs if v.op not in own)
    result = []
    for members in order:
        if len(members) < 2:
            result.append(members)
            continue
        read, live = set(), []
        for op in reversed(members):
            if any(v in outside or v in read for v in op.results):
                live.append(op)
                read.update(op.inputs)
        live.reverse()
        if live:
            result.append(live)
    return result


def _reads(members) -> set:
    return {v for op in members for v in op.inputs}


# --- building the fused program ------------------------------------------------------------------
def _schedule(ops, groups, pos):
    """Units (a group or a single op) in a topological order close to the program's: the
    list of units scheduled (all of them unless the groups depend on each other in a cycle),
    the unit number of each op and each unit's successor units."""
    unit_of = {}
    units = []
    for members in groups:
        for op in members:
            unit_of[op] = len(units)
        units.append(members)
    for op in ops:
        if op not in unit_of:
            unit_of[op] = len(units)
            units.append([op])
    indegree = [0] * len(units)
    successors = [[] for _ in units]
    for index, members in enumerate(units):
        preds = {unit_of.get(v.op) for op in members for v in op.inputs}
        preds.discard(index)
        preds.discard(None)     # Values of enclosing blocks and block arguments
        indegree[index] = len(preds)
        for pred in preds:
            successors[pred].append(index)
    start = [min(pos[op] for op in members) for members in units]
    ready = [(start[index], index) for index in range(len(units)) if indegree[index] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(units[index])
        for succ in successors[index]:
            indegree[succ] -= 1
            if indegree[succ] == 0:
                heapq.heappush(ready, (start[succ], succ))
    return order, unit_of, successors


def _on_cycles(nodes, successors) -> set:
    """The nodes of ``nodes`` in a strongly connected component of two or more nodes of the
    graph ``successors`` restricted to ``nodes`` (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], set()
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(successors[root]))]
        while work:
            node, pending = work[-1]
            for succ in pending:
                if succ not in nodes:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(successors[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.update(component)
    return found


def _emit_group(builder, members, number, exported):
    """Append one fusion op computing ``members`` to the builder's insertion block; returns
    it."""
    member_set = set(members)
    captures, seen = [], set()
    for op in members:
        for value in op.inputs:
            if value.op not in member_set and value not in seen:
                seen.add(value)
                captures.append(value)
    program = builder.program
    outer = builder.block
    fusion_op = Operation(FUSION, [builder.get(v) for v in captures], {"group": number}, outer)
    block = Block(program, parent_op=fusion_op)
    fusion_op.blocks.append(block)
    builder.block = block
    try:
        builder.copy_all(members)
    finally:
        builder.block = outer
    block.yields = [builder.get(v) for v in exported]
    for index, (old, inner) in enumerate(zip(exported, block.yields)):
        result = Value(program, inner.id, inner.dims, inner.dtype, op=fusion_op, index=index,
                       name=inner.name, stop_gradient=inner.stop_gradient)
        fusion_op.results.append(result)
        builder.alias(old, result)
    outer.ops.append(fusion_op)
    return fusion_op


class _Fuser:
    """Partitions every block of a program (nested ones included) and rebuilds it."""

    def __init__(self, options, fetches):
        self.options = options
        self.fetched = set(fetches)
        self.plans: dict = {}    # id of a block's op list -> (order, alone, used outside)
        self.groups = 0          # fused groups (two ops or more)
        self.fused_ops = 0
        self.alone = 0           # single-op groups
        self.numbers = itertools.count()
        self.builder = None

    def plan(self, ops, reads_after=()):
        """``(order, alone, used_outside)`` for one block whose yields are ``reads_after``:
        its units in schedule order, the single ops that still get a loop, and the Values
        read outside their unit (or fetched, or yielded). Computed once per block."""
        plan = self.plans.get(id(ops))
        if plan is not None:
            return plan
        options = self.options
        kept = set(reads_after) | self.fetched
        _, order, epilogue_ops = _partition_and_schedule(ops, options)
        order = recompute_cheap_values(order, epilogue_ops, kept, max(1, options.max_group_size))
        alone = {members[0] for members in order
                 if len(members) == 1 and worth_a_loop(members[0], options)}
        used_outside = kept
        for members in order:
            own = set(members)
            used_outside.update(v for op in members for v in op.inputs if v.op not in own)
        groups = [members for members in order if len(members) > 1]
        self.groups += len(groups)
        self.fused_ops += sum(len(m) for m in groups)
        self.alone += len(alone)
        plan = self.plans[id(ops)] = (order, alone, used_outside)
        return plan

    def has_work(self, program) -> bool:
        """Plan every block (not the blocks of fused groups); does any of them form a
        group?"""
        stack = [program.global_block()]
        while stack:
            block = stack.pop()
            stack.extend(b for op in block.ops if rewrites_inside(op) for b in op.blocks)
            order, alone, _ = self.plan(block.ops, block.yields)
            if alone or any(len(members) > 1 for members in order):
                return True
        return False

    def rebuild(self, ops, reads_after=()) -> None:
        """Append the fused form of ``ops`` (one block's) to the builder's insertion block.
        Recursion is over nesting depth only."""
        builder = self.builder
        order, alone, used_outside = self.plan(ops, reads_after)
        for members in order:
            if len(members) == 1 and members[0] not in alone:
                op = members[0]
                if rewrites_inside(op):
                    builder.copy_region(op, lambda index, block: self.rebuild(block.ops,
                                                                              block.yields))
                else:
                    builder.copy(op)
                continue
            exported = [v for op in members for v in op.results if v in used_outside]
            _emit_group(builder, members, next(self.numbers), exported)


def fuse(program, fetches, options):
    """Copy of ``program`` with each fused group replaced by a fusion op (the input itself
    when nothing fuses)."""
    if not options.fusion:
        return program, list(fetches), {"fused_groups": 0, "single_op_groups": 0}
    fuser = _Fuser(options, fetches)
    if not fuser.has_work(program):
        return program, list(fetches), {"fused_groups": 0, "fused_ops": 0, "single_op_groups": 0}
    fuser.builder = Rebuilder(program)
    fuser.rebuild(program.ops)
    new, new_fetches = fuser.builder.finish(fetches)
    return new, new_fetches, {"fused_groups": fuser.groups, "fused_ops": fuser.fused_ops,
                              "single_op_groups": fuser.alone}
