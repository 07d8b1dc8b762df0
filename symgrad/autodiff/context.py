"""The state of the ``grad`` call in progress, for the VJP rules of region ops.

A region op's VJP builds the backward of its blocks itself, so it needs what the rest of the
call knows: the :class:`~symgrad.autodiff.reach.Policy` (``no_grad_vars`` and the other cuts
apply inside regions too), and which of the op's inputs need a gradient (so a loop does not
accumulate gradients nobody asked for).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses


@dataclasses.dataclass
class GradCall:
    policy: object
    wanted: list | None = None      # per input of the VJP being called


_current: contextvars.ContextVar = contextvars.ContextVar("symgrad_grad_call", default=None)


@contextlib.contextmanager
def grad_call(policy):
    """Make a :class:`GradCall` with ``policy`` current inside the ``with`` block."""
    call = GradCall(policy)
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
def calling_vjp(wanted):
    """While one op's VJP runs, ``current().wanted`` says which of its inputs need a
    gradient."""
    call = _current.get()
    if call is None:
        yield
        return
    saved = call.wanted
    call.wanted = wanted
    try:
        yield
    finally:
        call.wanted = saved
