"""The C backend's lowering table: a C expression per elementwise op.

A rule is a :class:`CLowering`: ``expression`` is a C expression as
:mod:`symgrad.backends.c_expressions` describes (the table starts from those); the generated
prelude makes each math function type-generic, so ``tanh`` of a ``float`` calls ``tanhf``
(vectorized through glibc's libmvec where it has that function). ``floats_only``: the expression is right only
when the compute type is a float (``pow`` of integers is exact in NumPy, not in C); such an op
with integer operands runs on NumPy instead.

Reductions need no rule: a fusible reduction's :class:`~symgrad.ops.core.Reduction` names the
elementwise op that combines partial results, whose expression the C loop uses. Ops without a
rule (matmul, conv, data movement...) run through the NumPy backend's lowering in the host
module. Add a rule with :func:`register_lowering` (user ops too).
"""
from __future__ import annotations

import dataclasses

from ..c_expressions import EXPRESSIONS, POWER
from ..lowering import LoweringTable


@dataclasses.dataclass(frozen=True)
class CLowering:
    expression: str
    floats_only: bool = False


LOWERINGS = LoweringTable("c")


def register_lowering(op, expression: str | None, floats_only: bool = False) -> None:
    """Lower elementwise ``op`` (an OpDef or a name) to the C ``expression`` (see the module
    docstring); None removes its rule."""
    LOWERINGS.register(op, None if expression is None else CLowering(expression, floats_only))


for _name, _expression in EXPRESSIONS.items():
    register_lowering(_name, _expression)
register_lowering("power", POWER, floats_only=True)
