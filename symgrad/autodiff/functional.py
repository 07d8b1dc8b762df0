"""Derivative helpers built on ``grad``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``.

Each appends ops to the program of its arguments and returns Values that stay differentiable
(they are built with ``create_graph=True``), so the helpers compose: ``hessian`` is the
``jacobian`` of a gradient. An input that the outputs do not depend on gets zeros.

Return types follow one rule: the argument the results correspond to (``x`` for ``vjp``,
``jacobian`` and ``hessian``; ``y`` for ``jvp``) decides the container. A single Value gives a
single Value; a list gives a list and a tuple gives a tuple, one result per element, also for
one element (``hessian`` nests: a list of lists, or a tuple of tuples). So ``(g,) = vjp(y,
(x,))`` unpacks, and ``g = vjp(y, x)`` is the Value itself. ``ir_backward.grad`` keeps
Paddle's contract instead: always a list.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.program import current_block, program_guard
from ..ir.value import Value, format_shape
from ..ops.shape import reshape, zeros_for
from ..ops.source import constant
from .backward import sweep_unused
from .merge import merge_session
from .ir_backward import grad
from .vmap import vmap

__all__ = ["vjp", "jvp", "jacobian", "hessian"]


def _listed(arg, what):
    """``(list, pack)`` for a Value or a list/tuple of Values: ``pack(results)`` gives one
    result per element of ``arg`` in ``arg``'s form (the module's rule): the one result for a
    Value, else a list or a tuple as ``arg`` is (a plain one for a subclass)."""
    if isinstance(arg, Value):
        return [arg], _first
    if isinstance(arg, (list, tuple)):
        return list(arg), list if isinstance(arg, list) else tuple
    raise TypeError(f"{what} must be a Value or a list/tuple of Values, got {type(arg).__name__}")


def _first(results):
    return results[0]


def _differentiable_grad(ys, xs, seeds=None):
    return grad(ys, xs, grad_outputs=seeds, create_graph=True, allow_unused=True,
                unused="zeros")


def vjp(y, x, v=None):
    """Vector-Jacobian product: ``sum_j v_j^T dy_j/dx`` for each ``x`` (``v``: one cotangent
    per ``y``, shaped like it; None means ones). Returns one result per ``x`` in ``x``'s form:
    a Value for a Value, a list for a list, a tuple for a tuple."""
    ys, _ = _listed(y, "vjp: y")
    xs, pack = _listed(x, "vjp: x")
    if v is None or isinstance(v, (list, tuple)):
        seeds = v
    else:
        seeds = [v]
    return pack(_differentiable_grad(ys, xs, seeds))


def jvp(y, x, v):
    """Jacobian-vector product ``sum_i dy/dx_i v_i`` for each ``y`` (``v``: one tangent per
    ``x``, shaped like it), by the double-VJP trick: the VJP ``g(u) = J^T u`` is linear in the
    dummy cotangent ``u``, so the VJP of ``g`` with seed ``v`` is ``J v``. Ops of the trick that
    do not feed the result are removed. Returns one result per ``y`` in ``y``'s form: a
    Value for a Value, a list for a list, a tuple for a tuple."""
    ys, pack = _listed(y, "jvp: y")
    xs, _ = _listed(x, "jvp: x")
    vs, _ = _listed(v, "jvp: v")
    if not ys:
        raise ValueError("jvp: y is empty")
    if len(vs) != len(xs):
        raise ValueError(f"jvp: v must hold one tangent per x: {len(xs)} x, {len(vs)} v")
    program = ys[0].program
    block = current_block(program)
    start, first_id = len(block.ops), program._next_id
    with program.transaction(), program_guard(program), merge_session() as session:
        dummies = [zeros_for(y) for y in ys]
        pulled = _differentiable_grad(ys, xs, dummies)
        result = _differentiable_grad(pulled, dummies, vs)
        sweep_unused(block, start, first_id, result, session)
    return pack(result)


def _jacobian_of(y, x_list):
    """``[dy/dx for x in x_list]``, each shaped ``y.shape + x.shape``: reverse mode over the
    rows of an identity seed, batched by :func:`~symgrad.autodiff.vmap.vmap`, so the program
    holds one backward whatever the size of ``y``."""
    if y.size is None:
        raise ShapeError(f"jacobian: y must have a static shape, got {format_shape(y.shape)}")
    if y.ndim == 0:
        return _differentiable_grad(y, x_list)
    with program_guard(y.program):
        seeds = constant(np.eye(y.size, dtype=y.dtype).reshape((y.size,) + y.shape))
        rows = vmap(lambda seed: _differentiable_grad(y, x_list, [seed]))(seeds)
    jacobians = []
    for stacked, x in zip(rows, x_list):
        if y.ndim > 1:
            if x.shape.count(None) > 1:
                raise ShapeError(f"jacobian: cannot shape the result for x of shape "
                                 f"{format_shape(x.shape)} (more than one unknown dim)")
            stacked = reshape(stacked, list(y.shape) + [-1 if d is None else d for d in x.shape])
        jacobians.append(stacked)
    return jacobians


def jacobian(y, x):
    """The Jacobian of ``y`` (static shape) with respect to ``x``, shaped ``y.shape +
    x.shape``, one per ``x`` in ``x``'s form (a Value for a Value, a list for a list, a tuple
    for a tuple). Built from one VJP batched over the rows of an identity seed (``vmap``), so
    its size does not grow with the size of ``y``."""
    if not isinstance(y, Value):
        raise TypeError(f"jacobian: y must be a Value, got {type(y).__name__}")
    xs, pack = _listed(x, "jacobian: x")
    return pack(_jacobian_of(y, xs))


def hessian(y, x):
    """The Hessian of a scalar ``y`` (one element) with respect to ``x``, shaped ``x.shape +
    x.shape``; for a list (tuple) ``x``, the list of lists (tuple of tuples) of blocks
    ``H[i][j] = d2y / dx_i dx_j``."""
    if not isinstance(y, Value):
        raise TypeError(f"hessian: y must be a Value, got {type(y).__name__}")
    if y.size != 1:
        raise ShapeError(f"hessian: y must hold one element, got shape {format_shape(y.shape)}")
    xs, pack = _listed(x, "hessian: x")
    if y.ndim:
        y = reshape(y, [])
    gradients = _differentiable_grad(y, xs)
    return pack([pack(_jacobian_of(g, xs)) for g in gradients])
