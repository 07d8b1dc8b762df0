"""The VJPs of the region ops ``cond``, ``while_loop`` and ``scan``, registered through
:func:`~symgrad.autodiff.registry.register_vjp` like any other (``show_registry`` lists them).

Each builds new region ops whose blocks hold the backward of the forward blocks
(:func:`differentiate_block`, the same reverse sweep as ``grad``, confined to one block and
honouring the call's ``no_grad_vars``/``stop_gradient`` policy), so the gradient is itself
differentiable and every order works.

``scan`` and ``while_loop``: a *reverse scan*. Its carries are the cotangents of the float
carries, one accumulator per captured Value that needs a gradient, and the shifted carry values
described below; it scans over the cotangents of the stacked outputs and over the *residuals*:
the forward Values the backward body reads. A residual that is a slice of an ``xs`` reads the
original ``xs``, and one made from such slices by data movement alone (an inner scan's ``xs``
cut into segments) is made again from them; one the forward already stacks (a ``y``) reads that
stack, and one that a ``y`` is laid out from by ops marked ``passes_cotangents`` (the stacks of
an inner segmented scan) is cut out of that ``y``'s stack; any other becomes one more stacked
output. So each number has one stack, and its cotangents one sum, as without segments. The VJP
works on a copy of the loop's blocks, never on the forward op: when the copy stacks more (or
a trip count the loop lacks is wanted), it becomes the body of a *new* forward op, the loop
with those extra results, which takes the loop's place, with its result Values, once the
sweep over the loop's block ends (partial evaluation,
:mod:`symgrad.autodiff.merge`), so the loop still runs once; a loop nested in the body is
differentiated, and replaced, inside the copy. A carry's incoming values are stacked once, and
a carry's *outgoing* value at step t is the incoming value at step t + 1, which the reverse scan
carries along (starting from the final carry), so a tanh RNN keeps one ``T x batch x hidden``
stack, not two. A loop marked ``remat`` (the outer scan of ``checkpoint=``,
:mod:`symgrad.ops.checkpoint`) stores no residual but its incoming carries: its backward body
first recomputes the forward body from them. The accumulator of a captured Value starts from
the cotangent the sweep has summed for it so far (``GradCall.running``), and each step adds to
it, so the gradient is one running sum in the order the steps are differentiated, the same bit
for bit however the steps are split into nested or consecutive loops. A shifted carry ends, after
the reverse scan's last step, at the loop's initial carry (``GradCall.restored``): the reverse
scans of an enclosing loop and of the loop before read it there, so second derivatives sum the
cotangent of a carry at a segment boundary as the unsplit loop does. ``while_loop`` also
records its trip count, which the reverse scan runs for
(reverse mode through a while loop, which JAX refuses). A loop whose trip count is known only
at run time and not from ``xs`` (a while loop) in the body of another loop would have its
residuals stacked with a different count at each step of that loop: it recomputes its steps
instead, by a ``reverse_loop`` (:data:`NESTED_PLAN`).

Higher derivatives: a checkpointed loop differentiated with ``create_graph=True`` also builds
its store-all backward and makes it the twin of its checkpointed one (``Operation.twin_of``,
:func:`_loop_vjp`), so that a later grad call builds ``checkpoint=None``'s derivative program;
not a loop of a run-time trip count in a loop body (:func:`_counted_per_step`), whose second
derivative differentiates its ``reverse_loop`` (:func:`_reverse_loop_vjp`, recomputing its
steps within the enclosing backward's step). A loop known at build time to run no
step is the identity on its carries, and gives zeros to what its body reads. Building the
reverse scan is linear in the size of the body.

``cond``: a ``cond`` on the same predicate whose branches recompute the forward branch
(inlined, reading the operands directly) and build its backward; a branch that gives a Value no
cotangent yields zeros for it. Only the taken branch runs, forward and backward.

A cotangent may know a dim that its Value leaves unknown (a seed ``[2, 3]`` for a ``[?, 3]``
result), or the reverse; both VJPs reshape it to the exact types of their carries and yields.
"""
from __future__ import annotations

from .. import dtypes
from ..ir.graph import IdentityMap, free_values, walk_blocks, walk_defined, walk_ops
from ..ir.program import Block, copy_op, current_block, insertion_point
from ..ir.value import Value
from ..ops.control_flow import cond_p, loop_layout, scan_length_input, scan_p
from ..ops.core import INJECTIVE, bind_region, deferred_scope_checks, evaluate_vjp
from ..ops.reverse_loop import reverse_loop_counts, reverse_loop_p, trip_input
from ..ops.shape import reshape_like, zeros_for
from .backward import Backward
from .context import current
from .merge import emit, merge, pending
from .reach import live_ops, search
from .registry import register_vjp

__all__ = ["differentiate_block"]


