"""The C backend's lowering table: a C expression per elementwise op.

A rule is a :class:`CLowering`: ``expression`` is a C expression as
:mod:`symgrad.backends.c_expressions` describes (the table starts from those); the generated
prelude makes each math function type-generic, so ``exp`` of a ``float`` calls ``expf``
(vectorized through glibc's libmvec where it has that function; ``tanh`` of a ``float`` is
the prelude's own inline ``sg_tanhf``). ``floats_only``: the expression is right only when
the compute type is a float (those of ``FLOAT_EXPRESSIONS``: ``pow`` of integers is exact in
NumPy, not in C); such an op with integer operands runs on NumPy instead.
``constant_forms``: ``((operand, constant), expression)`` pairs, the expression to use when
that operand is that constant, inlined (``CONSTANT_FORMS``: ``x ** 0.5`` is ``sqrt(x)``).
A field of an expression is an operand's number, ``T`` or an attribute's name
(:func:`expression_fields` checks the form when a rule is registered); one the op does not
provide is a :class:`CLoweringError` naming the op, its line and the field
(:meth:`CLowering.code`), never a bare ``IndexError`` or ``KeyError``.

Reductions need no rule: a fusible reduction's :class:`~symgrad.ops.core.Reduction` names the
elementwise op that combines partial results, whose expression the C loop uses. Ops without a
rule (data movement...) run through the NumPy backend's lowering in the host module. Add a
rule with :func:`register_lowering` (user ops too).

The softmax family (``softmax_cross_entropy_grad`` included) and ``one_hot`` have
:class:`CRowOp` rules instead: each is a member of a
segment looping over the rows along its class axis (:mod:`.row_ops`); matmul, conv2d and
pooling (with their gradients) have :class:`CNativeOp` rules: members calling the BLAS GEMM
or looping over windows (:mod:`.native_ops`).
"""
from __future__ import annotations

import dataclasses
import functools
import re
import string

from ...errors import SymgradError
from ...ops.core import ELEMENTWISE
from ..c_expressions import CONSTANT_FORMS, EXPRESSIONS, FLOAT_EXPRESSIONS, expression_for
from ..lowering import LoweringTable, op_name
from ..row_kinds import FLOATS, row_kinds
from .ctype import supported


class CLoweringError(SymgradError, ValueError):
    """A C expression refers to an operand or attribute that the op it lowers lacks."""


@functools.lru_cache(maxsize=None)
def expression_fields(expression: str) -> tuple:
    """The fields of a C ``expression``, each once in order of use (``("0", "T")`` for
    ``"exp({0}) * ({T})2"``); a ``ValueError`` when a field is not an operand's number, ``T``
    or an attribute's name (``{}``, ``{0!r}``, ``{0:x}``, ``{0.real}``) or a brace is
    unmatched (``{{`` and ``}}`` stand for ``{`` and ``}``)."""
    fields = {}
    for _, field, spec, conversion in string.Formatter().parse(expression):
        if field is None:
            continue
        if spec or conversion or not re.fullmatch(r"\d+|[A-Za-z_]\w*", field):
            raise ValueError(f"{{{field}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}} is not a field of a C expression "
                             f"(an operand's number such as {{0}}, {{T}} or an attribute's name)")
        fields[field] = None
    return tuple(fields)


@dataclasses.dataclass(frozen=True)
class CLowering:
    expression: str
    floats_only: bool = False
    constant_forms: tuple = ()

    def code(self, op, operands, T: str, attrs: dict, constants=None) -> str:
        """The C text computing ``op``: the expression (its constant form where ``constants``,
        ``{operand: inlined value}``, match one) with the ``operands``' texts, the compute type
        ``T`` and the ``attrs``' texts put in; :class:`CLoweringError` when it refers to
        something else."""
        expression = expression_for(self, constants or {})
        provided = {str(i) for i in range(len(operands))} | {"T", *attrs}
        missing = [field for field in expression_fields(expression) if field not in provided]
        if missing:
            where = f" (built at {op.loc})" if op.loc else ""
            names = ", ".join(f"{{{field}}}" for field in missing)
            has = f"{len(operands)} operand{'s' * (len(operands) != 1)} " \
                  f"({', '.join(f'{{{i}}}' for i in range(len(operands)))})"
            has += f", the attributes {', '.join(sorted(attrs))}" if attrs else ", no attributes"
            raise CLoweringError(f"the C expression {expression!r} of op {op.name!r}{where} "
                                 f"refers to {names}, which the op does not have: it has "
                                 f"{has} and {{T}}, the compute type")
        return expression.format(*operands, T=T, **attrs)


LOWERINGS = LoweringTable("c")


