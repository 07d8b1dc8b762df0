"""Control flow: ``cond``, ``while_loop``, ``scan`` and ``fori_loop``, as region ops.

Each builder runs the user's function(s) once, with the ops they build going into a new block
whose arguments stand for the function's parameters (:func:`~symgrad.ir.program.insertion_point`);
what the function returns becomes the block's yields. The functions may read Values of the
enclosing blocks directly: those become captures, listed after the explicit operands among the
op's inputs. A failed build (an exception in the user's function, mismatched structures,
shapes or dtypes) leaves the program as it was::

    %5 = cond(%p, %x) captures(%w) {num_operands=1} : float32[3]
      then(%6 : float32[3]):
        %7 = multiply(%6, %w) : float32[3]
        yield %7
      else(%8 : float32[3]):
        yield %8

The ops (inputs after the explicit operands are captures):

``cond``
    inputs ``pred, *operands``; blocks ``then`` and ``else``, each taking the operands; results
    what the taken block yields. Only that block runs.
``while_loop``
    inputs ``*init``; blocks ``cond`` (takes the loop vars, yields a bool scalar) and ``body``
    (takes the loop vars, yields their next values, then ``num_stacked`` more Values);
    results the final vars, then each extra yield stacked over the iterations (leading dim
    unknown), then, with ``counted``, the trip count (int64). The extra yields and the count
    are what reverse-mode differentiation records (:mod:`symgrad.autodiff.regions`).
``scan``
    inputs ``*init, *xs`` (and, with no ``xs`` and a run-time ``length``, an int scalar
    ``length``); block ``body`` takes the carries and one slice of each ``xs`` (along axis 0),
    yields the next carries then the per-step outputs; results the final carries, then the
    per-step outputs stacked along a new axis 0 (in the order of the slices they came from,
    also with ``reverse``).

``fori_loop`` is not an op: with static bounds it is a ``scan``, with Value bounds a
``while_loop`` (as in JAX).

A loop with attr ``remat=True`` (built by ``checkpoint=``, :mod:`symgrad.ops.checkpoint`, and
by :func:`checkpoint`) runs like any other; only reverse mode differs: it recomputes the body
in the backward instead of storing its residuals. Every layer reads a loop through its
:class:`LoopLayout` (:func:`loop_layout`).
"""
from __future__ import annotations

import contextvars
import dataclasses
from typing import Callable

import numpy as np

from ..errors import DTypeError, FeedError, ProgramMismatchError, ShapeError
from ..ir.dims import Symbol, broadcast_dims, dim_text, is_symbolic, symbols_of, unify
from ..ir.location import op_site
from ..ir.program import Block, current_block, insertion_point
from ..ir.value import Value
from .core import (REGION, OpDef, Region, bind_region, dtypes_shape, kept_yields, program_of,
                   register)
from .checkpoint import copied_region, run_time_plan, segment_length
from .elementwise import cast
from .shape import concatenate, reshape
from .source import as_value
from .trees import LEAF, flatten, unflatten

__all__ = ["cond", "while_loop", "scan", "fori_loop", "checkpoint"]


def _is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def _describe_structure(structure) -> str:
    if structure is None:
        return "None"
    if structure == LEAF:
        return "a Value"
    kind, items = structure
    inner = ", ".join(_describe_structure(item) for item in items)
    return f"[{inner}]" if kind is list else f"({inner}{',' if len(items) == 1 else ''})"


def _types(values):
    return [(v.shape, v.dtype) for v in values]


def _arg_types(values):
    """Types of block arguments standing for ``values``: their dims (symbols kept)."""
    return [(v.dims, v.dtype) for v in values]


def carried_dims(op_name, carries, yields, what="carry"):
    """The dims of loop carries whose initial values are ``carries`` (dims tuples) and whose
    body gives ``yields``: the body must give each carry back with the same dims. A dim that
    the body computes from the carry's own symbols differently (``?0 + 1`` for ``?0``: the
    carry grows) is refused, naming the loop and the carry; an anonymous dim of the body meets
    the carry's dim (:func:`~symgrad.ir.dims.unify`)."""
    for index, (dims, given) in enumerate(zip(carries, yields)):
        for axis, (dim, got) in enumerate(zip(dims, given)):
            if dim == got:
                continue
            if is_symbolic(got) and not (type(got) is Symbol and got.anonymous) and \
                    symbols_of(got) & symbols_of(dim):
                raise ShapeError(
                    f"{what} {index} has dim {dim_text(dim)} on axis {axis} but the "
                    f"body gives it back as {dim_text(got)}: a loop {what} must keep its size "
                    f"(pad it to a fixed size, or stack per-step values as an output instead)")
            unify(dim, got, f"{what} {index}, axis {axis}")
    return [tuple(dims) for dims in carries]