def differentiate_block(block, seeds, targets, policy, sums=None) -> dict:
    """Build, in the insertion block, the backward of ``block``'s ops: ``seeds`` is a list of
    ``(Value of the block's scope, cotangent)``, ``targets`` the Values (block arguments,
    captures, inner Values) whose cotangents are wanted. ``sums`` maps Values to the
    cotangent their sums start from (the contributions of ``block`` are added to it). Returns
    ``{target: cotangent or None}``. Only ops of ``block`` itself are walked through. A
    loop of ``block`` whose VJP emits a new forward op (to record residuals) is replaced by
    it in ``block``, a copy that the caller owns (a loop's copied body, an inlined branch),
    before this returns."""
    outputs = [value for value, _ in seeds]
    cone, cone_ops = search(outputs, policy, within=block)
    ops, live = live_ops(targets, cone, cone_ops, policy)
    backward = Backward(block.program, policy, live, targets)
    backward.cotangent.update(sums or {})
    backward.seed(outputs, [cotangent for _, cotangent in seeds], 1)
    backward.run(ops)
    merge(block)
    return {target: backward.get(target) for target in targets}


def _first_positions(values) -> dict:
    """``{Value: position of its first occurrence in values}`` (a dict looks Values up by
    identity; ``==`` would build an op)."""
    positions: dict = {}
    for index, value in enumerate(values):
        positions.setdefault(value, index)
    return positions


def _replace_uses(blocks, mapping) -> None:
    """Read ``mapping[v]`` instead of ``v`` everywhere in ``blocks`` (nested ones included):
    op inputs (a region op's captures among them) and yields."""
    for block in walk_blocks(blocks):
        for op in block.ops:
            op.inputs = [mapping.get(v, v) for v in op.inputs]
        block.yields = [mapping.get(v, v) for v in block.yields]


def _inline(block, value_map) -> list:
    """Copy the ops of ``block`` into the insertion block with fresh ids, reading
    ``value_map[v]`` for ``v`` (the block's arguments mapped to what they stand for); the
    copies are marked as backward of the op being differentiated. Returns what the block
    yields, mapped."""
    program = block.program
    target = current_block(program)
    op_map: dict = {}
    for op in block.ops:
        new = copy_op(op, [value_map[v] for v in op.inputs], op.attrs, target, value_map, op_map)
        target.ops.append(new)
        for inner in walk_ops([new]):
            inner.forward_op = inner.forward_op or program._backward_of
            for value in inner.results:
                value.id = program._take_id()
            for nested in inner.blocks:
                for value in nested.args:
                    value.id = program._take_id()
    return [value_map[v] for v in block.yields]


def _recompute(value, block):
    """A copy of ``value``'s input-less op (a constant) for ``block``, not yet in it; returns
    the copy and its result for ``value``."""
    program = block.program
    copy = copy_op(value.op, [], value.op.attrs, block, {}, {})
    for result in copy.results:
        result.id = program._take_id()
    return copy, copy.results[value.index]


def _as_type_of(value, like) -> Value:
    """``value`` with exactly the static shape of ``like``: a loop's carries and a cond's
    yields must match their counterparts exactly, but a cotangent may know a dim that its
    Value leaves unknown (a seed of shape ``[2, 3]`` for a ``[?, 3]`` output), or the reverse.
    A run-time reshape (a no-op) when the shapes differ."""
    return value if value.shape == like.shape else reshape_like(value, like)


def _wants_gradient(value, policy) -> bool:
    return dtypes.is_float(value.dtype) and policy.carry_block(value) is None


# --- cond -----------------------------------------------------------------------------------------
def _cond_vjp(op, cotangents):
    call = current()
    policy, wanted = call.policy, call.wanted or [True] * len(op.inputs)
    program = op.block.program
    count = op.attrs["num_operands"]
    operands = op.inputs[1:1 + count]
    first_position: dict = {}        # a Value read at several positions gets its gradient once
    for position, value in enumerate(op.inputs):
        if position and wanted[position] and _wants_gradient(value, policy):
            first_position.setdefault(value, position)
    targets = list(first_position)
    branches = []
    for forward in op.blocks:
        block = Block(program, outer=current_block(program))
        with insertion_point(block):
            yields = _inline(forward, IdentityMap(zip(forward.args, operands)))
            seeds = [(y, c) for y, c in zip(yields, cotangents) if c is not None]
            got = differentiate_block(block, seeds, targets, policy)
        branches.append((block, got))
    kept = [t for t in targets if any(got[t] is not None for _, got in branches)]
    grads = [None] * len(op.inputs)
    if not kept:
        return grads
    for block, got in branches:
        with insertion_point(block):
            block.yields = [_as_type_of(got[t], t) if got[t] is not None else zeros_for(t)
                            for t in kept]
    backward = bind_region(cond_p, [op.inputs[0]], {"num_operands": 0},
                           [block for block, _ in branches], program)
    for target, result in zip(kept, backward.results):
        grads[first_position[target]] = result
    return grads


