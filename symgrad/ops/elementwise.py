"""Elementwise ops: arithmetic, transcendental, comparison, logical, cast, where, clip.

Each op is an :class:`OpDef` followed by its front-end function. All follow NumPy
broadcasting and NumPy 2 promotion with weak Python scalars (``as_values`` gives a Python
scalar the dtype NumPy would, so ``float32 * 2.0`` stays float32).

dtype policy (checked when the op is built, ``DTypeError`` naming the op):

- Arithmetic and math ops take the result dtype NumPy's own ufunc type resolution gives
  (integers through ``exp``/``sqrt``/... become floats exactly as in NumPy: int32 and int64 give
  float64). They reject inputs that are *all* bool (``sqrt(mask)``, ``mask - mask``): cast first.
  A bool mixed with numbers is fine (``mask * x``).
- Comparisons take any dtypes and give bool; logical ops take and give bool only.
- ``cast`` converts to any supported dtype; ``where`` needs a bool condition.

Gradients: integer and bool results carry none (comparisons and logical ops have no VJP, a cast
to an integer dtype returns ``None``); the piecewise-constant float ops ``floor``, ``ceil``,
``round`` and ``sign`` stay connected with a zero gradient. Ties: ``maximum``/``minimum`` split
the gradient evenly at ``a == b``; ``clip`` passes it at its (inclusive) bounds; ``abs`` gives 0
at 0. Every VJP is built from symgrad ops, so it is differentiable again.

An op computed exactly by a NumPy ufunc has that ufunc as its reference ``impl``, so backends
know it is that ufunc (:attr:`~symgrad.ops.core.OpDef.ufunc`).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import ComparisonError, DTypeError, ShapeError
from .core import ELEMENTWISE, Algebra, OpDef, atomic, bind, broadcast_shapes, register
from .source import as_values

__all__ = [
    "add", "subtract", "multiply", "divide", "power", "negative",
    "exp", "log", "log1p", "expm1", "sqrt", "square", "abs", "sign",
    "sin", "cos", "tan", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan", "sigmoid",
    "maximum", "minimum", "where", "clip", "floor", "ceil", "round",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "cast", "zeros_like", "ones_like",
]


# --- shape/dtype rules ------------------------------------------------------------------------
def _dtype_list(types):
    return ", ".join(str(d) for _, d in types)


_resolved: dict = {}


def _resolve(np_ufunc, in_dtypes):
    """The result dtype NumPy's ufunc ``np_ufunc`` gives for inputs of ``in_dtypes`` (cached)."""
    key = (np_ufunc, *in_dtypes)
    result = _resolved.get(key)
    if result is None:
        try:
            result = np.dtype(np_ufunc.resolve_dtypes(tuple(in_dtypes) + (None,))[-1])
        except TypeError:
            raise DTypeError(f"NumPy's {np_ufunc.__name__} has no loop for "
                             f"{', '.join(map(str, in_dtypes))}") from None
        _resolved[key] = result
    return result


def math_rule(np_ufunc):
    """Rule of an arithmetic/math op computed like ``np_ufunc``: broadcast the shapes, take the
    dtype NumPy's type resolution gives; reject inputs that are all bool."""
    def rule(types, attrs):
        if all(d.kind == "b" for _, d in types):
            raise DTypeError(f"needs numeric inputs, got {_dtype_list(types)} "
                             f"(cast bool to a number first)")
        shape = broadcast_shapes(*[s for s, _ in types])
        return shape, _resolve(np_ufunc, [d for _, d in types])
    rule.__doc__ = f"Broadcast; dtype as np.{np_ufunc.__name__}; not all-bool."
    return rule


same_rule = math_rule(np.negative)        # one numeric input; same shape and dtype
float_unary_rule = math_rule(np.tanh)     # one numeric input; integers become NumPy's float
binary_rule = math_rule(np.add)           # broadcast and promote two numeric inputs


def compare_rule(types, attrs):
    """Broadcast any two inputs; the result is bool."""
    return broadcast_shapes(*[s for s, _ in types]), np.dtype(bool)


def logical_rule(types, attrs):
    """Broadcast bool inputs; the result is bool."""
    if any(d.kind != "b" for _, d in types):
        raise DTypeError(f"needs bool inputs, got {_dtype_list(types)} "
                         f"(compare or cast to bool first)")
    return broadcast_shapes(*[s for s, _ in types]), np.dtype(bool)