def _check_same_types(op_name, got, expected, got_what, expected_what):
    """Raise ShapeError / DTypeError naming ``op_name`` and both sides when the lists of
    ``(shape, dtype)`` ``got`` and ``expected`` differ."""
    if len(got) != len(expected):
        raise ShapeError(f"{op_name}: {got_what} gives {len(got)} Values but {expected_what} "
                         f"has {len(expected)}")
    for index, ((shape, dtype), (want_shape, want_dtype)) in enumerate(zip(got, expected)):
        if tuple(shape) != tuple(want_shape):
            raise ShapeError(f"{op_name}: {got_what} gives {dtypes_shape((shape, dtype))} at "
                             f"position {index}, but {expected_what} has "
                             f"{dtypes_shape((want_shape, want_dtype))}")
        if np.dtype(dtype) != np.dtype(want_dtype):
            raise DTypeError(f"{op_name}: {got_what} gives {dtypes_shape((shape, dtype))} at "
                             f"position {index}, but {expected_what} has "
                             f"{dtypes_shape((want_shape, want_dtype))}")


def _as_values(op_name, what, leaves, program, dtypes_like=None):
    """Leaves of a structure the user passed or returned, as Values of ``program``; Python and
    NumPy numbers and arrays become constants (of the matching dtype when ``dtypes_like``
    gives one)."""
    out = []
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, Value):
            if leaf.program is not program:
                raise ProgramMismatchError(f"{op_name}: {what} holds a Value of another program")
            out.append(leaf)
        elif isinstance(leaf, (bool, int, float, np.generic, np.ndarray)):
            dtype = dtypes_like[index] if dtypes_like is not None and \
                index < len(dtypes_like) else None
            out.append(as_value(leaf, dtype=dtype, program=program))
        else:
            raise TypeError(f"{op_name}: {what} must hold symgrad Values (or numbers), got "
                            f"{type(leaf).__name__}")
    return out


_loop_depth: contextvars.ContextVar = contextvars.ContextVar("symgrad_loop_depth", default=0)


def in_loop_body() -> bool:
    """Is a loop's body (or while condition) function being run to build its block (in this
    thread)? Random ops need an explicit counter there."""
    return _loop_depth.get() > 0


def _run_in_block(program, arg_types, function, op_name, what, expected_dtypes=None,
                  allow_none=False, repeats=False):
    """Run ``function(*args)`` with a new block as insertion point, its arguments of
    ``arg_types``; returns ``(block, leaves, structure)`` of what it returned. The
    block is not attached yet (the region op will own it). ``repeats``: the block runs once
    per loop iteration (:func:`in_loop_body` holds while it is built)."""
    block = Block(program, outer=current_block(program))
    args = [block.add_arg(shape, dtype) for shape, dtype in arg_types]
    token = _loop_depth.set(_loop_depth.get() + 1) if repeats else None
    try:
        with insertion_point(block):
            returned = function(*args)
            leaves, structure = flatten(returned, allow_none=allow_none)
            leaves = _as_values(op_name, f"the value {what} returns", leaves, program,
                                expected_dtypes)
    finally:
        if token is not None:
            _loop_depth.reset(token)
    return block, leaves, structure


def _bool_scalar(op_name, what, value):
    if value.dtype != np.bool_:
        raise DTypeError(f"{op_name}: {what} must be a bool scalar, got {value.type_str}")
    if value.shape != ():
        raise ShapeError(f"{op_name}: {what} must be a bool scalar, got {value.type_str}")


# --- loop layouts ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class LoopLayout:
    """Where a loop op keeps its parts, for the layers that read loops or build copies with
    more results (autodiff, backends) without asking which loop op they have. Every loop op lays them out alike:

    - inputs: the carries' initial values (:attr:`inits`), the per-step inputs
      (:attr:`xs`, sliced along axis 0), the run-time trip count when the op takes it as an
      input (:attr:`length_input`), then the captures (:attr:`captures`);
    - the body block (:attr:`body`): arguments the carries then one slice of each ``xs``;
      yields the next carries, then the per-step values (:attr:`stacked_yields`);
    - results: the final carries (:attr:`finals`), the per-step values stacked along a new
      axis 0 (:attr:`stacked_results`), then, when :attr:`counted`, the trip count.

    ``length`` is the trip count when known at build time; ``reverse`` runs the steps last to
    first (a per-step value keeps the position of its step); ``remat`` asks reverse mode to
    recompute the body in the backward instead of storing its residuals (``checkpoint=``);
    ``plan`` is the run-time schedule it follows to do so
    (:func:`~symgrad.ops.checkpoint.run_time_plan`), None for a loop of segments or one that
    stores every step. :meth:`grown_attrs` gives the attrs of the same loop with more stacked
    outputs or a trip count result (:attr:`can_count`)."""

    op: object
    body_index: int
    num_carry: int
    num_xs: int
    length: int | None
    reverse: bool
    has_length_input: bool
    counted: bool
    can_count: bool
    remat: bool
    plan: tuple | None
    _grow: Callable

    @property
    def body(self):
        return self.op.blocks[self.body_index]

    @property
    def num_explicit(self) -> int:
        return self.num_carry + self.num_xs + self.has_length_input

    @property
    def inits(self) -> list:
        return self.op.inputs[:self.num_carry]

    @property
    def xs(self) -> list:
        return self.op.inputs[self.num_carry:self.num_carry + self.num_xs]

    @property
    def length_input(self):
        """The int scalar input holding the trip count, or None."""
        return self.op.inputs[self.num_carry + self.num_xs] if self.has_length_input else None

    @property
    def captures(self) -> list:
        return self.op.inputs[self.num_explicit:]

    @property
    def carry_args(self) -> list:
        return self.body.args[:self.num_carry]

    @property
    def x_args(self) -> list:
        return self.body.args[self.num_carry:]

    @property
    def carry_yields(self) -> list:
        return self.body.yields[:self.num_carry]

    @property
    def stacked_yields(self) -> list:
        return self.body.yields[self.num_carry:]

    @property
    def finals(self) -> list:
        return self.op.results[:self.num_carry]

    @property
    def stacked_results(self) -> list:
        return self.op.results[self.num_carry:self.num_carry + len(self.stacked_yields)]

    @property
    def trip_count(self):
        """A Value holding how many steps ran, when the op has one (its run-time length input
        or its trip count result), else None."""
        if self.has_length_input:
            return self.length_input
        return self.op.results[-1] if self.counted else None

    def grown_attrs(self, stacked=0, counted=False) -> dict:
        """The attrs of this loop with ``stacked`` more per-step outputs and, with
        ``counted``, a trip count result (only where :attr:`can_count`)."""
        if counted and not self.can_count:
            raise TypeError(f"{self.op.opdef.name} cannot count its trips")
        return self._grow(self.op.attrs, stacked, counted)