# --- loops ------------------------------------------------------------------------------------------
class _Loop:
    """A loop op seen through its :class:`~symgrad.ops.control_flow.LoopLayout`, for its VJP:
    carries (block arguments, yields, initial and final Values), per-step inputs (``xs``),
    per-step outputs (stacked results) and captures. Its blocks are *copies* of the op's
    (same Value ids), which the VJP differentiates and which may stack more per-step values
    (:meth:`stack`) and count the steps (:meth:`count`); :meth:`finish` then emits the new
    forward op that gives them (partial evaluation: the op itself is never changed), which
    takes the op's place when the sweep over its block ends (:mod:`symgrad.autodiff.merge`)."""

    def __init__(self, op, policy, store_all=False):
        self.op = op
        layout = self.layout = loop_layout(op)
        copies, clones = IdentityMap(), {}
        twin = copy_op(op, op.inputs, op.attrs, op.block, copies, clones)
        del clones[op]
        policy.follow(copies)
        self.clones = clones
        self.blocks = twin.blocks
        for block in self.blocks:    # op's, until the new op takes them (provenance)
            block.parent_op = op
        self.body = body = twin.blocks[layout.body_index]
        self.num_carry = count = layout.num_carry
        self.num_stacked = len(layout.stacked_yields)
        self.xs = layout.xs
        self.length = layout.length
        self.reverse = layout.reverse
        self.remat = layout.remat and not store_all
        self.plan = None if store_all else layout.plan
        if not store_all and _ragged(op, layout):
            self.plan, self.remat = NESTED_PLAN, True
        self.num_explicit = layout.num_explicit
        self.carry_args = body.args[:count]
        self.x_args = body.args[count:]
        self.carry_yields = body.yields[:count]
        self.finals = layout.finals
        self.inits = layout.inits
        self.carry_position = _first_positions(self.carry_yields)
        self.stacked_position = _first_positions(self.stacked_yields)   # grows with stack()
        self.counting = False
        self.new = None                  # the new forward op, once finish() emits one

    @property
    def stacked_yields(self):
        return self.body.yields[self.num_carry:]

    def stack(self, value) -> int:
        """The index of the per-step output stacking ``value`` (a Value of the body), the
        body yielding it from now on if it did not; :meth:`stacked_result` gives the stack
        once :meth:`finish` ran."""
        index = self.stacked_position.get(value)
        if index is None:
            index = self.stacked_position[value] = len(self.body.yields) - self.num_carry
            self.body.yields.append(value)
        return index

    def count(self) -> None:
        """Ask for the trip count (:meth:`trip_count` once :meth:`finish` ran)."""
        self.counting = True

    def finish(self) -> None:
        """Emit the new forward op if the body stacks more than the op does or a trip count
        the op lacks is wanted: the op's explicit inputs, the copied blocks and the attrs
        saying so (:meth:`~symgrad.ops.control_flow.LoopLayout.grown_attrs`); its results
        are the op's own result Values, then the new stacks and trip count (fresh ids)."""
        op, layout = self.op, self.layout
        stacked = len(self.stacked_yields) - self.num_stacked
        counted = self.counting and layout.trip_count is None
        if not stacked and not counted:
            return
        program = op.block.program
        with insertion_point(op.block):
            new = bind_region(op.opdef, op.inputs[:self.num_explicit],
                              layout.grown_attrs(stacked=stacked, counted=counted),
                              self.blocks, program)
        op.block.ops.pop()                  # in no block until merged in op's place
        new.loc, new.forward_op = op.loc, op.forward_op
        kept = self.num_carry + self.num_stacked
        made = new.results[kept:kept + stacked] + new.results[len(new.results) - counted:]
        first = new.results[0].id           # the last ids taken: the fresh ones take them
        for offset, value in enumerate(made):
            value.id = first + offset
        program._next_id = first + len(made)
        new.results = op.results[:kept] + made[:stacked] + (
            made[stacked:] if counted else op.results[kept:])
        if op.twin_of is not None:          # a twin recording more stands in as before
            twin = dict(zip(op.results, op.twin_of))
            new.twin_of = tuple([twin.get(value) for value in new.results])
        self.new = new
        emit(op, new, self.clones)

    def laid_out_parts(self) -> dict:
        """``{Value: (index of a stacked output, [(op, result index, input index)])}``: the
        Values of the body that one of the loop's own stacked outputs is laid out from by ops
        marked ``passes_cotangents`` (a segmented scan's ``ys`` in the body: its stacks), with
        the ops from that output down to each."""
        parts: dict = {}
        for index, y in enumerate(self.stacked_yields[:self.num_stacked]):
            pending = [(y, [])]
            while pending:
                value, path = pending.pop()
                op = value.op
                if op is None or not op.passes_cotangents or op.block is not self.body:
                    if path:
                        parts.setdefault(value, (index, path))
                    continue
                for position, u in enumerate(op.inputs):
                    pending.append((u, path + [(op, value.index, position)]))
        return parts

    def stacked_result(self, index) -> Value:
        return (self.new or self.op).results[self.num_carry + index]

    def trip_count(self) -> Value:
        """An int scalar Value holding how many steps ran."""
        return loop_layout(self.new).trip_count if self.new is not None else \
            self.layout.trip_count


