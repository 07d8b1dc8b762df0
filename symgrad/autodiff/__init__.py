"""Reverse-mode autodiff over the IR.

``ir_backward.grad`` / ``ir_backward.append_backward`` append the backward of a program to it;
``jacobian``, ``hessian``, ``jvp`` and ``vjp`` are helpers built on ``grad``; ``register_vjp``
lives in :mod:`.registry` (``show_registry`` and ``custom_op``, which also reach the backends'
lowering tables, in :mod:`symgrad.registry`).
"""
# regions and vmap_regions register the region ops' VJPs and batching rules
from . import ir_backward, regions, vmap_regions  # noqa: F401
from .functional import hessian, jacobian, jvp, vjp
from .ir_backward import append_backward, grad
from .registry import register_vjp

__all__ = ["ir_backward", "grad", "append_backward", "jacobian", "hessian", "jvp", "vjp",
           "register_vjp"]