def where_rule(types, attrs):
    """``where(cond, x, y)``: cond bool; broadcast all three; promote x and y."""
    (_, cond), (_, x), (_, y) = types
    if cond.kind != "b":
        raise DTypeError(f"needs a bool condition, got {cond}")
    return broadcast_shapes(*[s for s, _ in types]), dtypes.promote(x, y)


def clip_rule(types, attrs):
    """``clip(x, lo, hi)``: broadcast all three; promote; not all-bool."""
    if all(d.kind == "b" for _, d in types):
        raise DTypeError(f"needs numeric inputs, got {_dtype_list(types)}")
    return broadcast_shapes(*[s for s, _ in types]), dtypes.promote(*[d for _, d in types])


def cast_rule(types, attrs):
    """The input's shape with the dtype attr (``cast``, ``zeros_like``, ``ones_like``)."""
    (shape, _), = types
    return shape, attrs["dtype"]


# --- VJP helpers ------------------------------------------------------------------------------
def _unbroadcast(g, like):
    from .shape import unbroadcast

    return unbroadcast(g, like)


def _both(op, make_ga, make_gb):
    """Lazy gradients of a binary op's two inputs, each summed back to its input's shape
    (the backward pass builds only those it needs, e.g. not the one of ``x * 2.0``'s 2.0)."""
    a, b = op.inputs
    return [lambda: _unbroadcast(make_ga(), a), lambda: _unbroadcast(make_gb(), b)]


def _once(make):
    """``make`` called at most once: a subexpression shared by two lazy gradients."""
    built = []

    def value():
        if not built:
            built.append(make())
        return built[0]
    return value


def _zero_vjp(op, g):
    """Piecewise-constant ops: connected, with a zero gradient."""
    return [zeros_like(g[0])]


def _divide_vjp(op, g):
    ga = _once(lambda: g[0] / op.inputs[1])
    return _both(op, ga, lambda: -(ga() * op.results[0]))


def _known_nonzero(value) -> bool:
    """Is ``value`` a constant (or fill) known at build time to hold no zero? Never for a
    block argument (a loop carry, a scanned slice, a branch operand): it has no op."""
    op = value.op
    if op is None:
        return False
    fill = op.opdef.algebra.fill
    uniform = fill(op) if fill is not None else None
    return uniform is not None and uniform != 0


def _power_vjp(op, g):
    x, y = op.inputs

    def gx():
        # y * x ** (y - 1), taken as 0 where y == 0 (x ** 0 is constant in x), so the gradient
        # at 0 ** 0 is 0 rather than 0 * inf = NaN (as in JAX and PyTorch); an exponent known
        # to be nonzero (x ** 2) needs no guard
        if _known_nonzero(y):
            return g[0] * y * x ** (y - 1)
        return g[0] * where(y == 0, 0, y * x ** where(y == 0, 1, y - 1))

    def gy():
        # log(x) only where it is finite, so gy is never 0 * NaN (x ** y at x == 0 is constant
        # in y from the right); the inner where keeps log's own derivative finite too.
        positive = x > 0
        return g[0] * op.results[0] * where(positive, log(where(positive, x, 1)), 0)
    return _both(op, gx, gy)


def _extremum_vjp(wins):
    """VJP of maximum/minimum: ``wins(a, b)`` is where a is picked; ties split evenly."""
    def vjp(op, g):
        a, b = op.inputs
        ga = _once(lambda: g[0] * where(equal(a, b), 0.5, cast(wins(a, b), g[0].dtype)))
        return _both(op, ga, lambda: g[0] - ga())
    return vjp


def _where_vjp(op, g):
    cond = op.inputs[0]
    return [None, lambda: _unbroadcast(where(cond, g[0], 0), op.inputs[1]),
            lambda: _unbroadcast(where(cond, 0, g[0]), op.inputs[2])]


def _clip_vjp(op, g):
    x, lo, hi = op.inputs
    ordered = _once(lambda: lo <= hi)
    return [lambda: _unbroadcast(where((x >= lo) & (x <= hi), g[0], 0), x),
            lambda: _unbroadcast(where((x < lo) & ordered(), g[0], 0), lo),
            lambda: _unbroadcast(where((x > hi) | ~ordered(), g[0], 0), hi)]