# The schedule of a loop of a data-dependent trip count in a loop body: every carry stored while
# the backward runs (one extra forward sweep of it; only the trip count and the initial carries
# are recorded per step of the enclosing loop)
NESTED_PLAN = ("every", 1)


def _ragged(op, layout) -> bool:
    """Would the residuals of loop ``op`` be stacked per step of an enclosing loop, a number
    known only at run time each time (:func:`_counted_per_step`) and no schedule of its own?
    Such a loop recomputes its steps (:data:`NESTED_PLAN`), recording its trip count and
    initial carries only."""
    return layout.plan is None and _counted_per_step(op, layout)


def _counted_per_step(op, layout) -> bool:
    """Is ``op`` a loop whose trip count is known only at run time and not from ``xs`` (a
    while loop, a scan with a run-time length and no ``xs``) in the body of another loop, so
    that it may run a different number of steps at each step of that loop?"""
    if layout.length is not None or layout.xs:
        return False
    block = op.block
    while block is not None:
        parent = block.parent_op
        if parent is not None and loop_layout(parent) is not None:
            return True
        block = block.parent_block
    return False


def _loop_vjp(op, cotangents):
    """The VJP of a loop (``scan``, ``while_loop``). A checkpointed loop (attr ``remat``: its
    backward recomputes the body, by segments or by a run-time ``plan``) differentiated with
    ``create_graph=True`` also gets its *store-all* backward, the reverse scan it would have
    without checkpoint, built on the same cotangents (a new forward op records its residuals),
    as the *twin* of its checkpointed backward (``Operation.twin_of``,
    :class:`~symgrad.autodiff.reach.Twins`): a later grad call differentiates the store-all one, so the higher derivatives are those of
    ``checkpoint=None`` bit for bit, while the first derivative's program stores nothing more
    (nothing reads the twin: compiling the first derivative prunes the twin and the loop's
    extra stacks away). A loop whose trip count may differ between the steps of an enclosing
    loop (:func:`_counted_per_step`) gets no twin: its store-all residuals, stacked per step of
    that loop, would be ragged; a later grad call differentiates its ``reverse_loop``
    (:func:`_reverse_loop_vjp`), whose recomputation stays inside one step of the enclosing
    loop's backward (second derivatives; a third would stack that recomputation's residuals,
    which the run-time check of a stack's rows reports,
    :func:`~symgrad.ops.control_flow.ragged_stack_message`)."""
    call = current()
    grads, results = _loop_backward(op, cotangents, call)
    layout = loop_layout(op)
    if results and call.create_graph and layout.remat and not _counted_per_step(op, layout):
        _, twin = _loop_backward(pending(op), cotangents, call, store_all=True)
        if len(twin) != len(results) or any(a.shape != b.shape or a.dtype != b.dtype
                                            for a, b in zip(results, twin)):
            raise AssertionError(f"the store-all backward of {op.name} gives other results "
                                 f"than its checkpointed one")
        twin_op = twin[0].op
        stands_for = dict(zip(twin, results))
        twin_op.twin_of = tuple([stands_for.get(value) for value in twin_op.results])
        call.kept.extend(twin)
    return grads


