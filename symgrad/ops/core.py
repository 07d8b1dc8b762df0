"""The op contract: ``OpDef``, the registry, ``bind`` and the shared shape rules.

An op is declared once, as an :class:`OpDef`, next to its front-end function::

    tanh_p = register(OpDef(
        "tanh", ELEMENTWISE, infer=unary_float_rule, impl=np.tanh,
        vjp=lambda op, g: [g[0] * (1 - op.results[0] ** 2)]))

    def tanh(x): return bind(tanh_p, [as_value(x)])

An OpDef holds only what is true of the op whatever runs it; each backend keeps its own
lowering table for the ops it lowers (``symgrad/backends/*/lowering.py``), so a new backend
touches no op file. Contract of each field:

``infer(input_types, attrs) -> (shape, dtype) | [(shape, dtype), ...]``
    The shape/dtype rule. ``input_types`` is a list of ``(shape, dtype)`` with ``None`` for
    unknown dims. Raise :class:`ShapeError` / :class:`DTypeError` with a message that names
    the offending shapes; :func:`bind` prefixes the op name and the user's source line.
``impl(*arrays, **attrs) -> ndarray | tuple``
    The NumPy reference used by the interpreter (the oracle). Must return results of exactly
    the inferred dtypes. An op whose ``impl`` is a NumPy ufunc *is* that ufunc
    (:attr:`OpDef.ufunc`): backends may rely on it (``out=``, promotion of weak scalars).
``vjp(op, cotangents) -> [Value | None, ...]``
    Builds the backward with symgrad ops (so it is differentiable again). ``cotangents`` has
    one entry per result (``None`` for a result that receives none); return one entry per
    input, ``None`` meaning "no gradient flows". An entry may be a zero-argument callable
    returning the Value: the backward pass calls it only when that input needs a gradient
    (so ``x * 2.0`` builds no gradient for the constant). ``None`` as the whole rule: no VJP.
``dims(input_dims, attrs, result_shapes) -> [dims, ...]``
    The symbolic-dims rule (:mod:`symgrad.ir.dims`): given each input's dims (ints, named and
    anonymous symbols, expressions) and the shapes ``infer`` computed, the dims of each
    result. Dims that must be equal meet through :func:`~symgrad.ir.dims.unify`, which raises
    the ``ShapeError`` of two different names (or a name and a constant other than 1) and
    records what the run-time binding must check. A dim the rule cannot express exactly is
    ``None``: the result gets a fresh anonymous dim (never a guess). Without a rule,
    elementwise ops broadcast their inputs' dims, reductions drop (or keep as 1) their axes,
    and every other op's unknown result dims are fresh anonymous dims.
``batch(op, inputs, axes) -> (results, result_axes) | NotImplemented``
    The batching rule ``vmap`` rewrites the op with (:mod:`symgrad.ops.batching` states the
    contract): given the Values to batch ``op`` over and each one's batch axis (0, or None for
    one every example shares), build the batched op(s). Elementwise ops without a rule of
    their own share the category's rule (:data:`DEFAULT_BATCH`); an op without a rule is
    batched by a loop over the examples. Read it through :func:`batch_rule`.
``reduction``
    For a reduction that backends may fuse with the elementwise ops feeding it, its
    :class:`Reduction` (how partial results combine, from what identity, in which dtype).
``algebra``
    What the simplify pass may assume about the op (:class:`Algebra`; nothing by default).
``region``
    For a region op (category ``REGION``: ``cond``, ``while_loop``, ``scan``, the fusion op),
    its :class:`Region` rules; ``infer`` then takes ``(input_types, attrs, blocks)``.

Code that backends copy into what they generate is described here too, since it is Python
(the NumPy references' helpers: a :class:`HelperSource`, or a :class:`HelperReference` to a
function that cannot be copied), as is :func:`code_int`, the one way an int attr becomes text.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import inspect
from typing import Callable

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ProgramMismatchError, ScopeError, ShapeError
from ..ir.dims import broadcast_dims, recording_into, stop_recording, unify
from ..ir.graph import free_values, is_visible
from ..ir.location import user_location
from ..ir.program import current_block, default_main_program, is_default_program
from ..ir.value import Value, format_shape

# --- categories (fusion and codegen dispatch on these, never on op names) -----------------------
SOURCE = "source"            # no tensor inputs: data, parameter, constant, full...
ELEMENTWISE = "elementwise"  # out[i] = f(a[i], b[i], ...) under NumPy broadcasting
INJECTIVE = "injective"      # pure data movement: reshape, transpose, broadcast, slice, pad, concat
REDUCTION = "reduction"      # reduces axes: sum, mean, max, min, prod, argmax...
OPAQUE = "opaque"            # library calls: matmul, conv2d, pooling, softmax...
REGION = "region"            # owns nested blocks: cond, while_loop, scan, fused groups
CATEGORIES = (SOURCE, ELEMENTWISE, INJECTIVE, REDUCTION, OPAQUE, REGION)


@dataclasses.dataclass(frozen=True)
class Algebra:
    """Algebraic facts about an op that rewrites may rely on; every field is off by default.
    The simplify pass reads only these (never op names), so an op defined outside the library
    takes part in the same rewrites by declaring them.

    ``identity=(e, positions)``: ``op(x, e) == x`` with ``e`` at any of ``positions`` (``x + 0``,
    ``0 + x``, ``x / 1``); a float zero ``e`` is the signed zero that is an identity (``x + -0.0``
    and ``x - 0.0`` are ``x`` for every float ``x``, ``x + 0.0`` is not at ``x = -0.0``). ``negation=(e, positions)``: ``op(x, e) == -x`` (``x * -1``).
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

