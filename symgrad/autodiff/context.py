"""The state of the ``grad`` call in progress, for the VJP rules of region ops.

A region op's VJP builds the backward of its blocks itself, so it needs what the rest of the
call knows: the :class:`~symgrad.autodiff.reach.Policy` (``no_grad_vars`` and the other cuts
apply inside regions too), which of the op's inputs need a gradient (so a loop does not
accumulate gradients nobody asked for), and the cotangent each input has summed so far in the
sweep (``running``): a loop may continue that sum step by step, in the order its steps are
differentiated, instead of adding its own total to it, and then names the input among
``continued``, whose gradient replaces the sum instead of adding to it. A loop's VJP that needs
residuals the loop does not give emits a new forward op in its place (``copies``, merged by
:mod:`symgrad.autodiff.merge`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses


@dataclasses.dataclass
class GradCall:
    policy: object
    create_graph: bool = False      # the gradients will be differentiated again
    wanted: list | None = None      # per input of the VJP being called
    running: list | None = None     # per input: its cotangent summed so far, or None
    continued: set | None = None    # positions whose gradient includes ``running``
    # block -> {forward op: the new forward op to take its place}, merged once the sweep over
    # the block is done (autodiff.merge)
    copies: dict = dataclasses.field(default_factory=dict)
    # an op of a block that a new forward op copied -> its copy (dim constraints follow it)
    clones: dict = dataclasses.field(default_factory=dict)
    # Values the call built that nothing reads but a later grad call differentiates (a
    # loop's store-all twin backward, :mod:`symgrad.autodiff.regions`): kept by the sweep
    kept: list = dataclasses.field(default_factory=list)
    # a loop's initial carry -> the reverse scan's result holding it again (its shifted carry
    # after the last step, :mod:`symgrad.autodiff.regions`)
    restored: dict = dataclasses.field(default_factory=dict)


_current: contextvars.ContextVar = contextvars.ContextVar("symgrad_grad_call", default=None)


@contextlib.contextmanager
def grad_call(policy, create_graph=False):
    """Make a :class:`GradCall` with ``policy`` current inside the ``with`` block."""
    call = GradCall(policy, create_graph)
    token = _current.set(call)
    try:
        yield call
    finally:
        _current.reset(token)


def current() -> GradCall:
    call = _current.get()
    if call is None:
        raise RuntimeError("a region op's VJP runs only inside ir_backward.grad")
    return call


@contextlib.contextmanager
def calling_vjp(wanted, running=None):
    """While one op's VJP runs, ``current().wanted`` says which of its inputs need a
    gradient and ``current().running`` their cotangents summed so far; yields the set of input
    positions whose gradient the VJP returns with that sum included (``continued``)."""
    continued: set = set()
    call = _current.get()
    if call is None:
        yield continued
        return
    saved = call.wanted, call.running, call.continued
    call.wanted, call.running, call.continued = wanted, running, continued
    try:
        yield continued
    finally:
        call.wanted, call.running, call.continued = saved