def loop_layout(op) -> LoopLayout | None:
    """The :class:`LoopLayout` of a loop op, None for any other op."""
    region = op.opdef.region
    return region.layout(op) if region is not None and region.layout is not None else None


# --- cond --------------------------------------------------------------------------------------
def _cond_rule(types, attrs, blocks):
    then_block, else_block = blocks
    pred_shape, pred_dtype = types[0]
    if np.dtype(pred_dtype) != np.bool_ or tuple(pred_shape) != ():
        raise DTypeError(f"pred must be a bool scalar, got "
                         f"{dtypes_shape((pred_shape, pred_dtype))}")
    _check_same_types("cond", _types(else_block.yields), _types(then_block.yields),
                      "false_fn", "true_fn")
    return _types(then_block.yields)


def _run_cond(op, args, run_block):
    count = op.attrs["num_operands"]
    block = op.blocks[0] if bool(args[0]) else op.blocks[1]
    return run_block(block, args[1:1 + count])


def _narrow_cond(op, used):
    kept = kept_yields(used)
    if kept is None:
        return None
    return dict(op.attrs), kept, [kept, kept]


def _cond_dims(input_dims, attrs, shapes, blocks):
    then_block, else_block = blocks
    return [broadcast_dims(a.dims, b.dims, what="the branches' results")
            if a.ndim == b.ndim else None for a, b in zip(then_block.yields, else_block.yields)]


cond_p = register(OpDef(
    "cond", REGION, infer=_cond_rule, impl=None, dims=_cond_dims,
    region=Region(("then", "else"), lambda attrs: 1 + attrs["num_operands"], _run_cond,
                  _narrow_cond),
    doc="Runs one of two blocks: ``then`` when pred holds, else ``else``."))


