"""The op contract: ``OpDef``, the registry, ``bind`` and the shared shape rules.

An op is declared once, as an :class:`OpDef`, next to its front-end function::

    tanh_p = register(OpDef(
        "tanh", ELEMENTWISE, infer=unary_float_rule, impl=np.tanh,
        vjp=lambda op, g: [g[0] * (1 - op.results[0] ** 2)],
        emitters={"numpy": ufunc("np.tanh"), "cuda": "tanh({0})"}))

    def tanh(x): return bind(tanh_p, [as_value(x)])

Contract of each field:

``infer(input_types, attrs) -> (shape, dtype) | [(shape, dtype), ...]``
    The shape/dtype rule. ``input_types`` is a list of ``(shape, dtype)`` with ``None`` for
    unknown dims. Raise :class:`ShapeError` / :class:`DTypeError` with a message that names
    the offending shapes; :func:`bind` prefixes the op name and the user's source line.
``impl(*arrays, **attrs) -> ndarray | tuple``
    The NumPy reference used by the interpreter (the oracle). Must return results of exactly
    the inferred dtypes.
``vjp(op, cotangents) -> [Value | None, ...]``
    Builds the backward with symgrad ops (so it is differentiable again). ``cotangents`` has
    one entry per result (``None`` for a result that receives none); return one entry per
    input, ``None`` meaning "no gradient flows". An entry may be a zero-argument callable
    returning the Value: the backward pass calls it only when that input needs a gradient
    (so ``x * 2.0`` builds no gradient for the constant). ``None`` as the whole rule: no VJP.
``emitters``
    Per-backend lowering. ``"numpy"``: ``emit(args, attrs, out=None) -> str`` giving a NumPy
    expression (``out`` None) or a statement writing into the preallocated array named
    ``out``; build them with :func:`ufunc`, :func:`expr` or :func:`call`. ``"cuda"``: a C
    expression format string over ``{0}``, ``{1}``, attr names and ``{T}`` (the compute
    type) for elementwise ops, or whatever the CUDA backend documents for other categories.
``numpy_helpers``
    Pure-NumPy functions the generated module must contain for this op (their source is
    copied in, so generated code runs with NumPy alone).
``algebra``
    What the simplify pass may assume about the op (:class:`Algebra`; nothing by default).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Callable

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ProgramMismatchError, PromotionWarning, ShapeError
from ..ir.location import user_location, user_stacklevel
from ..ir.program import default_main_program, is_default_program
from ..ir.value import Value, format_shape

# --- categories (fusion and codegen dispatch on these, never on op names) -----------------------
SOURCE = "source"            # no tensor inputs: data, parameter, constant, full...
ELEMENTWISE = "elementwise"  # out[i] = f(a[i], b[i], ...) under NumPy broadcasting
INJECTIVE = "injective"      # pure data movement: reshape, transpose, broadcast, slice, pad, concat
REDUCTION = "reduction"      # reduces axes: sum, mean, max, min, prod, argmax...
OPAQUE = "opaque"            # library calls: matmul, conv2d, pooling, softmax...
CATEGORIES = (SOURCE, ELEMENTWISE, INJECTIVE, REDUCTION, OPAQUE)


@dataclasses.dataclass(frozen=True)
class Algebra:
    """Algebraic facts about an op that rewrites may rely on; every field is off by default.
    The simplify pass reads only these (never op names), so an op defined outside the library
    takes part in the same rewrites by declaring them.

    ``identity=(e, positions)``: ``op(x, e) == x`` with ``e`` at any of ``positions`` (``x + 0``,
    ``0 + x``, ``x / 1``). ``negation=(e, positions)``: ``op(x, e) == -x`` (``x * -1``).
    ``negates``: the op is ``-x`` (what ``negation`` rewrites to). ``involution``:
    ``op(op(x)) == x``. ``no_op_when_same_type``: the op returns its first input unchanged
    when the result has that input's exact type (reshape, broadcast, cast). ``collapses``:
    ``op(op(x, a), b) == op(x, b)``. ``permutation``: the attr holding an axis permutation
    (the identity permutation is a no-op; chains compose). ``broadcast``: the op only
    broadcasts its first input, so an elementwise consumer may read that input instead.
    ``fill(op)``: the one value the result holds everywhere, or None when not known.
    ``keeps_fill``: pure data movement of the first input (a uniform input stays uniform).
    ``shape_only``: positions of inputs the op reads only for their run-time shape (``size``,
    the reference of ``broadcast_like``), which any Value of that same shape may replace.
    """

    identity: tuple | None = None
    negation: tuple | None = None
    negates: bool = False
    involution: bool = False
    no_op_when_same_type: bool = False
    collapses: bool = False
    permutation: str | None = None
    broadcast: bool = False
    fill: Callable | None = None
    keeps_fill: bool = False
    shape_only: tuple = ()


NO_ALGEBRA = Algebra()


@dataclasses.dataclass(eq=False)
class OpDef:
    name: str
    category: str
    infer: Callable
    impl: Callable
    vjp: Callable | None = None
    vjp_differentiable: bool = True
    emitters: dict = dataclasses.field(default_factory=dict)
    numpy_helpers: tuple = ()
    reduce_kind: str | None = None   # "sum" | "mean" | "max" | "min" | "prod" for fusible reductions
    feedable: bool = False           # data/parameter: the runner may supply its value
    doc: str = ""
    user_defined: bool = False
    algebra: Algebra = NO_ALGEBRA

    def __post_init__(self):
        self._infer_cache: dict = {}
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown op category {self.category!r}")

    def infer_types(self, input_types, attrs) -> list:
        """The rule's result normalised to a list of ``(shape tuple, np.dtype)``.

        Results of attr-free ops are memoised by input types (shape rules are pure), which
        keeps building long programs and their backward cheap."""
        if not attrs:
            key = tuple(input_types)
            cached = self._infer_cache.get(key)
            if cached is not None:
                return cached
        result = self.infer(input_types, attrs)
        if isinstance(result, list):
            types = [(tuple(s), np.dtype(d)) for s, d in result]
        else:
            shape, dtype = result
            types = [(tuple(shape), np.dtype(dtype))]
        if not attrs:
            if len(self._infer_cache) > 4096:
                self._infer_cache.clear()
            self._infer_cache[key] = types
        return types

    @property
    def backends(self) -> list[str]:
        """The backends that can run this op (the interpreter runs every op)."""
        return ["interpreter"] + [name for name, lowers in LOWERINGS.items() if lowers(self)]

    def __repr__(self):
        return f"OpDef({self.name!r}, {self.category})"


def _numpy_lowers(opdef) -> bool:
    return opdef.category == SOURCE or "numpy" in opdef.emitters


# Which code generator lowers which op: the NumPy backend needs a "numpy" emitter; the CUDA
# backend compiles ops with a "cuda" emitter (and fusible reductions) into kernels and runs
# every other op the NumPy backend can lower through CuPy.
LOWERINGS = {
    "numpy": _numpy_lowers,
    "cuda": lambda opdef: "cuda" in opdef.emitters or _numpy_lowers(opdef),
}


def evaluate_vjp(op, cotangents, wanted=None) -> list:
    """Call ``op``'s VJP rule and return one gradient (Value or None) per input, building the
    lazy entries only for inputs whose ``wanted`` flag is true (all when ``wanted`` is None)."""
    grads = op.opdef.vjp(op, cotangents)
    grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
    if wanted is None:
        wanted = [True] * len(grads)
    return [(g() if w else None) if callable(g) else g for g, w in zip(grads, wanted)] + \
        grads[len(wanted):]


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef, *, replace: bool = False) -> OpDef:
    """Add ``opdef`` to the registry (``replace=True`` to overwrite an existing name)."""
    if opdef.name in REGISTRY and not replace:
        raise ValueError(f"op {opdef.name!r} is already registered")
    REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} is registered") from None


# --- building ops ------------------------------------------------------------------------------
def default_program_hint(*programs) -> str:
    """The advice to add to a program-mismatch message when one of ``programs`` is the default
    program, where ``data``/``parameter``/... built outside any ``program_guard`` end up."""
    hidden = [p for p in programs if is_default_program(p)]
    if not hidden:
        return ""
    return (f"; program #{hidden[0].uid} is the default program, which takes the Values "
            f"built outside any `with sg.program_guard(prog):` block: build every data, "
            f"parameter and constant of the program inside that block")


def program_of(values, what="op"):
    """The one program all ``values`` belong to (the default program when there are none)."""
    program = None
    for value in values:
        if program is None:
            program = value.program
        elif value.program is not program:
            raise ProgramMismatchError(
                f"{what}: Values of two different programs are mixed "
                f"(program #{program.uid} and program #{value.program.uid})"
                + default_program_hint(program, value.program))
    return program if program is not None else default_main_program()


def bind(opdef: OpDef | str, inputs, attrs=None, *, program=None):
    """Build one op: check inputs, run the shape rule, append the op, return its result(s).

    Returns a Value for one-result ops and a tuple of Values otherwise. Shape and dtype errors
    are re-raised with the op name, the input types and the user's source line.
    """
    if isinstance(opdef, str):
        opdef = get_op(opdef)
    attrs = attrs or {}
    for index, value in enumerate(inputs):
        if type(value) is not Value and not isinstance(value, Value):
            raise TypeError(f"{opdef.name}: input {index} must be a symgrad Value, "
                            f"got {type(value).__name__}")
    if program is None:
        program = program_of(inputs, opdef.name)
    elif inputs:
        other = program_of(inputs, opdef.name)
        if other is not program:
            raise ProgramMismatchError(f"{opdef.name}: inputs belong to another program"
                                       + default_program_hint(program, other))
    input_types = [(v.shape, v.dtype) for v in inputs]
    try:
        result_types = opdef.infer_types(input_types, attrs)
    except (ShapeError, DTypeError) as exc:
        loc = user_location()
        shown = ", ".join(dtypes_shape(t) for t in input_types) or "no inputs"
        message = f"{opdef.name}: {exc} (inputs: {shown})"
        if loc:
            message += f"\n  built at {loc}"
        raise type(exc)(message) from None
    # Backward ops point at the forward op's line (cheaper than walking the stack each time).
    forward_op = program._backward_of
    loc = forward_op.loc if forward_op is not None else user_location()
    op = program.global_block().append_op(opdef, inputs, attrs, result_types, loc=loc)
    if len(op.results) == 1:
        return op.results[0]
    return tuple(op.results)


def dtypes_shape(t) -> str:
    shape, dtype = t
    return f"{np.dtype(dtype)}{format_shape(shape)}"


# --- converting Python/NumPy inputs ---------------------------------------------------------------
def as_value(x, dtype=None, program=None) -> Value:
    """A Value for ``x``: Values pass through; scalars and arrays become constants."""
    if isinstance(x, Value):
        return x
    from .source import constant

    return constant(x, dtype=dtype, program=program)


def is_python_scalar(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


_warned_promotions: set = set()   # (Value dtype, promoted dtype) pairs already warned about


def warn_if_arrays_promote(values, strong):
    """Warn (once per pair of dtypes) when a NumPy array, NumPy scalar or list operand widens
    the floating dtype of the Value operands (``float32 Value * float64 array`` is float64, as
    in NumPy): that silently turns a float32 graph into float64."""
    if not values or len(strong) == len(values):
        return
    own = dtypes.promote(*(v.dtype for v in values))
    promoted = dtypes.promote(*strong)
    if own.kind != "f" or promoted.kind != "f" or promoted == own:
        return
    if (own, promoted) in _warned_promotions:
        return
    _warned_promotions.add((own, promoted))
    warnings.warn(
        f"a {promoted} array operand promotes {own} Values to {promoted} (NumPy's rule; "
        f"arrays, NumPy scalars and lists are not weak like Python scalars). Pass "
        f"array.astype('{own}') to stay in {own}, or sg.constant(array, dtype='{promoted}') "
        f"to make the promotion explicit. Shown once per pair of dtypes.",
        PromotionWarning, stacklevel=user_stacklevel())


def as_values(*args):
    """Convert operands of an elementwise op, giving weak Python scalars the dtype that NumPy 2
    promotion gives them against the Value operands (``float32 * 2.0`` stays float32). A
    Python scalar becomes one constant per program, dtype and value, reused by later ops.
    Arrays, NumPy scalars and lists promote as in NumPy (:func:`warn_if_arrays_promote`)."""
    values = [a for a in args if isinstance(a, Value)]
    if len(values) == len(args):
        return values
    program = program_of(values) if values else None
    strong = [v.dtype for v in values] + [np.asarray(a).dtype for a in args
                                         if not isinstance(a, Value) and not is_python_scalar(a)]
    warn_if_arrays_promote(values, strong)
    out = []
    for a in args:
        if isinstance(a, Value):
            out.append(a)
        elif is_python_scalar(a):
            dtype = dtypes.promote(*strong, a) if strong else None
            if program is None:
                out.append(as_value(a, dtype=dtype))
            else:
                out.append(program.cached_scalar_constant(
                    (dtype, type(a), a), lambda: as_value(a, dtype=dtype, program=program)))
        else:
            out.append(as_value(a, program=program))
    return out


# --- shared shape rules -------------------------------------------------------------------------
def broadcast_shapes(*shapes):
    """NumPy broadcasting with unknown dims (``None``). An unknown dim against 1 stays
    unknown; against a known n it becomes n (size-1 broadcasting of an unknown dim is assumed
    not to happen: broadcasting must be visible statically)."""
    first = shapes[0] if shapes else ()
    if all(s == first for s in shapes):
        return tuple(first)
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        dim = 1
        for shape in shapes:
            offset = axis - (ndim - len(shape))
            if offset < 0:
                continue
            d = shape[offset]
            if d == 1:
                continue
            if dim == 1:
                dim = d
            elif d is None:
                continue
            elif dim is None:
                dim = d
            elif d != dim:
                raise ShapeError("shapes " + ", ".join(format_shape(s) for s in shapes)
                                 + " cannot be broadcast together")
        result.append(dim)
    return tuple(result)


def normalize_axis(axis, ndim, allow_none=True):
    """``axis`` (None, int or sequence) as a sorted tuple of non-negative axes."""
    if axis is None:
        if not allow_none:
            raise ShapeError("axis must be given")
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise ShapeError(f"axis {a} is out of range for rank {ndim}")
        normalized.append(a % ndim if ndim else 0)
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(normalized))


def require_float(name_of_what, dtype):
    if not dtypes.is_float(dtype):
        raise DTypeError(f"{name_of_what} needs a floating dtype, got {np.dtype(dtype)}")


# --- emitter builders (NumPy) -------------------------------------------------------------------
def _fmt_attr(value):
    if isinstance(value, np.dtype):
        return f"np.{value.name}"
    if isinstance(value, np.ndarray):
        return f"np.array({value.tolist()!r}, dtype=np.{value.dtype.name})"
    if isinstance(value, np.generic):
        return repr(value.item())
    return repr(value)


def format_attrs_for_code(attrs: dict) -> dict:
    return {k: _fmt_attr(v) for k, v in attrs.items()}


def ufunc(name: str):
    """Emitter for an op that is exactly the NumPy ufunc ``name`` (``"np.tanh"``)."""
    def emit(args, attrs, out=None):
        joined = ", ".join(args)
        return f"{name}({joined}, out={out})" if out else f"{name}({joined})"
    emit.ufunc = name
    return emit


def expr(template: str, out_kw: bool = False):
    """Emitter from a format string over ``{0}``, ``{1}``... and attr names. With ``out``: pass
    ``out=`` when ``out_kw`` (the function accepts it), else assign ``out[...] = expr``."""
    def emit(args, attrs, out=None):
        code = template.format(*args, **format_attrs_for_code(attrs))
        if out is None:
            return code
        if out_kw:
            return code[:-1] + f", out={out})"
        return f"{out}[...] = {code}"
    emit.template = template
    return emit


def call(function_name: str, attr_names=()):
    """Emitter calling a helper (from ``numpy_helpers``) with args and the named attrs (as
    keywords; an attr the op does not have is left to the helper's default)."""
    def emit(args, attrs, out=None):
        parts = list(args) + [f"{k}={_fmt_attr(attrs[k])}" for k in attr_names if k in attrs]
        code = f"{function_name}({', '.join(parts)})"
        return code if out is None else f"{out}[...] = {code}"
    return emit
