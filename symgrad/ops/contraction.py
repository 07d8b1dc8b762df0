"""``einsum(subscripts, *operands)`` with NumPy's semantics, as one op.

The front end parses the subscripts once, with the operands' ranks, into an explicit form
with one letter per dim (``"...ij,jk"`` on a rank-3 and a rank-2 operand becomes
``"Aij,jk->Aik"``): that is the op's ``subscripts`` attr. Implicit output (no ``->``) is the
ellipsis dims, then the letters used once, in alphabetical order; an explicit output may drop
the ellipsis only if it stands for no dims. Dims of one letter must agree or be 1
(broadcast), as in NumPy; a letter repeated within one operand takes its diagonal.

The VJP of operand ``k`` is again an einsum: the other operands and the cotangent contracted
to ``k``'s letters (a ``ones_like`` of operand ``k`` joins when a letter appears only in it, so
that its size is known), then written back onto the diagonal of repeated letters (by
identity matrices), summed over the dims where operand ``k`` was broadcast and broadcast over
those where the others were. So gradients of
any order are einsums too. NumPy runs ``np.einsum`` (``optimize=True``: BLAS for
contractions); bfloat16 operands are computed in float32.
"""
from __future__ import annotations

import string

import numpy as np

from .. import dtypes
from ..errors import ShapeError
from ..ir.dims import unify
from ..ir.value import format_shape
from .core import OPAQUE, OpDef, bind, register
from .source import as_values

__all__ = ["einsum"]

LETTERS = string.ascii_letters


def _ops():
    import symgrad.ops as ops

    return ops


# --- subscripts ---------------------------------------------------------------------------------
def _split_term(term, rank, index):
    """``(letters before '...', letters after)`` of one operand's term, checked against its
    rank."""
    if term.count("...") > 1:
        raise ShapeError(f"operand {index} ('{term}') has more than one ellipsis")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if c not in LETTERS:
            raise ShapeError(f"invalid subscript {c!r} in '{term}' (letters a-z, A-Z only)")
    named = len(head) + len(tail)
    if (not dots and named != rank) or named > rank:
        raise ShapeError(f"operand {index} has rank {rank} but its subscripts '{term}' name "
                         f"{named} dims" + (" and an ellipsis" if dots else ""))
    return head, tail, bool(dots)


def parse(subscripts, ranks):
    """The explicit form (``"ab,bc->ac"``) of ``subscripts`` for operands of ``ranks``."""
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string, got {subscripts!r}")
    text = subscripts.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(f"subscripts '{subscripts}' name {len(terms)} operands, "
                         f"got {len(ranks)}")
    parts = [_split_term(term, rank, i) for i, (term, rank) in enumerate(zip(terms, ranks))]
    used = set(text)
    ellipsis_rank = max([rank - len(h) - len(t) for (h, t, dots), rank in zip(parts, ranks)
                         if dots], default=0)
    spare = [c for c in LETTERS if c not in used]
    if len(spare) < ellipsis_rank:
        raise ShapeError(f"subscripts '{subscripts}' leave too few letters for the ellipsis")
    ellipsis = "".join(spare[:ellipsis_rank])
    full = []
    for (head, tail, dots), rank in zip(parts, ranks):
        own = rank - len(head) - len(tail) if dots else 0
        full.append(head + ellipsis[len(ellipsis) - own:] + tail)
    if arrow:
        if output.count("...") > 1:
            raise ShapeError(f"the output '{output}' has more than one ellipsis")
        out_head, out_dots, out_tail = output.partition("...")
        if ellipsis_rank and not out_dots:
            raise ShapeError(f"the output '{output}' drops the ellipsis, which stands for "
                             f"{ellipsis_rank} dims")
        out = out_head + (ellipsis if out_dots else "") + out_tail
        letters = "".join(full)
        for c in out:
            if out.count(c) > 1:
                raise ShapeError(f"output subscript {c!r} appears more than once")
            if c not in letters:
                raise ShapeError(f"output subscript {c!r} names no operand dim")
    else:
        counts = {c: "".join(full).count(c) for c in "".join(full)}
        named = "".join(h + t for h, t, _ in parts)
        out = ellipsis + "".join(sorted(c for c in set(named) if counts[c] == 1))
    return ",".join(full) + "->" + out


def _terms(subscripts):
    inputs, _, output = subscripts.partition("->")
    return inputs.split(","), output


def _letter_sizes(subscripts, shapes):
    """Each letter's size: the one non-1 size its dims have (``None`` if unknown, 1 if all
    are 1); a ShapeError if two sizes disagree."""
    terms, _ = _terms(subscripts)
    sizes = {}
    for index, (term, shape) in enumerate(zip(terms, shapes)):
        for c, d in zip(term, shape):
            seen = sizes.setdefault(c, d)
            if d == seen or d == 1 or (d is None and seen is not None):
                continue
            if seen == 1 or seen is None:
                sizes[c] = d
                continue
            raise ShapeError(f"subscript {c!r} has size {seen} in one place and {d} in "
                             f"operand {index} ({format_shape(shape)})")
    return sizes


