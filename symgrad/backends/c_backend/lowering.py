"""The C backend's lowering table: a C expression per elementwise op.

A rule is a :class:`CLowering`: ``expression`` is a C expression over ``{0}``, ``{1}``...
(the operands, already converted to the op's compute type), attr names and ``{T}`` (the compute
type: the result's, or for a comparison the promoted type of its operands). Math functions are
named as in C's ``<math.h>`` for ``double`` (``tanh``, ``log1p``...); the generated prelude
makes each of them type-generic, so ``tanh`` of a ``float`` calls ``tanhf`` (vectorized through
glibc's libmvec where it has that function). ``floats_only``: the expression is right only
when the compute type is a float (``pow`` of integers is exact in NumPy, not in C); such an op
with integer operands runs on NumPy instead.

Reductions need no rule: a fusible reduction's :class:`~symgrad.ops.core.Reduction` names the
elementwise op that combines partial results, whose expression the C loop uses. Ops without a
rule (matmul, conv, data movement...) run through the NumPy backend's lowering in the host
module. Add a rule with :func:`register_lowering` (user ops too).
"""
from __future__ import annotations

import dataclasses

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


# NaN-propagating, like np.maximum / np.minimum (a NaN in either operand gives NaN)
MAXIMUM = "((({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"
MINIMUM = "((({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"

EXPRESSIONS = {
    "add": "(({0}) + ({1}))",
    "subtract": "(({0}) - ({1}))",
    "multiply": "(({0}) * ({1}))",
    "divide": "(({T})({0}) / ({T})({1}))",
    "negative": "(-({0}))",
    "square": "(({0}) * ({0}))",
    "abs": "(({0}) < ({T})0 ? -({0}) : ({0}))",
    "sign": "(({0}) != ({0}) ? ({0}) : ({T})((({0}) > ({T})0) - (({0}) < ({T})0)))",
    "maximum": MAXIMUM,
    "minimum": MINIMUM,
    "exp": "exp({0})",
    "log": "log({0})",
    "log1p": "log1p({0})",
    "expm1": "expm1({0})",
    "sqrt": "sqrt({0})",
    "sin": "sin({0})",
    "cos": "cos({0})",
    "tan": "tan({0})",
    "tanh": "tanh({0})",
    "sinh": "sinh({0})",
    "cosh": "cosh({0})",
    "arcsin": "asin({0})",
    "arccos": "acos({0})",
    "arctan": "atan({0})",
    "sigmoid": "(({0}) >= ({T})0 ? ({T})1 / (({T})1 + exp(-({0})))"
               " : exp({0}) / (({T})1 + exp({0})))",
    "floor": "floor({0})",
    "ceil": "ceil({0})",
    "round": "rint({0})",
    "where": "(({0}) ? ({1}) : ({2}))",
    "clip": MINIMUM.format(MAXIMUM, "{2}"),
    "equal": "(({0}) == ({1}))",
    "not_equal": "(({0}) != ({1}))",
    "less": "(({0}) < ({1}))",
    "less_equal": "(({0}) <= ({1}))",
    "greater": "(({0}) > ({1}))",
    "greater_equal": "(({0}) >= ({1}))",
    "logical_and": "(({0}) && ({1}))",
    "logical_or": "(({0}) || ({1}))",
    "logical_not": "(!({0}))",
    "cast": "(({T})({0}))",
    "zeros_like": "(({T})0)",
    "ones_like": "(({T})1)",
    "relu": "((({0}) > ({T})0 || ({0}) != ({0})) ? ({0}) : ({T})0)",
    "gelu": "(({T})0.5 * ({0}) * (({T})1 + tanh(({T})0.7978845608028654"
            " * (({0}) + ({T})0.044715 * ({0}) * ({0}) * ({0})))))",
    "softplus": "(((({0}) > ({T})0) ? ({0}) : ({T})0) + log1p(exp(-fabs({0}))))",
}
FLOATS_ONLY = {"power": "pow(({T})({0}), ({T})({1}))"}

for _name, _expression in EXPRESSIONS.items():
    register_lowering(_name, _expression)
for _name, _expression in FLOATS_ONLY.items():
    register_lowering(_name, _expression, floats_only=True)