def _loop_backward(op, cotangents, call, store_all=False):
    """``(gradients of op's inputs, the results of the backward op)`` (the cotangents and sums
    of the carries and captures, then the stacked ``xs`` cotangents); ``store_all``: the
    reverse scan reading recorded residuals even if the loop is checkpointed."""
    policy, wanted = call.policy, call.wanted or [True] * len(op.inputs)
    loop = _Loop(op, policy, store_all)
    program = op.block.program
    count, body = loop.num_carry, loop.body
    diff = [k for k in range(count) if _wants_gradient(loop.carry_args[k], policy)]
    stacked = loop.stacked_yields
    stacked_cts = [(j, c) for j, c in enumerate(cotangents[count:count + len(stacked)])
                   if c is not None]
    x_wanted = [i for i, arg in enumerate(loop.x_args)
                if wanted[count + i] and _wants_gradient(arg, policy)]
    captured = [(position, value) for position, value in enumerate(op.inputs)
                if position >= loop.num_explicit and wanted[position]
                and _wants_gradient(value, policy)]
    if loop.length == 0:
        return _zero_trip_vjp(loop, cotangents, diff, [stacked[j] for j, _ in stacked_cts],
                              x_wanted, captured, policy), []
    grads = [None] * len(op.inputs)

    backward = Block(program, outer=current_block(program))

    def new_arg(like):
        return Value(program, program._take_id(), like.dims, like.dtype, arg_of=backward)

    carry_cts = [new_arg(loop.carry_args[k]) for k in diff]
    accumulators = [new_arg(value) for _, value in captured]
    y_cts = [new_arg(stacked[j]) for j, _ in stacked_cts]
    with insertion_point(backward), deferred_scope_checks():
        differentiated, source = body, IdentityMap()
        if loop.remat:     # the body again, from its arguments: no residual but the carries
            differentiated = backward
            _inline(body, source)
        seeds = [(source[loop.carry_yields[k]], a) for k, a in zip(diff, carry_cts)]
        seeds += [(source[stacked[j]], a) for (j, _), a in zip(stacked_cts, y_cts)]
        targets = [loop.carry_args[k] for k in diff] + [loop.x_args[i] for i in x_wanted] + \
            [value for _, value in captured]
        # a step adds to the running sums of the captures' gradients (carried accumulators)
        sums = {value: a for a, (_, value) in zip(accumulators, captured)}
        got = differentiate_block(differentiated, seeds, targets, policy, sums)
        new_carry_cts = [_as_type_of(got[loop.carry_args[k]], a)
                         if got[loop.carry_args[k]] is not None else zeros_for(a)
                         for k, a in zip(diff, carry_cts)]
        new_accumulators = [_as_type_of(got[value], a) for a, (_, value) in
                            zip(accumulators, captured)]
        x_cts = [(i, got[loop.x_args[i]]) for i in x_wanted if got[loop.x_args[i]] is not None]

    # a capture's sum starts from what the sweep has summed for it so far (the steps continue
    # it in the order they are differentiated, bit for bit however the steps are nested or
    # split into loops), or from zeros
    running = call.running or [None] * len(op.inputs)
    inits = [_as_type_of(cotangents[k], loop.finals[k]) if cotangents[k] is not None
             else zeros_for(loop.finals[k]) for k in diff]
    inits += [_as_type_of(running[position], value) if running[position] is not None and
              _contributes(got, value, sums) else zeros_for(value)
              for position, value in captured]
    yields = new_carry_cts + new_accumulators
    if loop.plan is not None:
        results = _planned_reverse(loop, backward, new_arg, inits, yields,
                                   carry_cts + accumulators + y_cts,
                                   [c for _, c in stacked_cts], [c for _, c in x_cts])
    else:
        results = _reverse_scan(loop, backward, new_arg, inits, yields,
                                carry_cts + accumulators, y_cts, [c for _, c in stacked_cts],
                                [c for _, c in x_cts])
    for index, k in enumerate(diff):
        if wanted[k]:
            grads[k] = results[index]
    for index, (position, value) in enumerate(captured):
        if _contributes(got, value, sums):
            grads[position] = results[len(diff) + index]
            if running[position] is not None:
                call.continued.add(position)
    for index, (i, _) in enumerate(x_cts):
        grads[count + i] = results[len(inits) + index]
    return grads, results


