"""C entry points of the row ops: the softmax family (``softmax_cross_entropy``'s gradient
included) and ``one_hot``.

An op with a :class:`~.lowering.CRowOp` rule whose kind applies to its types becomes one entry
point of its own, rendered from ``c/row_op.c.j2``: it takes one tuple (the op's inputs, then its
result, which the host allocates with ``np.empty``, then the sizes of its symbolic dims from the
binding), checks every array's dims against them, releases the GIL and loops over the rows
along the class axis (``n`` elements ``inner`` apart): the max, then the sum of ``exp(x - max)``
accumulated in double, then the row's results, rounded as the NumPy backend's kernels round
them (``softmax_cross_entropy_grad``: ``(softmax - one_hot) * g``, the row's cotangent ``g``,
in that one pass). Integer labels outside ``[0, n)`` are the NumPy backend's ``ValueError`` (naming the
first one) before anything is computed; an empty class axis is NumPy's error for the max of an
empty array.
"""
from __future__ import annotations

import dataclasses

from ..row_kinds import labels_of
from .ctype import c_type, value_label
from .entry_sizes import EntrySizes
from .kernels import describe
from .lowering import LOWERINGS, CRowOp


@dataclasses.dataclass
class EntryCall:
    """A rendered entry point of one op (a row op, symbol ``sg_<unit>_r<number>``, or a native
    op, ``sg_<unit>_n<number>``): its C ``code`` and the symbolic dims whose ``sizes`` the
    host passes after the arrays, from the binding (it allocates the result with them too)."""

    code: str
    sizes: tuple = ()


def row_kind(op, scalars) -> str | None:
    """The row template's kind for ``op``, or None when it runs on NumPy (no rule, types C
    does not compute, or an input the host inlines as a literal)."""
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CRowOp) or any(v in scalars for v in op.inputs):
        return None
    return rule.kind(op)


def render_row_op(number, op, kind, environment) -> EntryCall:
    """Row op ``number`` computing ``op`` with template kind ``kind``."""
    result = op.results[0]
    first = op.inputs[0]
    sizes = EntrySizes()
    checks = sizes.checks(op.inputs + [result])
    args = [dict(writable=0, type=c_type(v.dtype), ndim=v.ndim, what=value_label(v))
            for v in op.inputs]
    args.append(dict(writable=1, type=c_type(result.dtype), ndim=result.ndim,
                     what=value_label(result)))
    indices = labels_of(op, kind)
    code = environment.get_template("c/row_op.c.j2").render(
        number=number, note=describe(op), kind=kind, args=args, checks=checks,
        sizes=len(sizes.dims), axis=op.attrs["axis"], classes=op.attrs.get("num_classes"),
        strict=bool(op.attrs.get("strict")), T=c_type(first.dtype), O=c_type(result.dtype),
        L=c_type(indices.dtype) if indices is not None else "",
        unsigned=indices is not None and indices.dtype.kind == "u")
    return EntryCall(code, sizes.dims)

