"""Shape ops (category INJECTIVE): pure data movement.

``reshape``, ``transpose``, ``broadcast_to``, ``expand_dims``, ``squeeze``, ``concatenate``,
``stack``, ``split``, ``pad`` and basic indexing (``getitem``, which backs ``Value[...]``).

Internal helpers other VJPs build on (exported, not in ``__all__``):
``unbroadcast(g, like)``, ``broadcast_like(x, ref)``, ``reshape_like(x, ref)``,
``zeros_for(v)`` and ``strided_slice(x, index)``.

Attributes are plain JSON-friendly data: ints, ``None``, bools, strings and tuples. In
``broadcast_to``/``reshape`` targets, ``-1`` stands for "known only at run time" (``reshape``:
inferred from the size; ``broadcast_to``: the input's own dim). A basic index (attr ``index``
of ``slice``/``slice_scatter``) is a tuple of items, one per consumed or inserted axis: an int
(picks one element and drops the axis), ``None`` (inserts an axis) or a ``(start, stop, step)``
triple (a slice; ``start``/``stop`` may be ``None``). Axes past the index are taken whole.

Unknown dims: a slice of an unknown dim has an unknown size, while ``split`` points of the same
sign are assumed to lie inside the dim (as ``np.split`` needs to give pieces of those sizes).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..errors import DTypeError, IndexOutOfRangeError, ShapeError
from ..ir.dims import add, floordiv, mul, product, unify
from ..ir.location import user_location
from ..ir.value import Value, format_shape
from .batching import all_batched, axis_batch, batch_size, with_rank
from .core import (INJECTIVE, Algebra, OpDef, bind, code_int, dtypes_shape, normalize_axis,
                   raise_with_context, register)
from .elementwise import zeros_like
from .source import as_value, as_values, full_p

__all__ = ["reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "concatenate",
           "stack", "split", "pad", "getitem"]


# --- shared helpers ---------------------------------------------------------------------------
class frontend_checks:
    """Context manager reporting a ShapeError/DTypeError raised by a front end's own argument
    checks (done before ``bind``) the way ``bind`` reports shape-rule errors: op name, input
    types and the user's source line."""

    def __init__(self, name, values):
        self.name, self.values = name, values

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None or not issubclass(exc_type, (ShapeError, DTypeError)):
            return False
        shown = ", ".join(dtypes_shape((v.shape, v.dtype)) for v in self.values) or "no inputs"
        message = f"{self.name}: {exc} (inputs: {shown})"
        loc = user_location()
        if loc:
            message += f"\n  built at {loc}"
        raise exc_type(message) from None