def _reverse_scan(loop, backward, new_arg, inits, yields, carried_args, y_cts, y_ct_stacks,
                  x_cts) -> list:
    """The reverse scan of ``loop`` whose body is ``backward`` (its arguments
    ``carried_args`` then ``y_cts``, slices of ``y_ct_stacks``; ``yields`` the next values of
    the carried arguments, ``x_cts`` the cotangents of the step's ``xs`` slices), starting from
    ``inits``: it reads the residuals from stacks the forward loop records (the new forward
    op, :meth:`_Loop.finish`, records those it did not) and carries the shifted carry values.
    Returns its results: the carried values, the shifted
    ones, then the stacked ``xs`` cotangents."""
    program, body, count = backward.program, loop.body, loop.num_carry
    # slices the reverse scan reads, and their stacks (a Value, or the index of a per-step
    # output of the loop, known once it is finished)
    residual_args, residual_inputs = [], []
    shift_args, shift_inits, shift_yields, shifted = [], [], [], []
    restored = current().restored
    history: dict = {}                         # carry index -> slice of its incoming values

    def slice_of(stack, like):
        arg = new_arg(like)
        residual_args.append(arg)
        residual_inputs.append(stack)
        return arg

    def x_slice(arg):                           # a step's slice of an xs, read once
        if arg not in mapping:
            mapping[arg] = slice_of(loop.xs[arg.index - count], arg)
        return mapping[arg]

    def output_slice(index):                    # one slice per stacked output of the loop
        if index not in outputs_read:
            outputs_read[index] = slice_of(index, loop.stacked_yields[index])
        return outputs_read[index]

    def incoming(k):
        if k not in history:
            history[k] = slice_of(loop.stack(loop.carry_args[k]), loop.carry_args[k])
        return history[k]

    mapping = {}
    remade = []                                 # copies of constants, to start the block
    laid = []                                   # ops cutting parts out of a stacked output
    parts = loop.laid_out_parts()
    outputs_read: dict = {}
    for value in free_values([backward]):
        if value.block is not body:
            continue                            # a Value of an enclosing block: captured
        if value.op is not None and not value.op.inputs and not value.op.blocks:
            copy, mapping[value] = _recompute(value, backward)   # made again, not stacked
            remade.append(copy)
            continue
        if value.arg_of is body:
            if value.index >= count:            # a slice of xs: read the original xs
                x_slice(value)
            else:
                mapping[value] = incoming(value.index)
            continue
        if _cut_from_xs(value, body, count):    # data movement of xs slices: made again
            laid.extend(_recut(value, backward, mapping, x_slice))
            continue
        j = loop.stacked_position.get(value)
        if j is not None:
            mapping[value] = output_slice(j)
            continue
        k = loop.carry_position.get(value)
        if k is not None:                       # outgoing carry = next step's incoming one
            arg = new_arg(value)
            shift_args.append(arg)
            shifted.append(k)
            shift_inits.append(_held_in(restored, loop.finals[k], current_block(program),
                                        lambda k=k: loop.finals[k]))
            shift_yields.append(_held_in(restored, loop.carry_args[k], backward,
                                         lambda k=k: incoming(k)))
            mapping[value] = arg
            continue
        if value in parts:                      # read from the stacked output laid out of it
            index, path = parts[value]
            piece = _cut_part(path, value, backward, laid,
                              lambda index=index: output_slice(index))
            if piece is not None:
                mapping[value] = piece
                continue
        mapping[value] = slice_of(loop.stack(value), value)
    backward.ops[:0] = list(reversed(remade)) + laid
    _replace_uses([backward], mapping)

    xs = y_ct_stacks + residual_inputs
    x_slice_args = y_cts + residual_args
    if loop.length is None and not xs and loop.xs:   # the run-time length comes from an xs
        x_slice_args.append(new_arg(loop.x_args[0]))
        xs.append(loop.xs[0])
    _set_args(backward, carried_args + shift_args + x_slice_args)
    backward.yields = [mapping.get(v, v) for v in yields + shift_yields + x_cts]
    inits = inits + shift_inits
    attrs = {"num_carry": len(inits), "num_xs": len(xs), "length": loop.length,
             "reverse": not loop.reverse}
    if scan_length_input(attrs):
        loop.count()
    loop.finish()
    operands = inits + [loop.stacked_result(x) if isinstance(x, int) else x for x in xs]
    if scan_length_input(attrs):
        operands.append(loop.trip_count())
    results = bind_region(scan_p, operands, attrs, [backward], program).results
    first = len(inits) - len(shift_inits)
    for k, result in zip(shifted, results[first:len(inits)]):
        restored[loop.inits[k]] = result
    return results[:first] + results[len(inits):]


def _cut_from_xs(value, body, count) -> bool:
    """Is ``value`` made from the ``xs`` slices of loop ``body`` (of ``count`` carries) by
    data movement alone (ops of category ``injective``: an inner scan's ``xs`` cut into
    segments, a reshape, a transpose)?"""
    stack = [value]
    while stack:
        value = stack.pop()
        if value.arg_of is body and value.index >= count:
            continue
        op = value.op
        if op is None or op.block is not body or op.opdef.category != INJECTIVE:
            return False
        stack.extend(op.inputs)
    return True


def _recut(value, block, mapping, x_slice) -> list:
    """Copies for ``block`` of the ops making ``value`` from ``xs`` slices
    (:func:`_cut_from_xs`), reading the step's slices (``x_slice(arg)``), in program order;
    ``mapping`` gets their results. The backward reads no stack of ``value``: its cotangents
    go to the slices themselves, where the unsplit scan, reading its ``xs``, sums them."""
    program = block.program
    ops, stack = {}, [value]
    while stack:
        value = stack.pop()
        if value.op is not None and value not in mapping and value.op not in ops:
            ops[value.op] = None
            stack.extend(value.op.inputs)
    made = []
    for op in sorted(ops, key=lambda op: op.results[0].id):
        inputs = [x_slice(u) if u.op is None else mapping[u] for u in op.inputs]
        copy = copy_op(op, inputs, op.attrs, block, {}, {})
        for old, result in zip(op.results, copy.results):
            result.id = program._take_id()
            mapping[old] = result
        made.append(copy)
    return made