def _cast_vjp(op, g):
    source = op.inputs[0].dtype
    if not (dtypes.is_float(source) and dtypes.is_float(op.attrs["dtype"])):
        return [None]
    return [cast(g[0], source)]


# --- NumPy references -------------------------------------------------------------------------
def sigmoid_ref(x):
    """Logistic function without overflow: exp is only taken of -|x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1, e) / (1 + e)


def _numpy_fill(fill):
    def impl(x, dtype):
        return np.full(np.shape(x), fill, dtype=dtype)
    return impl




# --- arithmetic -------------------------------------------------------------------------------
add_p = register(OpDef(
    "add", ELEMENTWISE, binary_rule, np.add, algebra=Algebra(identity=(-0.0, (0, 1))),
    vjp=lambda op, g: _both(op, lambda: g[0], lambda: g[0])))

subtract_p = register(OpDef(
    "subtract", ELEMENTWISE, math_rule(np.subtract), np.subtract,
    algebra=Algebra(identity=(0.0, (1,))),
    vjp=lambda op, g: _both(op, lambda: g[0], lambda: -g[0])))

multiply_p = register(OpDef(
    "multiply", ELEMENTWISE, math_rule(np.multiply), np.multiply,
    algebra=Algebra(identity=(1, (0, 1)), negation=(-1, (0, 1))),
    vjp=lambda op, g: _both(op, lambda: g[0] * op.inputs[1], lambda: g[0] * op.inputs[0])))

divide_p = register(OpDef(
    "divide", ELEMENTWISE, math_rule(np.divide), np.divide, vjp=_divide_vjp,
    algebra=Algebra(identity=(1, (1,)), negation=(-1, (1,)))))

power_p = register(OpDef(
    "power", ELEMENTWISE, math_rule(np.power), np.power, vjp=_power_vjp,
    algebra=Algebra(identity=(1, (1,)))))

negative_p = register(OpDef(
    "negative", ELEMENTWISE, same_rule, np.negative,
    algebra=Algebra(negates=True, involution=True),
    vjp=lambda op, g: [-g[0]]))

square_p = register(OpDef(
    "square", ELEMENTWISE, math_rule(np.square), np.square,
    vjp=lambda op, g: [g[0] * (op.inputs[0] * 2)]))

abs_p = register(OpDef(
    "abs", ELEMENTWISE, math_rule(np.absolute), np.absolute,
    vjp=lambda op, g: [g[0] * sign(op.inputs[0])]))

sign_p = register(OpDef(
    "sign", ELEMENTWISE, math_rule(np.sign), np.sign, vjp=_zero_vjp))

maximum_p = register(OpDef(
    "maximum", ELEMENTWISE, math_rule(np.maximum), np.maximum,
    vjp=_extremum_vjp(lambda a, b: a > b)))

minimum_p = register(OpDef(
    "minimum", ELEMENTWISE, math_rule(np.minimum), np.minimum,
    vjp=_extremum_vjp(lambda a, b: a < b)))

# --- transcendental ---------------------------------------------------------------------------
exp_p = register(OpDef(
    "exp", ELEMENTWISE, math_rule(np.exp), np.exp,
    vjp=lambda op, g: [g[0] * op.results[0]]))

log_p = register(OpDef(
    "log", ELEMENTWISE, math_rule(np.log), np.log,
    vjp=lambda op, g: [g[0] / op.inputs[0]]))

log1p_p = register(OpDef(
    "log1p", ELEMENTWISE, math_rule(np.log1p), np.log1p,
    vjp=lambda op, g: [g[0] / (op.inputs[0] + 1)]))

expm1_p = register(OpDef(
    "expm1", ELEMENTWISE, math_rule(np.expm1), np.expm1,
    vjp=lambda op, g: [g[0] * (op.results[0] + 1)]))

sqrt_p = register(OpDef(
    "sqrt", ELEMENTWISE, math_rule(np.sqrt), np.sqrt,
    vjp=lambda op, g: [g[0] / (op.results[0] * 2)]))

sin_p = register(OpDef(
    "sin", ELEMENTWISE, math_rule(np.sin), np.sin,
    vjp=lambda op, g: [g[0] * cos(op.inputs[0])]))

cos_p = register(OpDef(
    "cos", ELEMENTWISE, math_rule(np.cos), np.cos,
    vjp=lambda op, g: [-(g[0] * sin(op.inputs[0]))]))

tan_p = register(OpDef(
    "tan", ELEMENTWISE, math_rule(np.tan), np.tan,
    vjp=lambda op, g: [g[0] * (op.results[0] * op.results[0] + 1)]))

tanh_p = register(OpDef(
    "tanh", ELEMENTWISE, float_unary_rule, np.tanh,
    vjp=lambda op, g: [g[0] * (1 - op.results[0] * op.results[0])]))

sinh_p = register(OpDef(
    "sinh", ELEMENTWISE, math_rule(np.sinh), np.sinh,
    vjp=lambda op, g: [g[0] * cosh(op.inputs[0])]))

cosh_p = register(OpDef(
    "cosh", ELEMENTWISE, math_rule(np.cosh), np.cosh,
    vjp=lambda op, g: [g[0] * sinh(op.inputs[0])]))

arcsin_p = register(OpDef(
    "arcsin", ELEMENTWISE, math_rule(np.arcsin), np.arcsin,
    vjp=lambda op, g: [g[0] / sqrt(1 - op.inputs[0] * op.inputs[0])]))

arccos_p = register(OpDef(
    "arccos", ELEMENTWISE, math_rule(np.arccos), np.arccos,
    vjp=lambda op, g: [-(g[0] / sqrt(1 - op.inputs[0] * op.inputs[0]))]))

arctan_p = register(OpDef(
    "arctan", ELEMENTWISE, math_rule(np.arctan), np.arctan,
    vjp=lambda op, g: [g[0] / (op.inputs[0] * op.inputs[0] + 1)]))

sigmoid_p = register(OpDef(
    "sigmoid", ELEMENTWISE, float_unary_rule, sigmoid_ref,
    vjp=lambda op, g: [g[0] * (op.results[0] * (1 - op.results[0]))]))

# --- rounding (zero gradient) -----------------------------------------------------------------
floor_p = register(OpDef(
    "floor", ELEMENTWISE, math_rule(np.floor), np.floor, vjp=_zero_vjp))

ceil_p = register(OpDef(
    "ceil", ELEMENTWISE, math_rule(np.ceil), np.ceil, vjp=_zero_vjp))

round_p = register(OpDef(   # np.round: half to even, integers kept as they are
    "round", ELEMENTWISE, math_rule(np.floor), np.round, vjp=_zero_vjp))

# --- selection --------------------------------------------------------------------------------
def _sg_where(condition, x, y, out=None):
    """``np.where(condition, x, y)`` for the NumPy backend, bit for bit (NaN payloads and the
    sign of zero included), written into ``out`` when given (an array of the result's shape
    and dtype, which may be ``x`` or ``y`` itself). NumPy's ``where`` branches on each
    element, about 4 ns an element where the condition is unpredictable (a relu's gradient,
    ``where(x > 0, g, 0)``); for a floating result this selects on the bits instead: ``x``'s
    bits times the condition (0 or 1) when ``y`` is a scalar +0.0, else ``(x & m) | (y & ~m)``
    with ``m`` all ones where ``condition`` holds. Other dtypes, and a condition that is not
    a bool array, go to ``np.where``."""
    dtype = np.result_type(x, y)
    if dtype.kind != "f" or dtype.itemsize not in (2, 4, 8) or \
            not (isinstance(condition, np.ndarray) and condition.dtype == np.bool_):
        if out is None:
            return np.where(condition, x, y)
        out[...] = np.where(condition, x, y)
        return out
    bits = np.dtype(f"u{dtype.itemsize}")
    x_bits = np.asarray(x, dtype).view(bits)
    y_bits = np.asarray(y, dtype).view(bits)
    out_bits = None if out is None else out.view(bits)
    if not y_bits.ndim and y_bits == 0:
        return np.multiply(x_bits, condition, out=out_bits).view(dtype)
    mask = np.negative(condition, dtype=bits)
    y_part = np.bitwise_and(y_bits, np.invert(mask))    # before out (which may be y) changes
    picked = np.bitwise_and(x_bits, mask, out=out_bits)
    return np.bitwise_or(picked, y_part, out=out_bits).view(dtype)


where_p = register(OpDef(
    "where", ELEMENTWISE, where_rule, np.where, vjp=_where_vjp))

clip_p = register(OpDef(   # np.clip: minimum(maximum(x, lo), hi)
    "clip", ELEMENTWISE, clip_rule, np.clip, vjp=_clip_vjp))

# --- comparisons and logic (bool results: no gradient) ----------------------------------------
equal_p = register(OpDef(
    "equal", ELEMENTWISE, compare_rule, np.equal))

not_equal_p = register(OpDef(
    "not_equal", ELEMENTWISE, compare_rule, np.not_equal))

less_p = register(OpDef(
    "less", ELEMENTWISE, compare_rule, np.less))

less_equal_p = register(OpDef(
    "less_equal", ELEMENTWISE, compare_rule, np.less_equal))

greater_p = register(OpDef(
    "greater", ELEMENTWISE, compare_rule, np.greater))

greater_equal_p = register(OpDef(
    "greater_equal", ELEMENTWISE, compare_rule, np.greater_equal))

logical_and_p = register(OpDef(
    "logical_and", ELEMENTWISE, logical_rule, np.logical_and))

logical_or_p = register(OpDef(
    "logical_or", ELEMENTWISE, logical_rule, np.logical_or))

logical_not_p = register(OpDef(
    "logical_not", ELEMENTWISE, logical_rule, np.logical_not))

# --- dtype and constants ----------------------------------------------------------------------
cast_p = register(OpDef(
    "cast", ELEMENTWISE, cast_rule, lambda x, dtype: x.astype(dtype), vjp=_cast_vjp,
    algebra=Algebra(no_op_when_same_type=True)))

zeros_like_p = register(OpDef(
    "zeros_like", ELEMENTWISE, cast_rule, _numpy_fill(0), vjp=lambda op, g: [None],
    algebra=Algebra(fill=lambda op: 0)))

ones_like_p = register(OpDef(
    "ones_like", ELEMENTWISE, cast_rule, _numpy_fill(1), vjp=lambda op, g: [None],
    algebra=Algebra(fill=lambda op: 1)))


# --- front end --------------------------------------------------------------------------------
def add(x, y):
    """``x + y`` with broadcasting."""
    return bind(add_p, as_values(x, y))


def subtract(x, y):
    """``x - y`` with broadcasting."""
    return bind(subtract_p, as_values(x, y))


def multiply(x, y):
    """``x * y`` with broadcasting."""
    return bind(multiply_p, as_values(x, y))


def divide(x, y):
    """True division ``x / y`` (integers give float64, as in NumPy)."""
    return bind(divide_p, as_values(x, y))


def power(x, y):
    """``x ** y``; either may be a Value or a scalar."""
    return bind(power_p, as_values(x, y))


def negative(x):
    """``-x``."""
    return bind(negative_p, as_values(x))


def square(x):
    """``x * x``."""
    return bind(square_p, as_values(x))


def abs(x):  # noqa: A001  (NumPy's name)
    """``|x|`` (gradient 0 at 0)."""
    return bind(abs_p, as_values(x))


def sign(x):
    """-1, 0 or 1 (NaN stays NaN); zero gradient."""
    return bind(sign_p, as_values(x))


def maximum(x, y):
    """Elementwise maximum (NaN propagates); ties split the gradient evenly."""
    return bind(maximum_p, as_values(x, y))


def minimum(x, y):
    """Elementwise minimum (NaN propagates); ties split the gradient evenly."""
    return bind(minimum_p, as_values(x, y))


def exp(x):
    return bind(exp_p, as_values(x))


def log(x):
    return bind(log_p, as_values(x))


def log1p(x):
    """``log(1 + x)``, accurate for small x."""
    return bind(log1p_p, as_values(x))


def expm1(x):
    """``exp(x) - 1``, accurate for small x."""
    return bind(expm1_p, as_values(x))


def sqrt(x):
    return bind(sqrt_p, as_values(x))


def sin(x):
    return bind(sin_p, as_values(x))


def cos(x):
    return bind(cos_p, as_values(x))


def tan(x):
    return bind(tan_p, as_values(x))


def tanh(x):
    return bind(tanh_p, as_values(x))


def sinh(x):
    return bind(sinh_p, as_values(x))


def cosh(x):
    return bind(cosh_p, as_values(x))


def arcsin(x):
    return bind(arcsin_p, as_values(x))


def arccos(x):
    return bind(arccos_p, as_values(x))


def arctan(x):
    return bind(arctan_p, as_values(x))


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``, computed without overflow."""
    return bind(sigmoid_p, as_values(x))