def register_lowering(op, expression: str | None, floats_only: bool = False,
                      constant_forms=()) -> None:
    """Lower elementwise ``op`` (an OpDef or a name) to the C ``expression`` (see the module
    docstring); None removes its rule. A malformed expression is a ``ValueError`` naming the
    op."""
    if expression is not None:
        try:
            expression_fields(expression)
            for _, form in constant_forms:
                expression_fields(form)
        except ValueError as error:
            raise ValueError(f"the C expression {expression!r} of op {op_name(op)!r}: "
                             f"{error}") from None
    LOWERINGS.register(op, None if expression is None else
                       CLowering(expression, floats_only, tuple(constant_forms)))


def check_custom_expression(name, c, category) -> None:
    """``c=`` is the C expression of an elementwise op over its operands (``{0}``, ``{1}``...)
    and ``{T}``: a user op has no attributes, and an op of another category no C rule."""
    if category != ELEMENTWISE:
        raise ValueError(f"custom_op {name!r}: c= is the C expression of an elementwise op, but "
                         f"category is {category!r}; pass category=\"elementwise\" for an op "
                         f"computed element by element, or leave c= out (backend=\"c\" then "
                         f"runs the op through NumPy)")
    if not isinstance(c, str):
        raise TypeError(f"custom_op {name!r}: c= must be a str (a C expression), "
                        f"got {type(c).__name__}")
    try:
        fields = expression_fields(c)
    except ValueError as error:
        raise ValueError(f"custom_op {name!r}: c={c!r}: {error}") from None
    others = [field for field in fields if field != "T" and not field.isdigit()]
    if others:
        raise ValueError(f"custom_op {name!r}: c={c!r} refers to "
                         f"{', '.join(f'{{{field}}}' for field in others)}, but a custom op "
                         f"has no attributes: use {{0}}, {{1}}... (its operands) and {{T}} "
                         f"(the compute type)")


for _name, _expression in EXPRESSIONS.items():
    register_lowering(_name, _expression, constant_forms=CONSTANT_FORMS.get(_name, ()))
for _name, _expression in FLOAT_EXPRESSIONS.items():
    register_lowering(_name, _expression, floats_only=True,
                      constant_forms=CONSTANT_FORMS.get(_name, ()))
# the C backend's own forms: ``sg_where`` (the prelude) selects by bit masks between floats,
# where gcc makes a branch of a ``?:`` between two loaded values (and leaves the loop scalar:
# a relu's gradient ran 10x slower)
for _name, _expression in {"where": "sg_where({0}, {1}, {2})"}.items():
    register_lowering(_name, _expression)


# --- row ops -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CRowOp:
    """An opaque op computed row by row along its class axis by the C template
    ``c/row_op.c.j2`` (:mod:`.row_ops`): ``kind(op)`` is the template's kind for ``op``'s
    types, or None when they are not ones C computes (the op then runs on NumPy)."""

    kind: object


def _float(value) -> bool:
    return value.dtype.name in FLOATS


def register_row_op(op, kind) -> None:
    """Compute opaque ``op`` with the row template (``kind(op)``: see :class:`CRowOp`); None
    removes its rule."""
    LOWERINGS.register(op, None if kind is None else CRowOp(kind))


for _name, _kind in row_kinds(lambda value: supported(value.dtype) and value.dtype.kind in "iu",
                              supported).items():
    register_row_op(_name, _kind)


# --- native ops ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CNativeOp:
    """An opaque op computed by a segment's member from the C template
    ``c/native_op.c.j2`` (:mod:`.native_ops`): matmul and convolution through the BLAS GEMM,
    pooling by direct loops. ``kind(op)`` is the template's kind, or None when the op's types
    or shapes are not ones that entry computes (it then runs on NumPy)."""

    kind: object


def _same_float(op) -> bool:
    """All inputs and the result float32, or all float64."""
    values = [*op.inputs, op.results[0]]
    return _float(values[0]) and all(v.dtype == values[0].dtype for v in values)


def _batch_only_unknown(op) -> bool:
    """Only axis 0 of the NCHW operands may be unknown (conv weights are static)."""
    return all(None not in v.shape[1:] for v in (*op.inputs, op.results[0]))


def _window_kind(name):
    return lambda op: name if _same_float(op) and _batch_only_unknown(op) else None


def _matmul_kind(op):
    """Matrices, a stack of them times one matrix, or two stacks of equal batch dims (a
    transposed matrix operand is read in place: :mod:`.native_ops`)."""
    a, b = op.inputs
    if not _same_float(op) or a.ndim < 2 or b.ndim < 2:
        return None
    if b.ndim == 2 or (a.ndim == b.ndim and a.dims[:-2] == b.dims[:-2]):
        return "matmul"
    return None


def register_native_op(op, kind) -> None:
    """Compute opaque ``op`` with the native template (``kind(op)``: see :class:`CNativeOp`);
    None removes its rule."""
    LOWERINGS.register(op, None if kind is None else CNativeOp(kind))


register_native_op("matmul", _matmul_kind)
for _name in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d",
              "max_pool2d_grad", "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad"):
    register_native_op(_name, _window_kind(_name))
