"""``grad`` and ``append_backward``: append the backward of a program to the same program.

``grad`` implements the contract of DESIGN.md ("``ir_backward.grad`` semantics"): the union of
Paddle's, Chainer's and nnabla's ``grad`` with their known bugs fixed. The call is one
transaction: it either appends the whole backward and returns, or raises and leaves the program
exactly as it was (``.grad`` and ``stop_gradient`` attributes are only written on success).

The work is split over small modules: :mod:`.arguments` checks the arguments,
:mod:`.reach` finds the ops on a path from an input to an output (and explains an unreachable
input), :mod:`.backward` seeds the outputs and runs the VJPs in reverse program order.
"""
from __future__ import annotations

from ..errors import GradError
from ..gc_pause import gc_paused
from ..ir.program import current_block, program_guard
from ..ir.value import Value
from ..ops.elementwise import add, cast
from . import arguments
from .arguments import describe
from .backward import Backward, producer, sweep_unused
from .context import grad_call
from .merge import merge, merge_session
from .reach import FROZEN_GRADIENTS, Policy, explain_unreachable, live_ops, search

__all__ = ["grad", "append_backward"]


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=False, no_grad_vars=None, *, grad_inputs=None,
         set_grad=False, retain_grad=False, loss_scale=None, unused="none"):
    """Append to the outputs' program the ops computing, for each input ``x_i``, the sum over
    outputs ``j`` of ``d(y_j . seed_j) / d x_i``; return them as a list, one per input.

    :param outputs: A Value or a list/tuple of Values of one program (any other type:
        ``TypeError``; Values of two programs: ``ValueError``).
    :param inputs: The same types as ``outputs``, of the same program. Inputs may be
        intermediate Values, repeated, or outputs themselves (they then get their seed plus
        what flows back into them).
    :param grad_outputs: None or a list as long as ``outputs`` of seeds: ``None`` (ones), a
        number (filled), or a Value of the output's shape and dtype (else ``ValueError`` /
        ``TypeError``). Repeated outputs sum their seeds.
    :param retain_graph: Accepted for compatibility; a static program is never freed.
    :param create_graph: False: the results are new Values marked ``stop_gradient=True``.
        True: they stay differentiable (higher orders, gradient penalties).
    :param only_inputs: False: also set ``.grad`` on every leaf (``data``/``parameter`` with
        ``stop_gradient=False``) that the outputs reach.
    :param allow_unused: An input no output reaches raises ``ValueError`` saying why, unless
        ``allow_unused``; then its result is None (or zeros, see ``unused``).
    :param no_grad_vars: A Value or a list/tuple/set of Values through which no gradient
        flows; a listed input gets none.
    :param grad_inputs: None or a list as long as ``inputs`` of Values (or None) added to the
        results (not propagated upstream); an unreachable input's result is then the offset.
    :param set_grad: Store each result on ``input.grad``.
    :param retain_grad: Store the gradient of every Value on the path (outputs and
        intermediates included) on its ``.grad``.
    :param loss_scale: A number every seed is multiplied by; the results stay scaled.
    :param unused: With ``allow_unused``, the result of an unreachable input: ``"none"``
        (None) or ``"zeros"`` (zeros shaped like the input).
    :returns: One gradient Value (or None) per input, in the order of ``inputs``.
    """
    del retain_graph  # a static program keeps every op
    outputs = arguments.value_list(outputs, "outputs")
    inputs = arguments.value_list(inputs, "inputs")
    if not outputs:
        raise GradError("grad: outputs is empty")
    program = arguments.common_program(outputs, inputs)
    policy = Policy(arguments.no_grad_set(no_grad_vars, program))
    seeds = arguments.seeds(grad_outputs, outputs, program)
    offsets = arguments.offsets(grad_inputs, inputs, program)
    scale = arguments.loss_scale(loss_scale)
    unused = arguments.unused_mode(unused)

    block = current_block(program)    # inside a branch or body function: that block
    first_op, first_id = len(block.ops), program._next_id
    with gc_paused(), program.transaction(), program_guard(program), \
            grad_call(policy, create_graph) as call, merge_session() as session:
        cone, cone_ops = search(outputs, policy)
        leaves = [] if only_inputs else [
            v for v in cone if v.op is not None and v.op.opdef.feedable and not v.stop_gradient]
        ops, live = live_ops(inputs + leaves, cone, cone_ops, policy)
        backward = Backward(program, policy, live, inputs + leaves)
        backward.seed(outputs, seeds, scale)
        backward.run(ops)
        results = _results(backward, outputs, inputs, offsets, policy, allow_unused, unused)
        stored = _stored_grads(backward.cotangent, inputs, results, leaves,
                               set_grad, retain_grad)
        if not create_graph:
            fresh = _Fresh(program, first_id)
            results = [fresh(g, x) for g, x in zip(results, inputs)]
            stored = [(v, fresh(g, v)) for v, g in stored]
        merge()     # the new forward ops of loops that now record residuals, in place
        sweep_unused(block, first_op, first_id,
                     [g for g in results if g is not None] + [g for _, g in stored] +
                     call.kept, session)
    # Success: only now touch attributes.
    if not create_graph:
        for g in list(results) + [g for _, g in stored]:
            if g is not None:
                g.stop_gradient = True
                FROZEN_GRADIENTS.add(g)
    for value, g in stored:
        value.grad = g
    return results