def floor(x):
    """Round down; zero gradient."""
    return bind(floor_p, as_values(x))


def ceil(x):
    """Round up; zero gradient."""
    return bind(ceil_p, as_values(x))


def round(x):  # noqa: A001  (NumPy's name)
    """Round half to even, like ``np.round``; zero gradient."""
    return bind(round_p, as_values(x))


def where(cond, x, y):
    """``x`` where the bool ``cond`` holds, else ``y`` (all three broadcast)."""
    return bind(where_p, as_values(cond, x, y))


def _no_bound(dtype, upper):
    """The bound that never clips a value of ``dtype``."""
    if dtypes.is_float(dtype):
        return float("inf") if upper else float("-inf")
    if dtype.kind == "b":
        return upper
    info = np.iinfo(dtype)
    return int(info.max if upper else info.min)


def clip(x, min=None, max=None):  # noqa: A002  (NumPy's names)
    """``minimum(maximum(x, min), max)``; bounds are scalars, Values or None (no bound).
    The gradient passes to x where ``min <= x <= max`` (inclusive), else to the bound."""
    x, = as_values(x)
    lo = _no_bound(x.dtype, upper=False) if min is None else min
    hi = _no_bound(x.dtype, upper=True) if max is None else max
    return bind(clip_p, as_values(x, lo, hi))