def _einsum_rule(types, attrs):
    subscripts = attrs["subscripts"]
    terms, output = _terms(subscripts)
    shapes = [s for s, _ in types]
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape):
            raise ShapeError(f"'{term}' does not match the rank of {format_shape(shape)}")
    sizes = _letter_sizes(subscripts, shapes)
    return tuple(sizes[c] for c in output), dtypes.promote(*[d for _, d in types])


def _einsum_dims(input_dims, attrs, shapes):
    """Each letter's dim: its dims unify (a dim of 1 broadcasts, as NumPy's einsum allows)."""
    terms, output = _terms(attrs["subscripts"])
    sizes: dict = {}
    for term, dims in zip(terms, input_dims):
        for c, d in zip(term, dims):
            seen = sizes.get(c, 1)
            sizes[c] = d if seen == 1 else seen if d == 1 else unify(seen, d, f"subscript {c!r}")
    return [tuple(sizes[c] for c in output)]


def _sg_einsum(*operands, subscripts):
    """``np.einsum`` (BLAS where it applies); bfloat16 operands are computed in float32."""
    dtype = np.result_type(*operands)
    if dtype.kind == "V":
        operands = [a.astype(np.float32) for a in operands]
    return np.asarray(np.einsum(subscripts, *operands, optimize=len(operands) > 1),
                      dtype=dtype)


# --- VJP ----------------------------------------------------------------------------------------
def _einsum_vjp(op, cotangents):
    return [(lambda k=k: _operand_grad(op, cotangents[0], k)) for k in range(len(op.inputs))]


def _operand_grad(op, g, k):
    ops = _ops()
    terms, output = _terms(op.attrs["subscripts"])
    x = op.inputs[k]
    term = terms[k]
    unique = "".join(dict.fromkeys(term))
    others = [(t, v) for i, (t, v) in enumerate(zip(terms, op.inputs)) if i != k]
    reached = set("".join(t for t, _ in others) + output)
    parts = others + [(output, g)]
    if not set(unique) <= reached:   # a letter only operand k has: ones_like gives its size
        parts.append((term, ops.ones_like(x, dtype=g.dtype)))
    grad = einsum_explicit(",".join(t for t, _ in parts) + "->" + unique,
                           [v for _, v in parts])
    if len(unique) < len(term):
        grad = _onto_diagonal(grad, unique, term, x)
    summed = tuple(i for i, (d, n) in enumerate(zip(x.shape, grad.shape)) if d == 1 and n != 1)
    if summed:   # operand k was broadcast along these dims
        grad = ops.sum(grad, axis=summed, keepdims=True)
    if any(n == 1 and d != 1 for d, n in zip(x.shape, grad.shape)):   # the others were
        from .shape import broadcast_like

        grad = broadcast_like(grad, x)
    return grad if grad.dtype == x.dtype else ops.cast(grad, x.dtype)


def _onto_diagonal(grad, unique, term, x):
    """``grad`` (letters ``unique``) as a tensor of ``term``'s dims, zero off the diagonal of
    each repeated letter: one identity matrix per repeat, each giving the repeat a fresh
    letter."""
    spare = iter(c for c in LETTERS if c not in term)
    letters, factors = [], [(unique, grad)]
    for i, c in enumerate(term):
        if c not in term[:i]:
            letters.append(c)
            continue
        n = x.shape[i]
        if n is None:
            raise ShapeError(f"einsum: the repeated subscript {c!r} of '{term}' needs a static "
                             f"dim for its gradient, got {x.type_str}")
        fresh = next(spare)
        letters.append(fresh)
        factors.append((c + fresh, _ops().constant(np.eye(n, dtype=grad.dtype))))
    return einsum_explicit(",".join(t for t, _ in factors) + "->" + "".join(letters),
                           [v for _, v in factors])


def _einsum_batch(op, inputs, axes):
    """A letter no term uses names the batch: it leads the batched operands' terms and the
    output."""
    subscripts = op.attrs["subscripts"]
    letter = next(c for c in LETTERS if c not in subscripts)
    terms, output = _terms(subscripts)
    terms = [term if axis is None else letter + term for term, axis in zip(terms, axes)]
    return [einsum_explicit(",".join(terms) + "->" + letter + output, inputs)], [0]


einsum_p = register(OpDef(
    "einsum", OPAQUE, _einsum_rule, impl=_sg_einsum, vjp=_einsum_vjp,
    dims=_einsum_dims,
    batch=_einsum_batch,
    doc="Einstein summation over explicit subscripts (one letter per dim)."))


def einsum_explicit(subscripts, operands):
    """Internal: the einsum op for explicit subscripts (one letter per dim of each operand)."""
    return bind(einsum_p, list(operands), {"subscripts": subscripts})


def einsum(subscripts, *operands):
    """``np.einsum``: Einstein summation of ``operands`` as ``subscripts`` says
    (``"bij,bjk->bik"``, implicit output, ``...`` for leading dims, repeated letters for
    diagonals). The result's dtype is the operands' promoted dtype."""
    if not operands:
        raise TypeError("einsum: needs at least one operand")
    values = as_values(*operands)
    from .shape import frontend_checks

    with frontend_checks("einsum", values):
        explicit = parse(subscripts, [v.ndim for v in values])
    return einsum_explicit(explicit, values)