def _cut_part(path, value, block, laid, output_slice):
    """The numbers of ``value`` cut out of a step's slice of a stacked output laid out from
    it (:meth:`_Loop.laid_out_parts`; ``output_slice()`` makes or gives that slice) by the
    VJPs of the ops on ``path`` (exact indexing: they take the layout apart), built for
    ``block`` and appended to ``laid``, marked ``passes_cotangents``: the cotangents of the
    part are summed on the slice as they come, so a residual of an inner segmented scan and
    the ``y`` laid out from it sum on one stack, as the unsplit scan's ``y``, which is its
    stack, does. None (nothing built) when the VJPs would read a Value of the body (a layout
    with dims known only at run time)."""
    program = block.program
    start, first_id = len(block.ops), program._next_id
    scratch = Value(program, program._take_id(), path[0][0].results[path[0][1]].dims,
                    path[0][0].results[path[0][1]].dtype, arg_of=block)
    piece = scratch
    with insertion_point(block):
        for op, result, position in path:
            cotangents = [None] * len(op.results)
            cotangents[result] = piece
            wanted = [index == position for index in range(len(op.inputs))]
            piece = evaluate_vjp(op, cotangents, wanted)[position]
            if piece is None:
                break
    made = block.ops[start:]
    del block.ops[start:]
    if piece is None or piece.shape != value.shape or piece.dtype != value.dtype or any(
            u.block is not block for op in made for u in op.inputs):
        program.forget_cached_constants(first_id)
        return None
    arg = output_slice()
    for op in made:
        op.passes_cotangents = True
        op.inputs = [arg if u is scratch else u for u in op.inputs]
    laid.extend(made)
    return arg if piece is scratch else piece


def _held_in(restored, value, block, otherwise):
    """The Value of ``block`` that a reverse scan built there gives back holding the numbers
    of ``value`` (a loop's initial carry, :func:`_reverse_scan`), else ``otherwise()``.

    A reverse scan's shifted carry ends, after its last step, at the loop's initial carry: an
    enclosing loop's reverse scan (``value`` a carry of its body) and the reverse scan of the
    loop before (``value`` that loop's final carry) read it there rather than the initial
    carry itself, so the cotangent of that carry is summed in one place, the order the steps
    of one loop without nesting or splitting sum it (second derivatives through segments
    are then those of the unsplit loop bit for bit)."""
    held = restored.get(value)
    return held if held is not None and held.block is block else otherwise()


def _planned_reverse(loop, backward, new_arg, inits, yields, carried_args, y_ct_stacks,
                     x_cts) -> list:
    """The :data:`~symgrad.ops.reverse_loop.reverse_loop_p` op reversing ``loop`` (a
    ``remat`` loop with a run-time ``plan``) by its schedule: ``backward`` (arguments
    ``carried_args``, the cotangents and sums then the stacked cotangents' slices;
    ``yields`` the next cotangents and sums, ``x_cts`` the step's ``xs`` cotangents) becomes
    its ``reverse`` block, reading the step's carries and ``xs`` slices as arguments; a copy of
    the forward body without its per-step outputs its ``advance`` block. Nothing of the
    forward is stored but its initial carries (and a while loop's trip count). Returns its
    results: the cotangents and sums, then the stacked ``xs`` cotangents."""
    program, body = backward.program, loop.body
    step_args = [new_arg(arg) for arg in body.args]
    mapping = dict(zip(body.args, step_args))
    remade = []
    for value in free_values([backward]):
        if value.block is body and value not in mapping:     # a constant of the body
            copy, mapping[value] = _recompute(value, backward)
            remade.append(copy)
    backward.ops[:0] = reversed(remade)
    _replace_uses([backward], mapping)
    _set_args(backward, carried_args + step_args)
    backward.yields = [mapping.get(v, v) for v in yields + x_cts]
    _keep_needed(backward)       # the recomputed next carries, say, that no cotangent reads

    advance = Block(program, outer=current_block(program))
    advance_args = [new_arg(arg) for arg in body.args]
    with insertion_point(advance):
        carries = _inline(body, IdentityMap(zip(body.args, advance_args)))[:loop.num_carry]
    _set_args(advance, advance_args)
    advance.yields = carries
    _keep_needed(advance)
    counts = {"num_carry": loop.num_carry, "num_xs": len(loop.xs), "num_ct": len(inits),
              "num_yct": len(y_ct_stacks)}
    attrs = dict(counts, length=loop.length, reverse=loop.reverse, plan=loop.plan)
    operands = loop.inits + loop.xs + inits + y_ct_stacks
    if trip_input(attrs):
        loop.count()
        loop.finish()
        operands.append(loop.trip_count())
    return bind_region(reverse_loop_p, operands, attrs, [advance, backward], program).results


def _set_args(block, args) -> None:
    block.args = list(args)
    for index, arg in enumerate(block.args):
        arg.arg_of, arg.index = block, index