def equal(x, y):
    return bind(equal_p, as_values(x, y))


def not_equal(x, y):
    return bind(not_equal_p, as_values(x, y))


_OPERATOR_COMPARISONS = {"==": equal, "!=": not_equal}
_FORGETTABLE = {equal_p, not_equal_p}
_LOOKUP_HINT = ("`value in list`, `list.index(value)` and `if a == b:` compare Values elementwise "
                "(an op, whose truth is unknown until the program runs); look a Value up by "
                "identity instead: `any(v is value for v in items)`")


@atomic
def operator_comparison(operator, x, y):
    """``x == y`` / ``x != y`` on a Value: the elementwise op. Shapes that do not broadcast
    raise :class:`~symgrad.errors.ComparisonError`, which is a ``ShapeError`` and also the
    ``TypeError`` that ``value in list`` documents."""
    try:
        return _OPERATOR_COMPARISONS[operator](x, y)
    except ShapeError as exc:
        raise ComparisonError(f"{exc}\n  {_LOOKUP_HINT}") from None


def forget_tested_comparison(value) -> None:
    """``bool()`` of a Value raises ``TypeError``; ``value in list`` and ``if a == b:`` call it
    on the ``==``/``!=`` op they have just built. Drop that op again while it is still the
    last op of its block (so nothing can use it), so the error leaves the program unchanged."""
    op = value.op
    if op is None or op.opdef not in _FORGETTABLE or value.name is not None or op.block is None:
        return
    ops = op.block.ops
    if ops and ops[-1] is op:
        ops.pop()
        value.program.forget_cached_constants(op.results[0].id)


