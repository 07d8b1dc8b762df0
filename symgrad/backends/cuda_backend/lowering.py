"""The CUDA backend's lowering table: how an op computes one element in a kernel.

A rule is a :class:`CudaLowering`: ``expression`` is a C expression over ``{0}``, ``{1}``...,
attr names and ``{T}`` (the compute type of the op: the promoted input type for comparisons,
else the result's; CUDA's math overloads serve ``float`` and ``double`` alike), as
:mod:`symgrad.backends.c_expressions` describes (the table starts from those). An
``indexed`` rule computes an op of any category element by element over its own result
(random numbers): its inputs keep their own types, the expression also reads ``s``, the flat
index of the element, and the op runs as a kernel of its own; ``helpers`` is the device code
the expression calls, which the prelude of every program holds. ``floats_only``: the
expression is right only when the compute type is ``float`` or ``double`` (those of
``FLOAT_EXPRESSIONS``); such an op with integer operands runs on the host through CuPy.
``constant_forms``: ``((operand, constant), expression)`` pairs, the expression to use when
that operand is that constant, inlined (``CONSTANT_FORMS``: ``x ** 0.5`` is ``sqrt(x)``).

Fusible reductions need no rule: their :class:`~symgrad.ops.core.Reduction` names the
elementwise op that combines partial results. Every other op runs on the host through CuPy
with the NumPy backend's lowering. Add a rule with :func:`register_lowering` (user ops too).
"""
from __future__ import annotations

import dataclasses
import importlib.resources

from ...ops.random import PARAMS as RANDOM_PARAMS
from ...ops.random import RANDOM_OPS
from ..c_expressions import CONSTANT_FORMS, EXPRESSIONS, FLOAT_EXPRESSIONS
from ..lowering import LoweringTable


@dataclasses.dataclass(frozen=True)
class CudaLowering:
    expression: str
    indexed: bool = False
    helpers: tuple = ()
    floats_only: bool = False
    constant_forms: tuple = ()


LOWERINGS = LoweringTable("cuda")


def register_lowering(op, expression: str | None, *, indexed=False, helpers=(),
                      floats_only=False, constant_forms=()) -> None:
    """Lower ``op`` (an OpDef or a name) to the CUDA ``expression`` (see the module
    docstring); None removes its rule."""
    LOWERINGS.register(op, None if expression is None else
                       CudaLowering(expression, indexed, tuple(helpers), floats_only,
                                    tuple(constant_forms)))


def device_helpers() -> list[str]:
    """The device code that registered expressions call, each text once: the prelude of
    every program holds it."""
    return list(dict.fromkeys(text for rule in LOWERINGS.rules.values() for text in rule.helpers))


for _name, _expression in EXPRESSIONS.items():
    register_lowering(_name, _expression, constant_forms=CONSTANT_FORMS.get(_name, ()))
for _name, _expression in FLOAT_EXPRESSIONS.items():
    register_lowering(_name, _expression, floats_only=True,
                      constant_forms=CONSTANT_FORMS.get(_name, ()))

# the device code of the random ops (Philox and the float math of symgrad.ops.random)
RANDOM_DEVICE_CODE = (importlib.resources.files("codegen_templates") / "cuda" / "random.cuh") \
    .read_text(encoding="utf-8").rstrip("\n")
for _op in RANDOM_OPS:
    _first, _second = RANDOM_PARAMS[_op.name]
    register_lowering(_op, f"sg_{_op.name}((unsigned long long)(s), {{0}}, {{1}}, {{seed}}, "
                           f"{{stream}}, {{bits}}, {{{_first}}}, {{{_second}}})",
                      indexed=True, helpers=(RANDOM_DEVICE_CODE,))