def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)`` (Paddle's
    ``static.nn.cond``, JAX's ``lax.cond``). ``pred`` is a bool scalar Value (a Python bool
    picks the branch now, at build time). Both functions return a Value or a (nested)
    tuple/list of Values with the same structure, shapes and dtypes; ``cond`` returns what
    they return. Only the taken branch runs. The functions may read any Value of the
    enclosing program (it is captured); gradients flow through the taken branch."""
    if isinstance(pred, (bool, np.bool_)):
        return true_fn(*operands) if pred else false_fn(*operands)
    if not isinstance(pred, Value):
        raise TypeError(f"cond: pred must be a bool scalar Value or a Python bool, got "
                        f"{type(pred).__name__}")
    _bool_scalar("cond", "pred", pred)
    program = program_of([pred] + [v for v in operands if isinstance(v, Value)], "cond")
    with program.transaction():
        operands = _as_values("cond", "operands", list(operands), program)
        branches = []
        for name, function in (("true_fn", true_fn), ("false_fn", false_fn)):
            branches.append(_run_in_block(program, _arg_types(operands), function, "cond",
                                          name))
        (then_block, then_leaves, then_structure), (else_block, else_leaves,
                                                    else_structure) = branches
        if then_structure != else_structure:
            raise ShapeError(f"cond: true_fn returns {_describe_structure(then_structure)} but "
                             f"false_fn returns {_describe_structure(else_structure)}")
        _check_same_types("cond", _types(else_leaves), _types(then_leaves), "false_fn",
                          "true_fn")
        then_block.yields, else_block.yields = then_leaves, else_leaves
        op = bind_region(cond_p, [pred, *operands], {"num_operands": len(operands)},
                         [then_block, else_block], program)
    return unflatten(then_structure, op.results)


# --- while_loop -----------------------------------------------------------------------------------
def _while_rule(types, attrs, blocks):
    count, stacked = attrs["num_vars"], attrs["num_stacked"]
    cond_block, body = blocks
    var_types = [(tuple(s), np.dtype(d)) for s, d in types[:count]]
    _check_same_types("while_loop", _types(body.yields[:count]), var_types, "body_fn",
                      "loop_vars")
    if len(body.yields) != count + stacked:
        raise ShapeError(f"while_loop: body yields {len(body.yields)} Values, expected "
                         f"{count + stacked}")
    if len(cond_block.yields) != 1:
        raise ShapeError("while_loop: cond_fn must give one bool scalar")
    _bool_scalar("while_loop", "cond_fn's result", cond_block.yields[0])
    out = list(var_types)
    out += [((None,) + v.shape, v.dtype) for v in body.yields[count:]]
    if attrs["counted"]:
        out.append(((), np.dtype(np.int64)))
    return out


def ragged_stack_message(op, value) -> str:
    """The error of loop ``op`` when its per-step output ``value`` (a Value of its body whose
    dims are known only once a step ran) has another shape at a step than at the step run
    before it, with ``%s`` for the shape, ``%d`` for the step, ``%s`` for the earlier shape.
    The interpreter and the host lowering (:mod:`symgrad.backends.host.regions`) raise it as
    :class:`~symgrad.errors.FeedError`, as the other run-time checks of shapes, before
    writing the step's output; a loop in the body whose trip count differs between the steps
    makes such outputs (its residuals, which a third derivative through a while loop of
    data-dependent trip counts in a loop body would stack)."""
    made = f"made by {op_site(value.op)}" if value.op is not None else "an argument of the body"
    site = op_site(op).replace("%", "%%")
    made = made.replace("%", "%%")
    return (f"{site} stacks its per-step output %%{value.id} ({made}) over its steps, but it "
            f"has shape %s at step %d and %s at the step run before it: its dims differ between "
            f"the steps (a trip count of a loop in the body that differs between the steps "
            f"gives such residuals; they cannot be stacked, so derivatives that would stack "
            f"them, a third derivative through a while loop of data-dependent trip counts in "
            f"a loop body, are not supported)")


def _check_stacked(op, body, first, shapes, outputs, step) -> None:
    """Raise :func:`ragged_stack_message` when a per-step output of ``outputs`` (those of
    ``body`` from index ``first`` on, at ``step``) has another shape than in ``shapes`` (the
    last step's, updated)."""
    for j, item in enumerate(outputs):
        shape = np.shape(item)
        if shapes[j] is not None and shapes[j] != shape:
            message = ragged_stack_message(op, body.yields[first + j])
            raise FeedError(message % (shape, step, shapes[j]))
        shapes[j] = shape


def _stack(items, like):
    """``items`` (arrays shaped like Value ``like``) stacked along a new axis 0; an empty
    stack has unknown dims of size 0."""
    if items:
        return np.stack(items)
    return np.empty((0,) + tuple(0 if d is None else d for d in like.shape), like.dtype)


def _run_while(op, args, run_block):
    count = op.attrs["num_vars"]
    cond_block, body = op.blocks
    loop_vars = list(args[:count])
    stacks = [[] for _ in body.yields[count:]]
    shapes = [None] * len(stacks)
    trips = 0
    while bool(run_block(cond_block, loop_vars)[0]):
        out = run_block(body, loop_vars)
        loop_vars = out[:count]
        _check_stacked(op, body, count, shapes, out[count:], trips)
        for stack, item in zip(stacks, out[count:]):
            stack.append(item)
        trips += 1
    results = loop_vars + [_stack(s, v) for s, v in zip(stacks, body.yields[count:])]
    if op.attrs["counted"]:
        results.append(np.int64(trips))
    return results


def _narrow_while(op, used):
    count, stacked = op.attrs["num_vars"], op.attrs["num_stacked"]
    keep_stacked = [j for j in range(stacked) if used[count + j]]
    counted = op.attrs["counted"] and used[-1]
    if len(keep_stacked) == stacked and counted == op.attrs["counted"]:
        return None
    kept = list(range(count)) + [count + j for j in keep_stacked]
    if counted:
        kept.append(len(used) - 1)
    attrs = dict(op.attrs, num_stacked=len(keep_stacked), counted=counted)
    return attrs, kept, [[0], list(range(count)) + [count + j for j in keep_stacked]]


def _while_dims(input_dims, attrs, shapes, blocks):
    count = attrs["num_vars"]
    _, body = blocks
    out = carried_dims("while_loop", input_dims[:count], [v.dims for v in body.yields[:count]],
                       "loop variable")
    out += [(None,) + v.dims for v in body.yields[count:]]
    return out + ([()] if attrs["counted"] else [])


def _while_layout(op) -> LoopLayout:
    attrs = op.attrs
    return LoopLayout(op, body_index=1, num_carry=attrs["num_vars"], num_xs=0, length=None,
                      reverse=False, has_length_input=False, counted=attrs["counted"],
                      can_count=True, remat=attrs.get("remat", False),
                      plan=attrs.get("plan"), _grow=lambda attrs, stacked, counted: dict(
                          attrs, num_stacked=attrs["num_stacked"] + stacked,
                          counted=counted or attrs["counted"]))


while_p = register(OpDef(
    "while_loop", REGION, infer=_while_rule, impl=None, dims=_while_dims,
    region=Region(("cond", "body"), lambda attrs: attrs["num_vars"], _run_while,
                  _narrow_while, layout=_while_layout),
    doc="Runs ``body`` while ``cond`` holds, carrying the loop vars."))


def while_loop(cond_fn, body_fn, loop_vars, checkpoint=None):
    """Paddle's ``static.nn.while_loop``: ``loop_vars`` a list/tuple of Values;
    ``cond_fn(*vars)`` returns a bool scalar Value; ``body_fn(*vars)`` returns a list/tuple of
    the same length, shapes and dtypes. Returns the final vars as a list. Both functions may
    read any Value of the enclosing program. Differentiable in reverse mode: the backward runs
    the recorded trip count in reverse. ``checkpoint``: None stores every step's residuals for
    it; an int ``k`` >= 1, ``"sqrt"`` and ``("binomial", s)`` count the steps and store
    nothing, the backward following that schedule for the count (``k``: the vars every ``k``
    steps, then each segment recomputed storing its vars; :mod:`symgrad.ops.checkpoint`).
    Results and gradients are the same, to every order."""
    if not isinstance(loop_vars, (list, tuple)) or not loop_vars:
        raise TypeError(f"while_loop: loop_vars must be a non-empty list/tuple of Values, got "
                        f"{loop_vars!r}")
    plan = run_time_plan("while_loop", checkpoint, None)
    program = program_of([v for v in loop_vars if isinstance(v, Value)], "while_loop")
    with program.transaction():
        init = _as_values("while_loop", "loop_vars", list(loop_vars), program)
        return list(_while_op(cond_fn, body_fn, init, program, plan=plan).results)


def _while_op(cond_fn, body_fn, init, program, plan=None):
    """Build the while_loop op of ``cond_fn`` and ``body_fn`` over the Values ``init``
    (``plan`` as :func:`_remat_attrs` takes it)."""
    var_types = _types(init)
    cond_block, cond_leaves, cond_structure = _run_in_block(
        program, _arg_types(init), cond_fn, "while_loop", "cond_fn", repeats=True)
    if cond_structure != LEAF:
        raise TypeError(f"while_loop: cond_fn must return one bool scalar Value, got "
                        f"{_describe_structure(cond_structure)}")
    _bool_scalar("while_loop", "cond_fn's result", cond_leaves[0])
    body, body_leaves, body_structure = _run_in_block(
        program, _arg_types(init), body_fn, "while_loop", "body_fn",
        expected_dtypes=[d for _, d in var_types], repeats=True)
    if body_structure == LEAF and len(init) == 1:
        body_structure = (list, (LEAF,))
    if body_structure[0] not in (list, tuple) or any(
            item != LEAF for item in body_structure[1]):
        raise TypeError(f"while_loop: body_fn must return a list/tuple of Values, got "
                        f"{_describe_structure(body_structure)}")
    _check_same_types("while_loop", _types(body_leaves), var_types, "body_fn", "loop_vars")
    cond_block.yields, body.yields = cond_leaves, body_leaves
    attrs = {"num_vars": len(init), "num_stacked": 0, "counted": False}
    attrs.update(_remat_attrs(False, plan))
    return bind_region(while_p, init, attrs, [cond_block, body], program)


# --- scan ----------------------------------------------------------------------------------------
def scan_length_input(attrs) -> bool:
    """Does a scan with ``attrs`` take its length as an input (no xs, length at run time)?"""
    return attrs["length"] is None and attrs["num_xs"] == 0


def _scan_explicit(attrs):
    return attrs["num_carry"] + attrs["num_xs"] + scan_length_input(attrs)


def _scan_rule(types, attrs, blocks):
    (body,) = blocks
    carries, count = attrs["num_carry"], attrs["num_xs"]
    carry_types = [(tuple(s), np.dtype(d)) for s, d in types[:carries]]
    _check_same_types("scan", _types(body.yields[:carries]), carry_types, "f's carry", "init")
    length = attrs["length"]
    for shape, _ in types[carries:carries + count]:
        if not shape:
            raise ShapeError("xs must have a leading axis to scan over")
        if length is not None and shape[0] is not None and shape[0] != length:
            raise ShapeError(f"xs of leading dim {shape[0]} do not match length {length}")
    if scan_length_input(attrs):
        shape, dtype = types[carries]
        if tuple(shape) != () or not _is_int(dtype):
            raise DTypeError(f"a run-time length must be an int scalar, got "
                             f"{dtypes_shape((shape, dtype))}")
    return carry_types + [((length,) + v.shape, v.dtype) for v in body.yields[carries:]]


def _scan_trip_count(op, args) -> int:
    attrs = op.attrs
    if attrs["length"] is not None:
        return attrs["length"]
    if attrs["num_xs"]:
        return args[attrs["num_carry"]].shape[0]
    return int(args[attrs["num_carry"]])


def _run_scan(op, args, run_block):
    carries, count = op.attrs["num_carry"], op.attrs["num_xs"]
    (body,) = op.blocks
    length = _scan_trip_count(op, args)
    carry = list(args[:carries])
    xs = args[carries:carries + count]
    stacks = [[None] * length for _ in body.yields[carries:]]
    shapes = [None] * len(stacks)
    steps = range(length - 1, -1, -1) if op.attrs["reverse"] else range(length)
    for t in steps:
        out = run_block(body, carry + [x[t] for x in xs])
        carry = out[:carries]
        _check_stacked(op, body, carries, shapes, out[carries:], t)
        for stack, item in zip(stacks, out[carries:]):
            stack[t] = item
    return carry + [_stack(s, v) for s, v in zip(stacks, body.yields[carries:])]


def _narrow_scan(op, used):
    carries = op.attrs["num_carry"]
    kept = kept_yields(used, first_dropped=carries)
    if kept is None:
        return None
    return dict(op.attrs), kept, [kept]


def _scan_dims(input_dims, attrs, shapes, blocks):
    (body,) = blocks
    carries, count = attrs["num_carry"], attrs["num_xs"]
    out = carried_dims("scan", input_dims[:carries], [v.dims for v in body.yields[:carries]])
    length = attrs["length"]
    for dims in input_dims[carries:carries + count]:
        length = dims[0] if length is None else unify(length, dims[0], "xs' leading dims")
    return out + [(length,) + v.dims for v in body.yields[carries:]]


def _scan_grow(attrs, stacked, counted):
    return dict(attrs)     # a scan stacks every yield after the carries; it never counts


def _scan_layout(op) -> LoopLayout:
    attrs = op.attrs
    return LoopLayout(op, body_index=0, num_carry=attrs["num_carry"], num_xs=attrs["num_xs"],
                      length=attrs["length"], reverse=attrs["reverse"],
                      has_length_input=scan_length_input(attrs), counted=False,
                      can_count=False, remat=attrs.get("remat", False),
                      plan=attrs.get("plan"), _grow=_scan_grow)


def _scan_repeats(op) -> list:
    return [0] if op.attrs["length"] else []     # a trip count known and at least 1


scan_p = register(OpDef(
    "scan", REGION, infer=_scan_rule, impl=None, dims=_scan_dims,
    region=Region(("body",), _scan_explicit, _run_scan, _narrow_scan, layout=_scan_layout,
                  repeats=_scan_repeats),
    doc="Runs ``body`` once per slice of ``xs``, carrying state and stacking outputs."))


def _leading_length(xs_leaves, length):
    """The static length of a scan over ``xs_leaves`` (None when known only at run time)."""
    dims = set()
    for x in xs_leaves:
        if not x.shape:
            raise ShapeError(f"scan: every xs needs a leading axis to scan over, got "
                             f"{x.type_str}")
        dims.add(x.shape[0])
    known = {d for d in dims if d is not None}
    if len(known) > 1:
        raise ShapeError(f"scan: xs have different leading dims {sorted(known)}")
    static = known.pop() if known else None
    if length is not None:
        if static is not None and static != length:
            raise ShapeError(f"scan: length={length} but xs have leading dim {static}")
        return length
    return static


def scan(f, init, xs=None, length=None, reverse=False, checkpoint=None):
    """JAX's ``lax.scan``: ``f(carry, x) -> (carry, y)`` run once per slice ``x`` of ``xs``
    along axis 0 (last to first with ``reverse``). ``init`` is a Value or a (nested)
    tuple/list of Values (the carry keeps that structure, shapes and dtypes); ``xs`` a Value, a
    tuple/list of Values, or None with ``length`` given. The ``y``s are stacked along a new
    axis 0 (a ``None`` y stays ``None``). Returns ``(carry, ys)``. ``f`` may read any Value of
    the enclosing program; gradients flow to ``init``, ``xs`` and what ``f`` reads.

    ``checkpoint``: what reverse mode keeps of the steps (:mod:`symgrad.ops.checkpoint`):
    ``None`` every step's residuals; an int ``k`` >= 1 the carry every ``k`` steps, the
    backward recomputing each segment of ``k`` steps from its carry; ``"sqrt"`` the same with
    ``k = ceil(sqrt(T))`` for the run-time ``T``; ``("binomial", s)`` at most ``s`` carries,
    with Griewank & Walther's optimal schedule for ``T``. Results and gradients are the same
    under every policy."""
    if length is not None and (isinstance(length, bool)
                               or not isinstance(length, (int, np.integer)) or length < 0):
        raise TypeError(f"scan: length must be a non-negative int, got {length!r}")
    init_leaves, init_structure = flatten(init, allow_none=True)
    xs_leaves, xs_structure = flatten(xs, allow_none=True)
    if not init_leaves and not xs_leaves and length is None:
        raise TypeError("scan: give xs or length")
    values = [v for v in init_leaves + xs_leaves if isinstance(v, Value)]
    program = program_of(values, "scan")
    with program.transaction():
        init_leaves = _as_values("scan", "init", init_leaves, program)
        xs_leaves = _as_values("scan", "xs", xs_leaves, program)
        static_length = _leading_length(xs_leaves, None if length is None else int(length))
        if not xs_leaves and static_length is None:
            raise TypeError("scan: give xs or length")
        init, xs = (init_leaves, init_structure), (xs_leaves, xs_structure)
        plan = run_time_plan("scan", checkpoint, static_length)
        steps = None if plan else segment_length("scan", checkpoint, static_length)
        if steps is not None:
            carry, ys = _checkpointed_scan(f, init, xs, static_length, steps, reverse)
            return unflatten(init_structure, carry), ys
        op, y_structure = _scan_op(f, init, xs, static_length, reverse, plan=plan)
    results = op.results
    return (unflatten(init_structure, results[:len(init_leaves)]),
            unflatten(y_structure, results[len(init_leaves):]))


def _scan_op(f, init, xs, static_length, reverse, remat=False, program=None, repeats=True,
             plan=None):
    """Build the scan op of ``f`` over ``init`` and ``xs`` (each ``(Values, structure)``) in
    ``program`` (by default theirs); returns it and the structure of the ``y``s. ``repeats``:
    the body counts as a loop body (random ops in it need a counter); ``remat`` and ``plan``
    as :func:`_remat_attrs` takes them."""
    (init_leaves, init_structure), (xs_leaves, xs_structure) = init, xs
    program = program or program_of(init_leaves + xs_leaves, "scan")
    carry_types = _types(init_leaves)
    slice_types = [(x.dims[1:], x.dtype) for x in xs_leaves]

    def call(*args):
        carry = unflatten(init_structure, args[:len(init_leaves)])
        x = unflatten(xs_structure, args[len(init_leaves):])
        out = f(carry, x)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"scan: f must return a pair (carry, y), got "
                            f"{type(out).__name__}")
        return out

    body, leaves, structure = _run_in_block(
        program, _arg_types(init_leaves) + slice_types, call, "scan", "f",
        expected_dtypes=[d for _, d in carry_types], allow_none=True, repeats=repeats)
    carry_structure, y_structure = structure[1]
    if carry_structure != init_structure:
        raise ShapeError(f"scan: f returns a carry of structure "
                         f"{_describe_structure(carry_structure)} but init is "
                         f"{_describe_structure(init_structure)}")
    _check_same_types("scan", _types(leaves[:len(init_leaves)]), carry_types, "f's carry",
                      "init")
    body.yields = leaves
    attrs = {"num_carry": len(init_leaves), "num_xs": len(xs_leaves),
             "length": static_length, "reverse": bool(reverse)}
    attrs.update(_remat_attrs(remat, plan))
    return bind_region(scan_p, init_leaves + xs_leaves, attrs, [body], program), y_structure