def less(x, y):
    return bind(less_p, as_values(x, y))


def less_equal(x, y):
    return bind(less_equal_p, as_values(x, y))


def greater(x, y):
    return bind(greater_p, as_values(x, y))


def greater_equal(x, y):
    return bind(greater_equal_p, as_values(x, y))


def logical_and(x, y):
    """Elementwise AND of bool inputs."""
    return bind(logical_and_p, as_values(x, y))


def logical_or(x, y):
    """Elementwise OR of bool inputs."""
    return bind(logical_or_p, as_values(x, y))


def logical_not(x):
    """Elementwise NOT of a bool input."""
    return bind(logical_not_p, as_values(x))


def cast(x, dtype):
    """``x.astype(dtype)``. A float-to-float cast passes the gradient back (cast to the source
    dtype); a cast from or to an integer or bool dtype carries none."""
    return bind(cast_p, as_values(x), {"dtype": dtypes.as_dtype(dtype)})


def zeros_like(x, dtype=None):
    """Zeros shaped like ``x`` at run time (``x``'s dtype unless given); no gradient."""
    x, = as_values(x)
    return bind(zeros_like_p, [x], {"dtype": dtypes.as_dtype(x.dtype if dtype is None else dtype)})


def ones_like(x, dtype=None):
    """Ones shaped like ``x`` at run time (``x``'s dtype unless given); no gradient."""
    x, = as_values(x)
    return bind(ones_like_p, [x], {"dtype": dtypes.as_dtype(x.dtype if dtype is None else dtype)})
