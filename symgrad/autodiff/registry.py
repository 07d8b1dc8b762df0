"""The VJP registry API: replace an op's VJP (``register_vjp``), and the VJP of a user op
written Chainer-style (``backward(inputs, outputs, grad_outputs)``, see
:func:`symgrad.registry.custom_op`).
"""
from __future__ import annotations

from ..ir.value import Value
from ..ops.core import get_op
from ..ops.shape import zeros_for

__all__ = ["register_vjp", "chainer_vjp"]


def register_vjp(op_name, fn, *, differentiable=True):
    """Make ``fn(op, cotangents) -> [gradient or None per input]`` the VJP of the registered op
    ``op_name`` (``None`` removes it) and return the previous rule. ``differentiable`` says
    whether ``fn`` builds its gradients with symgrad ops (so higher orders work)."""
    opdef = get_op(op_name)
    if fn is not None and not callable(fn):
        raise TypeError(f"register_vjp: the rule for {op_name!r} must be callable or None, "
                        f"got {type(fn).__name__}")
    previous = opdef.vjp
    opdef.vjp = fn
    opdef.vjp_differentiable = bool(differentiable)
    return previous


def chainer_vjp(backward):
    """Adapt ``backward(inputs, outputs, grad_outputs) -> grads`` to the OpDef VJP contract.
    Outputs that receive no cotangent get zeros, so ``backward`` always sees Values."""
    def vjp(op, cotangents):
        grad_outputs = tuple(zeros_for(r) if g is None else g
                             for g, r in zip(cotangents, op.results))
        grads = backward(tuple(op.inputs), tuple(op.results), grad_outputs)
        if grads is None or isinstance(grads, Value):
            grads = [grads]
        return list(grads)
    vjp.backward = backward
    return vjp
