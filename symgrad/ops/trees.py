"""Nested tuples and lists of leaves (Values, numbers, ...): the one flattening that control
flow (loop carries, branch results) and ``vmap`` (arguments, results) share.

``flatten(tree)`` gives ``(leaves, structure)``: the leaves in order, and a structure that is
:data:`LEAF` for a leaf, ``None`` for a ``None`` kept by ``allow_none``, or ``(type,
(child structures...))`` for a tuple or list. ``unflatten(structure, leaves)`` rebuilds the
tree. Recursion is over the nesting of the structure, never over a program.
"""
from __future__ import annotations

LEAF = "*"


def flatten(tree, allow_none=False):
    """``(leaves, structure)`` of ``tree`` (``None`` leaves stay in the structure when
    ``allow_none``)."""
    leaves = []

    def walk(node):
        if isinstance(node, (list, tuple)):
            return (type(node), tuple(walk(item) for item in node))
        if node is None and allow_none:
            return None
        leaves.append(node)
        return LEAF

    return leaves, walk(tree)


def unflatten(structure, leaves):
    """Inverse of :func:`flatten`."""
    leaves = iter(leaves)

    def build(node):
        if node is None:
            return None
        if node == LEAF:
            return next(leaves)
        kind, items = node
        return kind(build(item) for item in items)

    return build(structure)