def _keep_needed(block) -> None:
    """Drop the ops of ``block`` that nothing it yields needs (one backward sweep)."""
    needed = set(block.yields)
    kept = []
    for op in reversed(block.ops):
        if any(value in needed for value in op.results):
            kept.append(op)
            needed.update(op.inputs)
    block.ops = kept[::-1]


def _contributes(got, value, sums) -> bool:
    """Does the body give captured ``value`` a gradient (more than its running sum)?"""
    return got[value] is not sums[value]


def _zero_trip_vjp(loop, cotangents, diff, stacked_seeded, x_wanted, captured, policy):
    """The VJP of a loop known at build time to run no step (``scan(length=0)``,
    ``fori_loop(5, 2)``): the identity on its carries, and zeros for each ``xs`` and captured
    Value that the body would send a gradient to, as the same loop with its trip count known
    only at run time gives."""
    grads = [None] * len(loop.op.inputs)
    for k in diff:
        grads[k] = cotangents[k]
    outputs = [loop.carry_yields[k] for k in diff] + stacked_seeded
    targets = {loop.x_args[i]: loop.num_carry + i for i in x_wanted}
    targets.update((value, position) for position, value in captured)
    cone, cone_ops = search(outputs, policy, within=loop.body)
    _, live = live_ops(list(targets), cone, cone_ops, policy)
    for target, position in targets.items():
        if target in live:
            grads[position] = zeros_for(loop.op.inputs[position])
    return grads


# --- reverse_loop -----------------------------------------------------------------------------
def _reverse_loop_vjp(op, cotangents):
    """The VJP of a ``reverse_loop`` (a gradient through a loop with a run-time checkpoint
    schedule, differentiated again) that has no twin (:func:`_loop_vjp` gives one to those it
    builds with ``create_graph=True``; one that ``vmap`` could not pair with its twin's
    batched copy has none): the result
    agrees with ``checkpoint=None`` to rounding, not bit for bit. The op computes what two scans
    compute: one running its ``advance`` block over the steps and stacking the incoming
    carries, then a scan in the opposite direction running its ``reverse`` block over the
    stacked cotangents, those carries and the ``xs``. Its VJP builds those two scans (copies
    of its blocks, reading a block's arguments that stand for its inputs), differentiates them
    like any loops (:func:`differentiate_block`) and inlines the result: the first-order
    gradient keeps its schedule's memory; the second-order one recomputes the carries once
    and stores them (memory linear in the trip count)."""
    call = current()
    policy, wanted = call.policy, call.wanted or [True] * len(op.inputs)
    program = op.block.program
    carries, num_xs, num_ct, num_yct = reverse_loop_counts(op.attrs)
    block = Block(program, outer=current_block(program))
    args = [block.add_arg(value.dims, value.dtype) for value in op.inputs]
    copies = IdentityMap(zip(op.inputs, args))
    twin = copy_op(op, args, op.attrs, block, copies, {})
    advance, reverse = twin.blocks
    for inner in twin.blocks:                  # fresh ids: the op's blocks stay in the program
        for value in inner.args + list(walk_defined(inner.ops)):
            value.id = program._take_id()
    inits, xs = args[:carries], args[carries:carries + num_xs]
    ct_inits = args[carries + num_xs:carries + num_xs + num_ct]
    y_cts = args[carries + num_xs + num_ct:carries + num_xs + num_ct + num_yct]
    trip = args[carries + num_xs + num_ct + num_yct:][:trip_input(op.attrs)]
    length, backwards = op.attrs["length"], op.attrs["reverse"]
    with insertion_point(block), deferred_scope_checks():
        advance.yields = advance.yields + advance.args[:carries]   # and the incoming carries
        attrs = {"num_carry": carries, "num_xs": num_xs, "length": length,
                 "reverse": backwards}
        forward = bind_region(scan_p, inits + xs + trip, attrs, [advance], program)
        stacked = forward.results[carries:]
        attrs = {"num_carry": num_ct, "num_xs": num_yct + carries + num_xs, "length": length,
                 "reverse": not backwards}
        results = bind_region(scan_p, ct_inits + y_cts + stacked + xs, attrs, [reverse],
                              program).results
        seeds = [(r, c) for r, c in zip(results, cotangents) if c is not None]
        targets = [arg for arg, w in zip(args, wanted) if w and _wants_gradient(arg, policy)]
        got = differentiate_block(block, seeds, targets, policy)
    kept = [target for target in targets if got[target] is not None]
    block.yields = [got[target] for target in kept]
    grads = [None] * len(op.inputs)
    position = {arg: index for index, arg in enumerate(args)}
    for target, value in zip(kept, _inline(block, IdentityMap(zip(args, op.inputs)))):
        grads[position[target]] = value
    return grads


register_vjp("cond", _cond_vjp)
register_vjp("scan", _loop_vjp)
register_vjp("while_loop", _loop_vjp)
register_vjp("reverse_loop", _reverse_loop_vjp)