def _merge_dims(a, b, what):
    """One dim from two that must agree (``None`` agrees with anything)."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    raise ShapeError(what)


def _int_list(values, what):
    """``values`` (an int or a sequence of ints) as a tuple of Python ints."""
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        return (int(values),)
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{what} must be an int or a list/tuple of ints, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what} must hold ints, got {values!r}")
        out.append(int(v))
    return tuple(out)


# --- symbolic dims rules (see OpDef.dims) -------------------------------------------------------
def _reshape_dims(input_dims, attrs, shapes):
    dims, = input_dims
    target = tuple(attrs["shape"])
    total = product(dims)
    if -1 not in target:
        unify(total, product(target), "the element count")
        return [target]
    fixed = product(d for d in target if d != -1)
    inferred = floordiv(total, fixed) if fixed else None
    return [tuple(inferred if d == -1 else d for d in target)]


def _reshape_like_dims(input_dims, attrs, shapes):
    dims, ref = input_dims
    unify(product(dims), product(ref), "the element count")
    return [ref]


def _transpose_dims(input_dims, attrs, shapes):
    dims, = input_dims
    return [tuple(dims[a] for a in attrs["axes"])]


def _broadcast_dims_to(dims, target, what):
    """``dims`` broadcast to ``target`` (dims, None keeping the input's own dim)."""
    lead = len(target) - len(dims)
    out = []
    for i, t in enumerate(target):
        d = dims[i - lead] if i >= lead else 1
        if t is None:
            out.append(d)
        elif d == 1:
            out.append(t)
        else:
            out.append(unify(d, t, f"{what}, axis {i}"))
    return tuple(out)


def _broadcast_to_dims(input_dims, attrs, shapes):
    target = tuple(None if t == -1 else t for t in attrs["shape"])
    return [_broadcast_dims_to(input_dims[0], target, "the target")]


def _broadcast_like_dims(input_dims, attrs, shapes):
    return [_broadcast_dims_to(input_dims[0], input_dims[1], "the target")]


def _expand_dims_dims(input_dims, attrs, shapes):
    dims, = input_dims
    axes = set(attrs["axis"])
    rest = iter(dims)
    return [tuple(1 if i in axes else next(rest) for i in range(len(dims) + len(axes)))]


def _squeeze_dims(input_dims, attrs, shapes):
    return [tuple(d for i, d in enumerate(input_dims[0]) if i not in attrs["axis"])]


def _joined_dims(all_dims, skip_axis, what):
    merged = list(all_dims[0])
    for dims in all_dims[1:]:
        for i, d in enumerate(dims):
            if i != skip_axis:
                merged[i] = unify(merged[i], d, f"{what}, axis {i}")
    return merged


def _concatenate_dims(input_dims, attrs, shapes):
    axis = attrs["axis"]
    merged = _joined_dims(input_dims, axis, "the inputs")
    total = 0
    for dims in input_dims:
        total = add(total, dims[axis])
    merged[axis] = total
    return [tuple(merged)]


def _stack_dims(input_dims, attrs, shapes):
    merged = _joined_dims(input_dims, None, "the inputs")
    merged.insert(attrs["axis"], len(input_dims))
    return [tuple(merged)]


def _piece_dim(start, stop, n):
    """The length of ``a[start:stop]`` along a dim ``n`` (symbolic), the bounds inside it."""
    def position(bound, default):
        if bound is None:
            return default
        return bound if bound >= 0 else add(n, bound)
    return add(position(stop, n), mul(position(start, 0), -1))


def _split_dims(input_dims, attrs, shapes):
    dims, = input_dims
    axis, spec = attrs["axis"], attrs["indices_or_sections"]
    n = dims[axis]
    if isinstance(spec, int):
        sizes = [floordiv(n, spec)] * spec
    else:
        bounds = [0] + list(spec) + [None]
        sizes = [_piece_dim(a, b, n) for a, b in zip(bounds[:-1], bounds[1:])]
    return [dims[:axis] + (size,) + dims[axis + 1:] for size in sizes]


def _split_like_dims(input_dims, attrs, shapes):
    dims, axis = input_dims[0], attrs["axis"]
    return [dims[:axis] + (ref[axis],) + dims[axis + 1:] for ref in input_dims[1:]]


def _pad_dims(input_dims, attrs, shapes):
    return [tuple(add(d, b + a) for d, (b, a) in zip(input_dims[0], attrs["pad_width"]))]


def _slice_dims(input_dims, attrs, shapes):
    """A whole slice (``:``) keeps a symbolic dim; any other slice of one is a fresh dim."""
    dims, = input_dims
    out, axis = [], 0
    for item in attrs["index"]:
        if item is None:
            out.append(1)
            continue
        if isinstance(item, (list, tuple)):
            whole = tuple(item) in ((None, None, None), (None, None, 1), (0, None, 1),
                                    (0, None, None))
            out.append(dims[axis] if whole else None)
        axis += 1
    return [tuple(out) + tuple(dims[axis:])]


# --- batching rules (see symgrad.ops.batching) ----------------------------------------------------
def _reshape_batch(op, inputs, axes):
    """The batch leads the target; with a run-time batch size the target must be otherwise
    static (its -1 then stands for the batch)."""
    (x,) = inputs
    target = tuple(op.attrs["shape"])
    size = x.shape[0]
    if size is None:
        if -1 in target:
            return NotImplemented
        size = -1
    return [bind(reshape_p, [x], {"shape": (size,) + target})], [0]


def _reshape_like_batch(op, inputs, axes):
    """Both batched: the reference's run-time shape then holds the batch."""
    if axes[0] is None or axes[1] is None:
        return NotImplemented
    return [bind(reshape_like_p, inputs)], [0]


def _transpose_batch(op, inputs, axes):
    order = (0,) + tuple(a + 1 for a in op.attrs["axes"])
    return [bind(transpose_p, inputs, {"axes": order})], [0]


def _broadcast_to_batch(op, inputs, axes):
    """The batch axis keeps its own (-1) in front of the per-example target."""
    target = tuple(op.attrs["shape"])
    x = with_rank(inputs[0], len(target))
    return [bind(broadcast_to_p, [x], {"shape": (-1,) + target})], [0]


def _broadcast_like_batch(op, inputs, axes):
    """Batched like a batched reference; a batched input needs one."""
    x, ref = inputs
    if axes[1] is None:
        return NotImplemented
    if axes[0] is not None:
        x = with_rank(x, ref.ndim - 1)
    return [bind(broadcast_like_p, [x, ref])], [0]


def _pad_batch(op, inputs, axes):
    attrs = {**op.attrs, "pad_width": ((0, 0),) + tuple(op.attrs["pad_width"])}
    return [bind(pad_p, inputs, attrs)], [0]


_WHOLE = (None, None, None)   # the index item of an axis taken whole


def _slice_batch(op, inputs, axes):
    attrs = {"index": (_WHOLE,) + tuple(op.attrs["index"])}
    return [bind(slice_p, inputs, attrs)], [0]


def _slice_scatter_batch(op, inputs, axes):
    """The batch leads the index and the shape (run-time shape from the batched
    reference, else a static batch size)."""
    size = batch_size(inputs, axes)
    values = all_batched(inputs, axes) if len(inputs) > 1 else list(inputs)
    if values is None or (size is None and len(inputs) == 1):
        return NotImplemented
    attrs = {"index": (_WHOLE,) + tuple(op.attrs["index"]),
             "shape": (size,) + tuple(op.attrs["shape"])}
    return [bind(slice_scatter_p, values, attrs)], [0]


_AXIS_BATCH = axis_batch("axis")


# --- reshape ------------------------------------------------------------------------------------
def _reshape_rule(types, attrs):
    (shape, dtype), = types
    target = tuple(attrs["shape"])
    shown = f"cannot reshape {format_shape(shape)} into {list(target)}"
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ShapeError(f"{shown}: at most one -1 and no other negative dim")
    fixed = math.prod(d for d in target if d != -1)
    known = math.prod(d for d in shape if d is not None)
    if None in shape:
        if -1 not in target and known and fixed % known:
            raise ShapeError(f"{shown}: {fixed} elements is not a multiple of {known}")
        return tuple(None if d == -1 else d for d in target), dtype
    if -1 in target:
        if fixed == 0 or known % fixed:
            raise ShapeError(f"{shown}: {known} elements do not split into blocks of {fixed}")
        return tuple(known // fixed if d == -1 else d for d in target), dtype
    if fixed != known:
        raise ShapeError(f"{shown}: {known} elements != {fixed}")
    return target, dtype


def _reshape_to(g, like):
    """``g`` reshaped to the shape of Value ``like`` (its run-time shape if dims are unknown)."""
    if g.shape == like.shape and None not in like.shape:
        return g
    if like.shape.count(None) <= 1:
        return reshape(g, [-1 if d is None else d for d in like.shape])
    return reshape_like(g, like)


reshape_p = register(OpDef(
    "reshape", INJECTIVE, _reshape_rule,
    algebra=Algebra(no_op_when_same_type=True, collapses=True, keeps_fill=True),
    impl=lambda x, shape: np.reshape(x, shape),
    vjp=lambda op, g: [_reshape_to(g[0], op.inputs[0])],
    dims=_reshape_dims,
    batch=_reshape_batch,
    doc="Reshape to a static target; -1 (at most once) is inferred at run time."))


def _reshape_like_rule(types, attrs):
    (shape, dtype), (target, _) = types
    if None not in shape and None not in target and math.prod(shape) != math.prod(target):
        raise ShapeError(f"cannot reshape {format_shape(shape)} into {format_shape(target)}")
    return target, dtype


reshape_like_p = register(OpDef(
    "reshape_like", INJECTIVE, _reshape_like_rule,
    algebra=Algebra(no_op_when_same_type=True, keeps_fill=True, shape_only=(1,)),
    impl=lambda x, ref: np.reshape(x, ref.shape),
    vjp=lambda op, g: [_reshape_to(g[0], op.inputs[0]), None],
    dims=_reshape_like_dims,
    batch=_reshape_like_batch,
    doc="Reshape the first input to the run-time shape of the second (which gets no gradient)."))


def reshape(x, shape):
    """``np.reshape``: ``shape`` is an int or a sequence of ints, ``-1`` (or ``None``) at most
    once. With unknown input dims, the target may hold one ``-1``, or be fully known."""
    x = as_value(x)
    if isinstance(shape, (list, tuple)):
        shape = [-1 if d is None else d for d in shape]
    return bind(reshape_p, [x], {"shape": _int_list(shape, "reshape: shape")})


def reshape_like(x, ref):
    """Internal: reshape ``x`` to ``ref``'s run-time shape (no gradient flows to ``ref``)."""
    return bind(reshape_like_p, [x, ref])


# --- transpose ----------------------------------------------------------------------------------
def _transpose_rule(types, attrs):
    (shape, dtype), = types
    axes = tuple(attrs["axes"])
    if sorted(axes) != list(range(len(shape))):
        raise ShapeError(f"axes {list(axes)} are not a permutation of the {len(shape)} axes "
                         f"of {format_shape(shape)}")
    return tuple(shape[a] for a in axes), dtype


transpose_p = register(OpDef(
    "transpose", INJECTIVE, _transpose_rule,
    algebra=Algebra(permutation="axes", keeps_fill=True),
    impl=lambda x, axes: np.transpose(x, axes),
    vjp=lambda op, g: [transpose(g[0], tuple(int(i) for i in np.argsort(op.attrs["axes"])))],
    dims=_transpose_dims,
    batch=_transpose_batch,
    doc="Permute axes (``axes[i]`` is the input axis that becomes axis i)."))


def transpose(x, axes=None):
    """``np.transpose``: ``axes=None`` reverses the axes; negative axes are accepted."""
    x = as_value(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    else:
        axes = tuple(a % x.ndim if -x.ndim <= a < 0 else a
                     for a in _int_list(axes, "transpose: axes"))
    return bind(transpose_p, [x], {"axes": axes})


# --- broadcasting -------------------------------------------------------------------------------
def _broadcast_target(shape, target, keep_marker):
    """Result shape of broadcasting ``shape`` to ``target``. ``keep_marker`` entries of the
    target (``-1`` for ``broadcast_to``, ``None`` for ``broadcast_like``) take the input's dim."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise ShapeError(f"cannot broadcast {format_shape(shape)} to the lower rank "
                         f"{list(target)}")
    out = []
    for i, t in enumerate(target):
        d = shape[i - lead] if i >= lead else 1
        if t == keep_marker:
            if i < lead and keep_marker == -1:
                raise ShapeError(f"-1 in target {list(target)} has no input dim to keep")
            out.append(None if d == 1 and keep_marker is None else d)
        elif d is None or d == 1 or d == t:
            out.append(t)
        else:
            raise ShapeError(f"cannot broadcast {format_shape(shape)} to {list(target)}")
    return tuple(out)


def _sg_broadcast_to(x, shape):
    """``np.broadcast_to`` where ``-1`` entries of ``shape`` keep ``x``'s own dim."""
    lead = len(shape) - x.ndim
    return np.broadcast_to(x, tuple(x.shape[i - lead] if t == -1 else t
                                    for i, t in enumerate(shape)))


broadcast_to_p = register(OpDef(
    "broadcast_to", INJECTIVE,
    lambda types, attrs: (_broadcast_target(types[0][0], tuple(attrs["shape"]), -1), types[0][1]),
    algebra=Algebra(no_op_when_same_type=True, collapses=True, broadcast=True, keeps_fill=True),
    impl=_sg_broadcast_to,
    vjp=lambda op, g: [unbroadcast(g[0], op.inputs[0])],
    dims=_broadcast_to_dims,
    batch=_broadcast_to_batch,
    doc="NumPy broadcasting to a static target; -1 keeps the input's (run-time) dim."))


def broadcast_to(x, shape):
    """``np.broadcast_to``; an entry ``-1`` (or ``None``) keeps the input's dim, which is how
    a dim known only at run time is kept."""
    x = as_value(x)
    if isinstance(shape, (list, tuple)):
        shape = [-1 if d is None else d for d in shape]
    return bind(broadcast_to_p, [x], {"shape": _int_list(shape, "broadcast_to: shape")})


broadcast_like_p = register(OpDef(
    "broadcast_like", INJECTIVE,
    lambda types, attrs: (_broadcast_target(types[0][0], types[1][0], None), types[0][1]),
    algebra=Algebra(no_op_when_same_type=True, broadcast=True, keeps_fill=True,
                    shape_only=(1,)),
    impl=lambda x, ref: np.broadcast_to(x, ref.shape),
    vjp=lambda op, g: [unbroadcast(g[0], op.inputs[0]), None],
    dims=_broadcast_like_dims,
    batch=_broadcast_like_batch,
    doc="Broadcast the first input to the run-time shape of the second (no gradient to it)."))


def broadcast_like(x, ref):
    """Internal: ``x`` broadcast to ``ref``'s (run-time) shape; ``ref`` gets no gradient.

    Returns ``x`` when the shapes already agree, a static ``broadcast_to`` when every dim the
    broadcast creates is known, and a ``broadcast_like`` op (reading ``ref``'s shape when the
    program runs) otherwise."""
    if x.shape == ref.shape:
        return x
    lead = ref.ndim - x.ndim
    target = []
    for i, d in enumerate(ref.shape):
        own = x.shape[i - lead] if i >= lead else 1
        if d is not None:
            target.append(d)
        elif own == 1:
            return bind(broadcast_like_p, [x, ref])
        else:
            target.append(-1 if own is None else own)
    return bind(broadcast_to_p, [x], {"shape": tuple(target)})


def unbroadcast(g, like):
    """Internal: the cotangent ``g`` of a broadcast result summed down to the shape of Value
    ``like`` (leading extra axes summed away, axes where ``like`` has size 1 summed with
    keepdims) and cast to ``like.dtype``; ``g`` itself when there is nothing to do."""
    from .reduction import sum as reduce_sum

    lead = g.ndim - like.ndim
    if lead < 0:
        raise ShapeError(f"cannot unbroadcast {g.type_str} to the higher rank {like.type_str}")
    ones = tuple(i + lead for i, d in enumerate(like.shape) if d == 1 and g.shape[i + lead] != 1)
    if ones:
        g = reduce_sum(g, axis=ones, keepdims=True)
    if lead:
        g = reduce_sum(g, axis=tuple(range(lead)))
    if g.dtype != like.dtype:
        from .elementwise import cast

        g = cast(g, like.dtype)
    return g


def zeros_for(v):
    """Internal: zeros with the shape (run-time shape if unknown) and dtype of Value ``v``."""
    if None not in v.shape:
        return bind(full_p, [], {"shape": v.shape, "dtype": v.dtype,
                                 "fill_value": v.dtype.type(0).item()}, program=v.program)
    return zeros_like(v)


# --- expand_dims / squeeze ----------------------------------------------------------------------
def _expand_dims_rule(types, attrs):
    (shape, dtype), = types
    axes = set(attrs["axis"])
    rest = iter(shape)
    return tuple(1 if i in axes else next(rest) for i in range(len(shape) + len(axes))), dtype


def _squeeze_rule(types, attrs):
    (shape, dtype), = types
    for a in attrs["axis"]:
        if shape[a] not in (1, None):
            raise ShapeError(f"cannot squeeze axis {a} of {format_shape(shape)}: its size is "
                             f"{shape[a]}, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in attrs["axis"]), dtype


expand_dims_p = register(OpDef(
    "expand_dims", INJECTIVE, _expand_dims_rule,
    algebra=Algebra(no_op_when_same_type=True, keeps_fill=True),
    impl=lambda x, axis: np.expand_dims(x, axis),
    vjp=lambda op, g: [squeeze(g[0], op.attrs["axis"])],
    dims=_expand_dims_dims,
    batch=_AXIS_BATCH,
    doc="Insert size-1 axes at ``axis`` (positions in the result)."))

squeeze_p = register(OpDef(
    "squeeze", INJECTIVE, _squeeze_rule,
    algebra=Algebra(no_op_when_same_type=True, keeps_fill=True),
    impl=lambda x, axis: np.squeeze(x, axis),
    vjp=lambda op, g: [expand_dims(g[0], op.attrs["axis"])],
    dims=_squeeze_dims,
    batch=_AXIS_BATCH,
    doc="Remove size-1 axes ``axis`` (an unknown dim there must be 1 at run time)."))


def expand_dims(x, axis):
    """``np.expand_dims``: ``axis`` is an int or a tuple, positions in the result."""
    x = as_value(x)
    axis = _int_list(axis, "expand_dims: axis")
    with frontend_checks("expand_dims", [x]):
        axis = normalize_axis(axis, x.ndim + len(axis))
    return bind(expand_dims_p, [x], {"axis": axis})


def squeeze(x, axis=None):
    """``np.squeeze``: ``axis=None`` drops every axis statically known to be 1."""
    x = as_value(x)
    if axis is None:
        axis = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        with frontend_checks("squeeze", [x]):
            axis = normalize_axis(_int_list(axis, "squeeze: axis"), x.ndim)
    return bind(squeeze_p, [x], {"axis": axis})


# --- concatenate / stack / split --------------------------------------------------------------
def _join_shapes(shapes, skip_axis=None):
    """Merge shapes that must agree (except along ``skip_axis``); returns a list."""
    shown = ", ".join(format_shape(s) for s in shapes)
    if len({len(s) for s in shapes}) != 1:
        raise ShapeError(f"needs inputs of one rank, got {shown}")
    merged = list(shapes[0])
    for shape in shapes[1:]:
        for i, d in enumerate(shape):
            if i != skip_axis:
                merged[i] = _merge_dims(merged[i], d, "shapes differ" + (
                    "" if skip_axis is None else f" outside axis {skip_axis}") + f": {shown}")
    return merged


def _concatenate_rule(types, attrs):
    shapes = [s for s, _ in types]
    axis = attrs["axis"]
    if not types:
        raise ShapeError("needs at least one input")
    if not shapes[0] or not 0 <= axis < len(shapes[0]):
        raise ShapeError(f"axis {axis} is out of range for {format_shape(shapes[0])}")
    merged = _join_shapes(shapes, axis)
    sizes = [s[axis] for s in shapes]
    merged[axis] = None if None in sizes else sum(sizes)
    return tuple(merged), dtypes.promote(*[d for _, d in types])


def _gradient_for(piece, value):
    """A piece of a cotangent as the gradient of ``value``: cast to its float dtype;
    ``None`` for integer/bool inputs (which carry no gradient)."""
    if not dtypes.is_float(value.dtype):
        return None
    return piece if piece.dtype == value.dtype else piece.astype(value.dtype)


def _split_points(sizes):
    """``np.split`` indices cutting pieces of ``sizes`` (at most one unknown): counted from
    the front up to the unknown piece and from the back after it. ``None`` if not expressible."""
    if sizes.count(None) > 1:
        return None
    points = []
    for k in range(len(sizes) - 1):
        front, back = sizes[:k + 1], sizes[k + 1:]
        if None not in front:
            points.append(sum(front))
        elif sum(back) > 0:
            points.append(-sum(back))
        else:
            return None
    return tuple(points)


def _concatenate_vjp(op, g):
    g, = g
    axis = op.attrs["axis"]
    if len(op.inputs) == 1:
        pieces = [g]
    else:
        points = _split_points([v.shape[axis] for v in op.inputs])
        if points is None:
            pieces = list(bind(split_like_p, [g] + list(op.inputs), {"axis": axis}))
        else:
            pieces = _split_list(g, points, axis)
    return [_gradient_for(p, v) for p, v in zip(pieces, op.inputs)]


concatenate_p = register(OpDef(
    "concatenate", INJECTIVE, _concatenate_rule,
    impl=lambda *xs, axis: np.concatenate(xs, axis=axis),
    vjp=_concatenate_vjp,
    dims=_concatenate_dims,
    batch=_AXIS_BATCH,
    doc="Join inputs along an existing axis (dtypes promote as in NumPy)."))


def _stack_rule(types, attrs):
    shapes = [s for s, _ in types]
    if not types:
        raise ShapeError("needs at least one input")
    merged = _join_shapes(shapes)
    if not 0 <= attrs["axis"] <= len(merged):
        raise ShapeError(f"axis {attrs['axis']} is out of range for {len(merged) + 1} axes")
    merged.insert(attrs["axis"], len(types))
    return tuple(merged), dtypes.promote(*[d for _, d in types])


def _stack_vjp(op, g):
    axis = op.attrs["axis"]
    pieces = _split_list(g[0], len(op.inputs), axis)
    return [_gradient_for(squeeze(p, axis), v) for p, v in zip(pieces, op.inputs)]


stack_p = register(OpDef(
    "stack", INJECTIVE, _stack_rule,
    impl=lambda *xs, axis: np.stack(xs, axis=axis),
    vjp=_stack_vjp,
    dims=_stack_dims,
    batch=_AXIS_BATCH,
    doc="Join inputs of one shape along a new axis."))


def _join_inputs(name, values):
    if isinstance(values, Value) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} expects a list or tuple of Values, got {type(values).__name__}")
    if not values:
        raise ShapeError(f"{name} needs at least one input")
    return as_values(*values)


def concatenate(values, axis=0):
    """``np.concatenate`` of a list of Values along ``axis`` (negative allowed)."""
    values = _join_inputs("concatenate", values)
    ndim = values[0].ndim
    with frontend_checks("concatenate", values):
        if ndim == 0:
            raise ShapeError("zero-dimensional inputs cannot be concatenated")
        axis, = normalize_axis(int(axis), ndim)
    return bind(concatenate_p, values, {"axis": axis})


def stack(values, axis=0):
    """``np.stack`` of a list of Values along a new axis ``axis`` (negative allowed)."""
    values = _join_inputs("stack", values)
    with frontend_checks("stack", values):
        axis, = normalize_axis(int(axis), values[0].ndim + 1)
    return bind(stack_p, values, {"axis": axis})


def _piece_size(start, stop, n):
    """Length of ``a[start:stop]`` along a dim of size ``n`` (``None`` if unknown). With an
    unknown dim, bounds of the same sign are assumed to lie inside it."""
    if n is not None:
        return len(range(n)[start:stop])
    if stop is None:
        return -start if start < 0 else None
    if (start < 0) == (stop < 0):
        return max(0, stop - start)
    return None


def _split_rule(types, attrs):
    (shape, dtype), = types
    axis, spec = attrs["axis"], attrs["indices_or_sections"]
    if not shape or not 0 <= axis < len(shape):
        raise ShapeError(f"axis {axis} is out of range for {format_shape(shape)}")
    n = shape[axis]
    if isinstance(spec, int):
        if spec <= 0:
            raise ShapeError(f"number of sections must be positive, got {spec}")
        if n is not None and n % spec:
            raise ShapeError(f"axis {axis} of {format_shape(shape)} does not split into "
                             f"{spec} equal sections")
        sizes = [None if n is None else n // spec] * spec
    else:
        bounds = [0] + list(spec) + [None]
        sizes = [_piece_size(a, b, n) for a, b in zip(bounds[:-1], bounds[1:])]
    return [(shape[:axis] + (size,) + shape[axis + 1:], dtype) for size in sizes]


def _pieces_vjp(op, g):
    """VJP of an op cutting its first input into pieces: join the pieces' cotangents back,
    with zeros only for the pieces that received none."""
    pieces = [ct if ct is not None else zeros_for(r) for ct, r in zip(g, op.results)]
    joined = pieces[0] if len(pieces) == 1 else concatenate(pieces, op.attrs["axis"])
    return [joined] + [None] * (len(op.inputs) - 1)


split_p = register(OpDef(
    "split", INJECTIVE, _split_rule,
    impl=lambda x, indices_or_sections, axis: tuple(np.split(x, indices_or_sections, axis)),
    vjp=_pieces_vjp,
    dims=_split_dims,
    batch=_AXIS_BATCH,
    doc="``np.split``: equal sections (an int) or pieces between split points (a tuple); "
        "one result per piece."))


def _split_like_rule(types, attrs):
    (shape, dtype), refs = types[0], types[1:]
    axis = attrs["axis"]
    return [(shape[:axis] + (s[axis],) + shape[axis + 1:], dtype) for s, _ in refs]


def _sg_split_like(x, *refs, axis):
    """Cut ``x`` along ``axis`` into pieces as long as each ``ref`` is along that axis."""
    return tuple(np.split(x, np.cumsum([r.shape[axis] for r in refs])[:-1], axis=axis))


split_like_p = register(OpDef(
    "split_like", INJECTIVE, _split_like_rule, impl=_sg_split_like,
    vjp=_pieces_vjp,
    dims=_split_like_dims,
    batch=_AXIS_BATCH,
    doc="Cut the first input into pieces sized like the other inputs along ``axis`` "
        "(their run-time sizes; used by the VJP of concatenate)."))


def _split_list(x, indices_or_sections, axis):
    result = bind(split_p, [x], {"indices_or_sections": indices_or_sections, "axis": axis})
    return [result] if isinstance(result, Value) else list(result)


def split(x, indices_or_sections, axis=0):
    """``np.split``: a list of Values. ``indices_or_sections`` is a number of equal sections
    or a sequence of split points (negative points count from the end)."""
    x = as_value(x)
    with frontend_checks("split", [x]):
        if x.ndim == 0:
            raise ShapeError("cannot split a 0-d Value")
        axis, = normalize_axis(int(axis), x.ndim)
    if isinstance(indices_or_sections, (int, np.integer)):
        spec = int(indices_or_sections)
    else:
        spec = _int_list(list(indices_or_sections), "split: indices")
    return _split_list(x, spec, axis)


# --- pad ----------------------------------------------------------------------------------------
def _pad_rule(types, attrs):
    (shape, dtype), = types
    widths = attrs["pad_width"]
    if len(widths) != len(shape):
        raise ShapeError(f"pad_width has {len(widths)} pairs for {format_shape(shape)}")
    return tuple(None if d is None else d + b + a for d, (b, a) in zip(shape, widths)), dtype


def _pad_vjp(op, g):
    index = tuple((b or None, -a or None, None) for b, a in op.attrs["pad_width"])
    return [strided_slice(g[0], index)]


pad_p = register(OpDef(
    "pad", INJECTIVE, _pad_rule,
    impl=lambda x, pad_width, constant_values: np.pad(x, pad_width,
                                                     constant_values=constant_values),
    vjp=_pad_vjp,
    dims=_pad_dims,
    batch=_pad_batch,
    doc="Constant padding; ``pad_width`` is one (before, after) pair per axis."))


def _pad_pairs(pad_width, ndim):
    """NumPy's ``pad_width`` forms (int, (n,), (before, after), ((b, a),), one pair per
    axis) as a tuple of ``(before, after)`` pairs, one per axis."""
    try:
        widths = np.asarray(pad_width)
        if widths.dtype.kind not in "iu" or widths.ndim > 2:
            raise ValueError
        pairs = np.broadcast_to(widths, (ndim, 2))
    except ValueError:
        raise ShapeError(f"pad_width {pad_width!r} is not an int, a (before, after) pair or "
                         f"{ndim} such pairs") from None
    if (pairs < 0).any():
        raise ShapeError(f"pad_width {pad_width!r} has a negative width")
    return tuple((int(b), int(a)) for b, a in pairs)


def pad(x, pad_width, constant_values=0):
    """``np.pad`` in constant mode; ``constant_values`` is one scalar."""
    x = as_value(x)
    if isinstance(constant_values, Value) or np.ndim(constant_values) != 0:
        raise TypeError(f"pad: constant_values must be one Python/NumPy scalar, "
                        f"got {constant_values!r}")
    with frontend_checks("pad", [x]):
        pairs = _pad_pairs(pad_width, x.ndim)
    value = np.asarray(constant_values).item()
    return bind(pad_p, [x], {"pad_width": pairs, "constant_values": value})


# --- basic indexing ---------------------------------------------------------------------------
def _index_tuple(index):
    """The attr form of a basic index as a NumPy index tuple."""
    return tuple(slice(*item) if isinstance(item, (list, tuple)) else item for item in index)


def index_code(index):
    """The attr form of a basic index as NumPy source (``1, ::2, None``)."""
    parts = []
    for item in index:
        if isinstance(item, (list, tuple)):
            start, stop, step = ("" if v is None else code_int(v) for v in item)
            parts.append(f"{start}:{stop}" + (f":{step}" if step not in ("", "1") else ""))
        else:
            parts.append("None" if item is None else code_int(item))
    return ", ".join(parts) if parts else "..."


def _sliced_shape(shape, index):
    out, axis = [], 0
    for item in index:
        if item is None:
            out.append(1)
            continue
        if axis >= len(shape):
            raise ShapeError(f"index {index_code(index)} has too many entries for "
                             f"{format_shape(shape)}")
        n = shape[axis]
        if isinstance(item, (list, tuple)):
            out.append(None if n is None else len(range(n)[slice(*item)]))
        elif n is not None and not -n <= item < n:
            raise ShapeError(f"index {item} is out of range for axis {axis} of "
                             f"{format_shape(shape)}")
        axis += 1
    return tuple(out) + tuple(shape[axis:])


slice_p = register(OpDef(
    "slice", INJECTIVE,
    lambda types, attrs: (_sliced_shape(types[0][0], attrs["index"]), types[0][1]),
    impl=lambda x, index: x[_index_tuple(index)],
    vjp=lambda op, g: [slice_scatter(g[0], op.inputs[0], op.attrs["index"])],
    dims=_slice_dims,
    batch=_slice_batch,
    doc="Basic indexing: ints, strided slices (negative steps too) and new axes."))


def _slice_scatter_rule(types, attrs):
    (g_shape, dtype) = types[0]
    shape = tuple(attrs["shape"])
    sliced = _sliced_shape(shape, attrs["index"])
    if len(sliced) != len(g_shape):
        raise ShapeError(f"cotangent {format_shape(g_shape)} does not match the slice "
                         f"{format_shape(sliced)} of {format_shape(shape)}")
    for a, b in zip(sliced, g_shape):
        _merge_dims(a, b, f"cotangent {format_shape(g_shape)} does not match the slice "
                          f"{format_shape(sliced)} of {format_shape(shape)}")
    return shape, dtype


def _sg_slice_scatter(g, shape, index):
    """Zeros of ``shape`` with ``g`` written at ``index``."""
    out = np.zeros(shape, dtype=g.dtype)
    out[index] = g
    return out


slice_scatter_p = register(OpDef(
    "slice_scatter", INJECTIVE, _slice_scatter_rule,
    impl=lambda g, *ref, index, shape: _sg_slice_scatter(
        g, ref[0].shape if ref else shape, _index_tuple(index)),
    vjp=lambda op, g: [strided_slice(g[0], op.attrs["index"])] + [None] * (len(op.inputs) - 1),
    dims=lambda input_dims, attrs, shapes: [input_dims[1] if len(input_dims) > 1 else None],
    batch=_slice_scatter_batch,
    doc="The cotangent of a slice written into zeros of the sliced input's shape (the run-time "
        "shape of the optional second input when dims are unknown)."))


def strided_slice(x, index):
    """Internal: the ``slice`` op for an attr-form basic index (see the module docstring)."""
    return bind(slice_p, [x], {"index": tuple(index)})


def slice_scatter(g, like, index):
    """Internal: ``g`` written at ``index`` into zeros shaped like Value ``like``."""
    inputs = [g, like] if None in like.shape else [g]
    return bind(slice_scatter_p, inputs, {"index": tuple(index), "shape": like.shape})


def _index_items(index):
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not (
                item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice))):
            raise TypeError(f"only basic indexing (ints, slices, None, ...) and one integer "
                            f"array are supported, got {type(item).__name__} {item!r}")
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    return items


def _slice_bound(value, what):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"slice {what} must be an int or None, got {value!r}")
    return int(value)


def getitem(x, index):
    """``x[index]`` with basic indexing: ints (negative too), slices with any non-zero step,
    ``None`` (new axis) and one ``Ellipsis``. Out-of-range ints on known dims raise
    :class:`~symgrad.errors.IndexOutOfRangeError` (an ``IndexError``) here. One integer array
    (a Value, NumPy array or list) among the items gathers with ``take``
    (:func:`symgrad.ops.indexing.array_getitem`)."""
    x = as_value(x)
    from .indexing import array_getitem, is_array_index

    if any(is_array_index(item) for item in (index if isinstance(index, tuple) else (index,))):
        return array_getitem(x, index)
    items = _index_items(index)
    consumed = sum(item is not None and item is not Ellipsis for item in items)
    if consumed > x.ndim:
        raise IndexError(f"getitem: too many indices ({consumed}) for {x.type_str}")
    spec, axis = [], 0
    for item in items:
        if item is None:
            spec.append(None)
        elif item is Ellipsis:
            spec.extend([(None, None, None)] * (x.ndim - consumed))
            axis += x.ndim - consumed
        elif isinstance(item, slice):
            step = _slice_bound(item.step, "step")
            if step == 0:
                raise ValueError("getitem: slice step cannot be zero")
            spec.append((_slice_bound(item.start, "start"), _slice_bound(item.stop, "stop"),
                         step))
            axis += 1
        else:
            n, i = x.shape[axis], int(item)
            if n is not None:
                if not -n <= i < n:
                    raise_with_context(IndexOutOfRangeError(
                        f"index {i} is out of bounds for axis {axis} with size {n}"),
                        "getitem", [(x.shape, x.dtype)])
                i %= n
            spec.append(i)
            axis += 1
    return strided_slice(x, spec)
