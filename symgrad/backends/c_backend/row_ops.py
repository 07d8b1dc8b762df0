"""The row ops of a segment: the softmax family (``softmax_cross_entropy``'s gradient included)
and ``one_hot``.

An op with a :class:`~.lowering.CRowOp` rule whose kind applies to its types is a member of a
segment (:mod:`.segments`), as a loop group is: a C function rendered from
``c/row_op.c.j2``, named from a hash of its code (ops computed alike share it), which the
segment's step calls with the dims of its first input (:func:`row_dims`) and the buffers of
its inputs and result. It loops over the rows along the class axis (``n`` elements ``inner``
apart): the max, then the sum of ``exp(x - max)`` accumulated in double, then the row's
results, rounded as the NumPy backend's kernels round them (``softmax_cross_entropy_grad``:
``(softmax - one_hot) * g``, the row's cotangent ``g``, in that one pass). Integer labels
outside ``[0, n)`` are the NumPy backend's ``ValueError`` (naming the first one), found before
anything is computed; an empty class axis is NumPy's error for the max of an empty array.
"""
from __future__ import annotations

import hashlib

from ..row_kinds import checks_labels, labels_of
from .ctype import c_type
from .kernels import describe
from .lowering import LOWERINGS, CRowOp
from .units import Piece, guarded


def row_kind(op, scalars) -> str | None:
    """The row template's kind for ``op``, or None when it runs on NumPy (no rule, types C
    does not compute, or an input the host inlines as a literal)."""
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CRowOp) or any(v in scalars for v in op.inputs):
        return None
    return rule.kind(op)


def row_dims(op) -> list:
    """The dims whose sizes ``op``'s function reads from ``sg_d``: its first input's."""
    return list(op.inputs[0].dims)


def render_row_function(op, kind, environment) -> Piece:
    """The C function computing row op ``op`` with template kind ``kind``, named from a hash
    of its code without the comment naming ``op``."""
    result = op.results[0]
    first = op.inputs[0]
    indices = labels_of(op, kind)
    code = environment.get_template("c/row_op.c.j2").render(
        name="@NAME@", note="@NOTE@", kind=kind, inputs=len(op.inputs), rank=first.ndim,
        axis=op.attrs["axis"], classes=op.attrs.get("num_classes"),
        check_labels=checks_labels(op, kind), T=c_type(first.dtype), O=c_type(result.dtype),
        L=c_type(indices.dtype) if indices is not None else "",
        unsigned=indices is not None and indices.dtype.kind == "u")
    name = "sg_r_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    code = code.replace("@NAME@", name).replace("@NOTE@", describe(op), 1)
    first_type = c_type(indices.dtype if kind == "one_hot" else first.dtype)
    others = ", const void *" * (len(op.inputs) - 1)
    return Piece(guarded(name, code), name,
                 f"SG_LINK int {name}(const int64_t *restrict, const {first_type} *{others}, "
                 f"{c_type(result.dtype)} *restrict);")