def _results(backward, outputs, inputs, offsets, policy, allow_unused, unused):
    """The returned gradient of each input (its cotangent plus its offset)."""
    zeros: dict = {}
    results = []
    for index, (x, offset) in enumerate(zip(inputs, offsets)):
        g = backward.get(x)
        if g is None and offset is None:
            if not allow_unused:
                raise GradError(
                    f"grad: inputs[{index}] ({describe(x)}) is unreachable from the outputs: "
                    f"{explain_unreachable(x, outputs, policy)}. Pass allow_unused=True to get "
                    f"None (or unused='zeros' for zeros) for it")
            if unused == "zeros":
                if x not in zeros:
                    zeros[x] = backward.zeros(x)
                g = zeros[x]
        elif offset is not None:
            if g is None:
                g = offset
            else:
                with backward.program.backward_of(producer(x)):
                    g = add(g, offset)
        results.append(g)
    return results


def _stored_grads(cotangent, inputs, results, leaves, set_grad, retain_grad):
    """``[(value, gradient)]`` to store as ``value.grad`` (later entries win)."""
    stored = []
    if retain_grad:
        stored.extend(cotangent.items())
    stored.extend((v, cotangent[v]) for v in leaves if v in cotangent)
    if set_grad or retain_grad or leaves:   # an input's .grad is its result (offset included)
        leaf_set = set(leaves)
        stored.extend((x, g) for x, g in zip(inputs, results)
                      if g is not None and (set_grad or retain_grad or x in leaf_set))
    return stored


class _Fresh:
    """Maps a gradient to itself when this call built it, and otherwise (the caller's own seed
    or offset Value) to one new copy, so ``create_graph=False`` never marks a caller's Value."""

    def __init__(self, program, first_id):
        self.program = program
        self.first_id = first_id
        self.copies: dict = {}

    def __call__(self, g, owner):
        if g is None or g.id >= self.first_id:
            return g
        copy = self.copies.get(g)
        if copy is None:
            with self.program.backward_of(producer(owner)):
                copy = self.copies[g] = cast(g, g.dtype)
        return copy


def append_backward(loss, parameter_list=None, no_grad_set=None):
    """Paddle-style: append the gradient of ``loss`` with respect to parameters and return
    ``[(param, grad or None)]`` in the order the parameters were created.

    ``parameter_list``: Values or names (default: every ``sg.parameter`` of the program).
    ``no_grad_set``: Values or names through which no gradient flows; a parameter listed
    there, or created with ``stop_gradient=True`` (not trainable), gets None. Each gradient
    is also stored on ``param.grad``.
    """
    if not isinstance(loss, Value):
        raise TypeError(f"append_backward: loss must be a Value, got {type(loss).__name__}")
    program = loss.program
    if parameter_list is None:
        params = list(program.parameters)
    else:
        params = sorted(_resolve(program, parameter_list, "parameter_list"), key=lambda v: v.id)
    blocked = set(_resolve(program, no_grad_set or [], "no_grad_set"))
    trainable = list({p: None for p in params if p not in blocked and not p.stop_gradient})
    grads = grad(loss, trainable, allow_unused=True, no_grad_vars=blocked, set_grad=True)
    by_param = dict(zip(trainable, grads))
    return [(p, by_param.get(p)) for p in params]


def _resolve(program, items, what):
    """Values or names (strings) of ``program`` as a list of Values."""
    if isinstance(items, Value):
        items = [items]
    if not isinstance(items, (list, tuple, set, frozenset)):
        hint = " (put a single name in a list)" if isinstance(items, str) else ""
        raise TypeError(f"append_backward: {what} must be a list/tuple/set of Values or "
                        f"names, got {type(items).__name__}{hint}")
    values = []
    for item in items:
        if isinstance(item, str):
            try:
                item = program.find(item)
            except KeyError:
                raise ValueError(f"append_backward: {what} names {item!r}, which is not a "
                                 f"Value of the loss's program") from None
        if not isinstance(item, Value):
            raise TypeError(f"append_backward: {what} must hold Values or names, "
                            f"got {type(item).__name__}")
        if item.program is not program:
            raise ValueError(f"append_backward: {what} holds {describe(item)} of another program")
        values.append(item)
    return values
