"""C expressions of the elementwise ops, the C and CUDA backends' common ground.

Each is a C expression over ``{0}``, ``{1}``... (the operands, converted to the op's compute
type), attr names and ``{T}``: the compute type, the result's (or, for a comparison, the
promoted type of its operands). Math functions are called by their ``double`` names; both
backends make them type-generic (CUDA's overloads, the C prelude's ``_Generic`` macros), so
the text is the same for ``float`` and ``double``. Each backend registers these into its own
lowering table, beside its own rules.

``EXPRESSIONS`` are right for every compute type; ``FLOAT_EXPRESSIONS`` only for ``float`` and
``double`` (a backend computes such an op with integer operands some other way);
``CONSTANT_FORMS`` replace an op's expression when an operand is a given constant. Signed zeros,
infinities and NaN come out as the interpreter's NumPy gives them
(``tests/backends/test_special_values.py`` runs every op sample with them on every backend).
"""
from __future__ import annotations

import numpy as np

# NaN-propagating, like np.maximum / np.minimum (a NaN in either operand gives NaN); of two
# equal operands (zeros of either sign) the second, as NumPy's float32 and float64 loops give
MAXIMUM = "((({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"
MINIMUM = "((({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"

EXPRESSIONS = {
    "add": "(({0}) + ({1}))",
    "subtract": "(({0}) - ({1}))",
    "multiply": "(({0}) * ({1}))",
    "divide": "(({T})({0}) / ({T})({1}))",
    "negative": "(-({0}))",
    "square": "(({0}) * ({0}))",
    # 0 - x, not -x: abs(-0.0) is +0.0
    "abs": "(({0}) <= ({T})0 ? ({T})0 - ({0}) : ({0}))",
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
    "where": "(({0}) ? ({1}) : ({2}))",
    # np.clip with constant bounds, np.minimum(hi, np.maximum(lo, x)): x when it equals a bound
    # (clip(-0.0, 0.0, 1.0) is -0.0), NaN when any operand is NaN, hi when lo > hi
    "clip": MINIMUM.format("{2}", MAXIMUM.format("{1}", "{0}")),
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
    "leaky_relu": "(({0}) > ({T})0 ? ({0}) : ({0}) * ({T})({negative_slope}))",
    "erf": "erf({0})",
    "arctan2": "atan2(({T})({0}), ({T})({1}))",
}
# Right for float compute types only: C's pow of integers goes through double (NumPy's integer
# power is exact), and so would floor, ceil and rint of an integer (NumPy returns it unchanged);
# beyond 2**53 the double is not the integer.
FLOAT_EXPRESSIONS = {
    "power": "pow(({T})({0}), ({T})({1}))",
    "floor": "floor({0})",
    "ceil": "ceil({0})",
    "round": "rint({0})",
}


# Forms of an op for an operand that is a constant (inlined as a literal): op -> ((operand,
# constant), expression) pairs. NumPy's power of a constant exponent 0.5 is its sqrt: -0.0 at
# -0.0 and NaN at -inf, where pow (and NumPy's power of an exponent array) gives +0.0 and +inf;
# gcc's vectorizer would make pow(x, 0.5) sqrt(x) in vector lanes only.
CONSTANT_FORMS = {"power": (((1, 0.5), "sqrt(({T})({0}))"),)}


def expression_for(rule, constants: dict) -> str:
    """The expression of lowering ``rule`` (with ``expression`` and ``constant_forms``) for an
    op whose operands at the positions of ``constants`` are those constants."""
    for (position, constant), expression in rule.constant_forms:
        if position in constants and constants[position] == constant:
            return expression
    return rule.expression


INTEGER_SUFFIX = {"int64": "LL", "uint64": "ULL", "uint32": "U"}


def integer_literal(number: int, dtype, narrow_type: str) -> str:
    """The C text of integer ``number`` of ``dtype``: with the suffix of a wide or unsigned
    type, cast to ``narrow_type`` (the backend's type for it) below 32 bits, parenthesized
    when negative; the lowest int64 as an expression (its magnitude is no literal)."""
    dtype = np.dtype(dtype)
    if dtype.name == "int64" and number == -2 ** 63:
        return "(-9223372036854775807LL - 1)"
    text = f"{number}{INTEGER_SUFFIX.get(dtype.name, '')}"
    if dtype.itemsize < 4:
        text = f"(({narrow_type}){text})"
    return text if number >= 0 else f"({text})"