LOWEST = "lowest"     # identity of max: the least value of the dtype (-inf for floats)
HIGHEST = "highest"   # identity of min: the greatest value of the dtype (inf for floats)


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A reduction that backends may fuse with the ops feeding it, described once for all of
    them.

    ``combine``: the binary elementwise :class:`OpDef` merging two partial results (``add``
    for sum and mean, ``multiply``, ``maximum``, ``minimum``); a backend renders it as it
    renders that op. ``identity``: what an empty accumulator holds, a number or
    :data:`LOWEST` / :data:`HIGHEST`. ``result_dtype``: the accumulator has the result's
    dtype (sum and prod of int32 accumulate in int64) rather than the input's (max, min).
    ``widens``: float accumulators narrower than float64 accumulate in float64 when the
    compile option ``accumulate_float64`` is on. ``mean``: the result is the accumulated
    value divided by the number of reduced elements. ``splits``: partial results of parts of
    the input combine into what one pass over it gives (not for products: a partial product
    can underflow to 0 or overflow to inf where one pass never does), so a backend may
    accumulate parts apart (chunks, threads, vector lanes) only when it is True.
    """

    combine: "OpDef"
    identity: object
    result_dtype: bool = True
    widens: bool = False
    mean: bool = False
    splits: bool = True

    @property
    def has_identity(self) -> bool:
        """False for max and min: reducing an empty extent is an error (as in NumPy)."""
        return self.identity not in (LOWEST, HIGHEST)

    def accumulator(self, input_dtype, result_dtype, accumulate_float64=True) -> np.dtype:
        """The dtype partial results are kept in."""
        dtype = np.dtype(result_dtype if self.result_dtype else input_dtype)
        if self.widens and accumulate_float64 and dtypes.kind(dtype) == "f" and \
                dtype.itemsize < 8:
            return np.dtype("float64")
        return dtype

    def identity_value(self, dtype):
        """The identity as a Python number of ``dtype`` (``-inf`` for the :data:`LOWEST`
        float, ``False`` for the lowest bool...)."""
        dtype = np.dtype(dtype)
        kind = dtypes.kind(dtype)
        if self.has_identity:
            return float(self.identity) if kind == "f" else dtype.type(self.identity).item()
        lowest = self.identity == LOWEST
        if kind == "f":
            return -math.inf if lowest else math.inf
        if kind == "b":
            return not lowest
        info = np.iinfo(dtype)
        return int(info.min if lowest else info.max)


@dataclasses.dataclass(frozen=True)
class Region:
    """What every layer needs to know about a region op, declared once with its OpDef.

    ``block_names``: a name per block, for the printer (``("then", "else")``).
    ``explicit_inputs(attrs) -> int``: how many leading inputs are explicit operands; the
    rest are captures (the Values of enclosing blocks that its blocks read).
    ``run(op, args, run_block) -> [array, ...]``: the reference semantics, given the input
    arrays and ``run_block(block, arg_arrays) -> [yielded arrays]`` (the interpreter's).
    ``narrow(op, used) -> (attrs, kept_results, kept_yields) | None``: given which results are
    used, the attrs, result indices and per-block yield indices of an equivalent op without
    the unused results (None when nothing can be dropped); lets DCE reach into regions.
    ``layout(op) -> LoopLayout``: for a loop, where its carries, per-step inputs, stacked
    outputs, captures and trip count are among its inputs, blocks and results
    (:class:`~symgrad.ops.control_flow.LoopLayout`); None for a region that is no loop.
    ``held(op, nbytes, sizes) -> int``: bytes the op holds while it runs besides its results
    and its blocks' Values (a checkpointing loop's stored carries), given ``nbytes(value)``
    and ``sizes(dims) -> [int]``; None for none (:mod:`symgrad.passes.peak_memory`).
    ``repeats(op) -> [block index]``: the blocks that run at least once whenever the op runs,
    and may run many times (a loop's body when the loop is known to take a step): what they
    compute from the op's captures alone may run once before the op instead
    (:mod:`symgrad.passes.hoist`); None for none.
    """

    block_names: tuple
    explicit_inputs: Callable
    run: Callable
    narrow: Callable | None = None
    layout: Callable | None = None
    held: Callable | None = None
    repeats: Callable | None = None


def kept_yields(used, first_dropped=0) -> list | None:
    """For a region's ``narrow``: the indices of the yields (and results) to keep, the used
    ones and every one before ``first_dropped``; None when all are kept."""
    kept = [i for i, u in enumerate(used) if u or i < first_dropped]
    return None if len(kept) == len(used) else kept


@dataclasses.dataclass(frozen=True)
class HelperSource:
    """A helper of generated modules given as source text that defines ``name``."""

    name: str
    source: str


@dataclasses.dataclass(frozen=True, eq=False)
class HelperReference:
    """A function generated modules call as ``name`` without containing it: the loader binds
    ``name`` to ``function`` in the module. ``reason`` says why it is not copied; it is part
    of the error that refuses to save such a module."""

    name: str
    function: Callable
    reason: str


@dataclasses.dataclass(eq=False)
class OpDef:
    name: str
    category: str
    infer: Callable
    impl: Callable
    vjp: Callable | None = None
    vjp_differentiable: bool = True
    reduction: Reduction | None = None
    feedable: bool = False           # data/parameter: the runner may supply its value
    doc: str = ""
    user_defined: bool = False
    algebra: Algebra = NO_ALGEBRA
    region: Region | None = None
    dims: Callable | None = None
    batch: Callable | None = None

    def __post_init__(self):
        self._infer_cache: dict = {}
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown op category {self.category!r}")

    @property
    def block_names(self) -> tuple:
        return self.region.block_names if self.region is not None else ()

    def explicit_inputs(self, attrs) -> int:
        """How many leading inputs of an op with ``attrs`` are explicit operands (a region
        op's others are captures)."""
        return self.region.explicit_inputs(attrs)

    def infer_types(self, input_types, attrs, blocks=()) -> list:
        """The rule's result normalised to a list of ``(shape tuple, np.dtype)`` (a region
        op's rule also reads its ``blocks``).

        Results of attr-free ops are memoised by input types (shape rules are pure), which
        keeps building long programs and their backward cheap."""
        if self.region is not None:
            return [(tuple(s), np.dtype(d)) for s, d in self.infer(input_types, attrs, blocks)]
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
    def ufunc(self) -> np.ufunc | None:
        """The NumPy ufunc the op is exactly (its reference), or None."""
        return self.impl if isinstance(self.impl, np.ufunc) else None

    def __repr__(self):
        return f"OpDef({self.name!r}, {self.category})"


# The batching rule of every op of a category that declares none ({category: rule}); filled by
# symgrad.ops.batching (the elementwise rule), which builds ops and so cannot live here.
DEFAULT_BATCH: dict = {}


def batch_rule(opdef) -> Callable | None:
    """The batching rule of ``opdef``: its own, else its category's, else None (``vmap``
    batches the op by a loop over the examples)."""
    return opdef.batch or DEFAULT_BATCH.get(opdef.category)


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
INTERNAL_OPS: dict[str, OpDef] = {}   # library ops kept out of the public registry (fusion)


def register(opdef: OpDef, *, replace: bool = False) -> OpDef:
    """Add ``opdef`` to the registry (``replace=True`` to overwrite an existing name)."""
    if opdef.name in REGISTRY and not replace:
        raise ValueError(f"op {opdef.name!r} is already registered")
    REGISTRY[opdef.name] = opdef
    return opdef


def register_internal_op(opdef: OpDef) -> OpDef:
    """Declare a library op that users do not build (the fusion op): kept out of the public
    registry, but programs holding it can be loaded."""
    INTERNAL_OPS[opdef.name] = opdef
    return opdef


def op_table() -> dict[str, OpDef]:
    """Every op a program may name, by name: the public registry and the internal ops (what
    :func:`symgrad.ir.serialize.program_from_json` looks ops up in)."""
    return {**INTERNAL_OPS, **REGISTRY}


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
    op = _append(opdef, inputs, attrs, program)
    if len(op.results) == 1:
        return op.results[0]
    return tuple(op.results)


def bind_region(opdef: OpDef, operands, attrs, blocks, program):
    """Build one region op of ``program`` owning ``blocks`` (filled by the caller, not yet
    attached): its inputs are ``operands`` followed by the captures (what the blocks read from
    enclosing blocks, :func:`~symgrad.ir.graph.free_values`). Returns the op."""
    return _append(opdef, list(operands) + free_values(blocks), attrs, program, blocks)


def _append(opdef, inputs, attrs, program, blocks=()):
    """Check that the current block of ``program`` sees ``inputs``, run the shape rule and
    append the op there (shape and dtype errors re-raised with the op's name and input
    types); returns the op."""
    block = current_block(program)
    check_visible(opdef.name, inputs, block)
    input_types = [(v.shape, v.dtype) for v in inputs]
    try:
        result_types = opdef.infer_types(input_types, attrs, blocks)
        constraints = ()
        shared = _shared_dims(opdef, inputs, result_types)
        if shared is not None:
            result_types = [(shared, result_types[0][1])]
        elif _symbolic(inputs, result_types):
            constraints = []
            token = recording_into(constraints)
            try:
                result_types = result_dims(opdef, inputs, attrs, result_types, blocks)
            finally:
                stop_recording(token)
    except (ShapeError, DTypeError) as exc:
        raise_with_context(exc, opdef.name, [(v.dims, v.dtype) for v in inputs])
    # Backward ops point at the forward op's line (cheaper than walking the stack each time).
    forward_op = program._backward_of
    loc = forward_op.loc if forward_op is not None else user_location()
    op = block.append_op(opdef, inputs, attrs, result_types, loc=loc, blocks=blocks)
    if constraints:
        program.dim_constraints.extend([(constraint, op) for constraint in constraints])
    return op


def _shared_dims(opdef, inputs, result_types):
    """The dims of an elementwise op's result when its inputs of rank > 0 share one dims tuple
    of its result's shape (a chain's common case: nothing to unify), else None."""
    if opdef.category != ELEMENTWISE or opdef.dims is not None or len(result_types) != 1:
        return None
    first = None
    for value in inputs:
        if value.shape:
            if first is None:
                first = value
            elif value.dims is not first.dims and value.dims != first.dims:
                return None
    return first.dims if first is not None and first.shape == result_types[0][0] else None


def _symbolic(inputs, result_types) -> bool:
    """Does an input have a symbolic dim, or a result a dim ``infer`` does not know?"""
    for value in inputs:
        if value.shape is not value.dims:
            return True
    for shape, _ in result_types:
        if None in shape:
            return True
    return False


def result_dims(opdef, inputs, attrs, result_types, blocks=()) -> list:
    """``result_types`` with each result's dims from the op's dims rule (see the module
    docstring), reconciled with the shapes ``infer`` computed: a dim ``infer`` knows is that
    int (a symbolic dim the rule found there is unified with it), a dim it does not know is
    the rule's symbolic dim, else a fresh anonymous dim (None)."""
    rule = opdef.dims or _DEFAULT_DIMS.get(opdef.category)
    shapes = [shape for shape, _ in result_types]
    found = None
    if rule is not None:
        input_dims = [v.dims for v in inputs]
        found = rule(input_dims, attrs, shapes, blocks) if opdef.region is not None \
            else rule(input_dims, attrs, shapes)
    out = []
    for index, (shape, dtype) in enumerate(result_types):
        dims = found[index] if found is not None else None
        if dims is None or len(dims) != len(shape):
            out.append((shape, dtype))
            continue
        if all(type(dim) is not int if known is None else dim is known or dim == known
               for known, dim in zip(shape, dims)):   # the rule agrees with infer everywhere
            out.append((dims if type(dims) is tuple else tuple(dims), dtype))
            continue
        merged = []
        for axis, (known, dim) in enumerate(zip(shape, dims)):
            if known is not None:
                if dim is not None and dim != known:
                    unify(dim, known, f"result dim {axis}")
                merged.append(known)
            else:
                merged.append(dim if dim is not None and type(dim) is not int else None)
        out.append((tuple(merged), dtype))
    return out


def _elementwise_dims(input_dims, attrs, shapes):
    dims = broadcast_dims(*input_dims)
    return [dims] * len(shapes)


def _reduction_dims(input_dims, attrs, shapes):
    dims = input_dims[0]
    axes = normalize_axis(attrs.get("axis"), len(dims))
    keep = attrs.get("keepdims", False)
    out = tuple(1 if a in axes else d for a, d in enumerate(dims) if keep or a not in axes)
    return [out] * len(shapes)


def same_dims(index=0):
    """The dims rule of an op whose every result has the dims of input ``index``."""
    def rule(input_dims, attrs, shapes):
        return [input_dims[index]] * len(shapes)
    return rule


_DEFAULT_DIMS = {ELEMENTWISE: _elementwise_dims, REDUCTION: _reduction_dims}


_scope_checked: contextvars.ContextVar = contextvars.ContextVar("symgrad_scope_checked",
                                                               default=True)


@contextlib.contextmanager
def deferred_scope_checks():
    """Let ops read Values of other regions inside the ``with`` block: a loop's VJP builds its
    backward body from the forward body's Values, then replaces them by residuals."""
    token = _scope_checked.set(False)
    try:
        yield
    finally:
        _scope_checked.reset(token)


def check_visible(name, inputs, block) -> None:
    """Raise :class:`ScopeError` if an input is not visible from ``block`` (a Value built in
    a branch or loop body read outside it, or in another region)."""
    if not _scope_checked.get():
        return
    for value in inputs:
        defining = value.block
        if defining is not block and not is_visible(value, block):
            raise ScopeError(
                f"{name}: %{value.id} ({value.type_str}) was built inside a region (a cond "
                f"branch or loop body) and cannot be read outside it; return it from the "
                f"branch or body function instead")


def raise_with_context(exc, name, input_types):
    """Re-raise a shape rule's ``exc`` prefixed with the op name, the input types and the
    user's source line."""
    loc = user_location()
    shown = ", ".join(dtypes_shape(t) for t in input_types) or "no inputs"
    message = f"{name}: {exc} (inputs: {shown})"
    if loc:
        message += f"\n  built at {loc}"
    raise type(exc)(message) from None


def dtypes_shape(t) -> str:
    shape, dtype = t
    return f"{np.dtype(dtype)}{format_shape(shape)}"


# --- building atomically ---------------------------------------------------------------------------
def _program_of_arguments(args, kwargs):
    """Where a front-end function appends its ops: the ``program`` it is given, else the
    program of the first Value among the arguments (or inside a list/tuple argument), else
    the default program."""
    if kwargs.get("program") is not None:
        return kwargs["program"]
    for argument in (*args, *kwargs.values()):
        if isinstance(argument, Value):
            return argument.program
        if isinstance(argument, (list, tuple)):
            for item in argument:
                if isinstance(item, Value):
                    return item.program
    return default_main_program()


def atomic(function):
    """``function`` (a front-end function) run as a transaction of the program it builds
    into: when it raises, every op it appended (the constants it made from NumPy operands
    included) is removed again, so a failed build leaves the program unchanged."""
    @functools.wraps(function)
    def build(*args, **kwargs):
        first = args[0] if args else None
        program = first.program if type(first) is Value else \
            _program_of_arguments(args, kwargs)
        snapshot = program._snapshot()   # the transaction, inlined: ops are built very often
        try:
            return function(*args, **kwargs)
        except BaseException:
            program._restore(snapshot)
            raise
    return build


def atomic_functions(namespace: dict, names) -> None:
    """Replace each function ``namespace[name]`` by its :func:`atomic` version."""
    for name in names:
        if inspect.isfunction(namespace[name]):
            namespace[name] = atomic(namespace[name])


# --- shared shape rules -------------------------------------------------------------------------
def broadcast_shapes(*shapes):
    """NumPy broadcasting with unknown dims (``None``). An unknown dim against 1 stays
    unknown; against a known n it becomes n (size-1 broadcasting of an unknown dim is assumed
    not to happen: broadcasting must be visible statically; the symbolic dims record what the
    run-time binding checks, see :mod:`symgrad.ir.dims`)."""
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
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, (bool, np.bool_)):
        axes = (axis,)
    elif isinstance(axis, (list, tuple)):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be None, an int or a list/tuple of ints, "
                        f"got {type(axis).__name__} {axis!r}")
    normalized = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or isinstance(a, (bool, np.bool_)):
            raise TypeError(f"axis entries must be ints, got {type(a).__name__} {a!r} "
                            f"in {axis!r}")
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


# --- attrs as source text ---------------------------------------------------------------------
def code_int(value) -> str:
    """``value`` (an int attr: an axis, a bound) as source text; anything else is a
    ``TypeError``, so a malformed attr never reaches generated code as text."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"expected an int attr, got {type(value).__name__} {value!r}")
    return str(int(value))