def _remat_attrs(remat, plan) -> dict:
    """The attrs marking a loop whose backward recomputes its body (``remat``), following the
    run-time schedule ``plan`` when one is given."""
    if plan is not None:
        return {"remat": True, "plan": tuple(plan)}
    return {"remat": True} if remat else {}


def _laid_out(y):
    """``y`` (a reshape or concatenation of segment loops' stacks), its op marked
    ``passes_cotangents`` (:mod:`symgrad.ir.operation`): reverse mode sums its cotangents on
    the stacks, as they come, as the unsplit scan does on its own stacks."""
    y.op.passes_cotangents = True
    return y


def _checkpointed_scan(f, init, xs, length, steps, reverse):
    """``scan`` of ``f`` over ``length`` steps in segments of ``steps``: a ``remat`` scan over
    the ``length // steps`` whole segments whose body is the scan of one segment, then (when
    ``steps`` does not divide ``length``) a copy of that inner scan for the last, shorter
    segment. Steps run in the order the plain scan runs them; ``reverse`` puts the shorter
    segment first in index order (it runs last). Returns the final carry's leaves and the
    ``y``s (structured). Reverse mode stores the carry at each segment start and the residuals
    of one segment at a time."""
    (init_leaves, _), (xs_leaves, xs_structure) = init, xs
    program = program_of(init_leaves + xs_leaves, "scan")
    count, rest = divmod(length, steps)
    whole = (rest, length) if reverse else (0, count * steps)
    short = (0, rest) if reverse else (count * steps, length)

    def part(x, bounds):
        return x[bounds[0]:bounds[1]] if rest else x

    def chunked(x):
        return reshape(part(x, whole), [count, steps] + list(x.shape[1:]))

    def last(x):
        return part(x, short)

    # the last segment's slices come first: the backward then adds their gradients to the
    # running sum of each xs after the loops' (bit for bit the order without checkpoint)
    short_xs = [last(x) for x in xs_leaves] if rest else []
    chunks = [chunked(x) for x in xs_leaves]
    inner = []

    def segment(carry, chunk):
        out = scan(f, carry, chunk, length=steps, reverse=reverse)
        inner.append(current_block(program).ops[-1])     # the scan op just built
        return out

    outer, y_structure = _scan_op(segment, init, (chunks, xs_structure), count, reverse,
                                  remat=True)
    carry = outer.results[:len(init_leaves)]
    stacks = outer.results[len(carry):]
    # the ys are laid out from the stacks, which the backward of the loops also reads (as
    # residuals): reverse mode passes each cotangent of a y on to the stacks, one sum per
    # number as without segments
    ys = [_laid_out(reshape(y, [count * steps] + list(y.shape[2:]))) for y in stacks]
    if rest:
        (op,) = inner
        tail = copied_region(op, carry + short_xs, dict(op.attrs, length=rest)).results
        carry = tail[:len(carry)]
        ys = [_laid_out(concatenate([y, t] if not reverse else [t, y]))
              for y, t in zip(ys, tail[len(carry):])]
    return carry, unflatten(y_structure, ys)


