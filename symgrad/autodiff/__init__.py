"""Reverse-mode autodiff over the IR.

``ir_backward.grad`` / ``ir_backward.append_backward`` append the backward of a program to it;
``jacobian``, ``hessian``, ``jvp`` and ``vjp`` are helpers built on ``grad``; the registry API
(``register_vjp``, ``show_registry``, ``custom_op``) lives in :mod:`.registry`.
"""
from . import ir_backward, regions  # noqa: F401  (regions registers the region ops' VJPs)
from .functional import hessian, jacobian, jvp, vjp
from .ir_backward import append_backward, grad
from .registry import custom_op, register_vjp, show_registry

__all__ = ["ir_backward", "grad", "append_backward", "jacobian", "hessian", "jvp", "vjp",
           "custom_op", "register_vjp", "show_registry"]