# --- checkpoint --------------------------------------------------------------------------------
def checkpoint(fn):
    """JAX's ``jax.checkpoint``: a function that returns what ``fn`` returns (a Value or a
    (nested) tuple/list of Values) but whose intermediate Values reverse mode does not store:
    the backward recomputes ``fn`` from its arguments and the Values it reads. Results and
    first derivatives are the same bit for bit as calling ``fn`` itself.

    The call builds a ``remat`` scan of one step with no carry (so every backend runs it):
    its body is ``fn``, its per-step outputs what ``fn`` returns."""
    def recomputed(*args):
        leaves = [leaf for leaf in flatten(args, allow_none=True)[0] if isinstance(leaf, Value)]
        program = program_of(leaves, "checkpoint")
        with program.transaction():
            op, y_structure = _scan_op(lambda carry, _: ((), fn(*args)), ([], flatten(())[1]),
                                       ([], None), 1, False, remat=True, program=program,
                                       repeats=False)
            return unflatten(y_structure, [y[0] for y in op.results])

    recomputed.__name__ = getattr(fn, "__name__", "checkpointed")
    recomputed.__doc__ = getattr(fn, "__doc__", None)
    return recomputed


# --- fori_loop ------------------------------------------------------------------------------------
def fori_loop(lower, upper, body_fn, init_val, checkpoint=None):
    """JAX's ``fori_loop``: ``val = body_fn(i, val)`` for ``i`` in ``[lower, upper)``, with ``i``
    an int64 scalar Value; returns the final ``val`` (a Value or a tuple/list of Values).
    ``lower``/``upper`` are ints (the loop is a ``scan`` of ``upper - lower`` steps) or int
    scalar Values (a ``while_loop``). ``checkpoint`` as for :func:`scan` with int bounds, as
    for :func:`while_loop` with Value bounds."""
    static = all(isinstance(b, (int, np.integer)) and not isinstance(b, bool)
                 for b in (lower, upper))
    if static:
        start = as_value(np.int64(lower), program=_program_for(init_val))

        def step(carry, _):
            i, val = carry
            return (i + np.int64(1), body_fn(i, val)), None

        (_, val), _ = scan(step, (start, init_val), length=max(0, int(upper) - int(lower)),
                           checkpoint=checkpoint)
        return val
    run_time_plan("fori_loop", checkpoint, None)   # refuses a bad policy now
    program = _program_for(init_val, lower, upper)
    bounds = []
    for name, bound in (("lower", lower), ("upper", upper)):
        if isinstance(bound, Value):
            if bound.shape != () or not _is_int(bound.dtype):
                raise DTypeError(f"fori_loop: {name} must be an int scalar, got "
                                 f"{bound.type_str}")
        elif not isinstance(bound, (int, np.integer)) or isinstance(bound, bool):
            raise TypeError(f"fori_loop: {name} must be an int or an int scalar Value, got "
                            f"{bound!r}")
        bounds.append(bound)
    with program.transaction():
        start, stop = (cast(as_value(b, program=program), "int64") if isinstance(b, Value)
                       else as_value(np.int64(b), program=program) for b in bounds)
        leaves, structure = flatten(init_val)

        def keep_going(i, *_):
            return i < stop

        def body(i, *vals):
            new = body_fn(i, unflatten(structure, vals))
            new_leaves, new_structure = flatten(new)
            if new_structure != structure:
                raise ShapeError(f"fori_loop: body_fn returns "
                                 f"{_describe_structure(new_structure)} but init_val is "
                                 f"{_describe_structure(structure)}")
            return [i + np.int64(1)] + list(new_leaves)

        final = while_loop(keep_going, body, [start] + list(leaves), checkpoint=checkpoint)
    return unflatten(structure, final[1:])


def _program_for(*trees):
    values = [leaf for tree in trees for leaf in flatten(tree)[0] if isinstance(leaf, Value)]
    return program_of(values, "fori_loop")
