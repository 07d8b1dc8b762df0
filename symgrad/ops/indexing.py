"""Gathers with integer indices: ``take``, ``take_along_axis`` and integer-array indexing
(``x[idx]``), with NumPy semantics.

Indices are integer Values (or NumPy/Python integer arrays, which become constants; an empty
list is an empty integer index, as in NumPy). Negative indices count from the end: on an axis
of size ``n`` an index ``i`` is valid when ``-n <= i < n``. One outside that range is an
:class:`~symgrad.errors.IndexOutOfRangeError` naming the op, the index, the axis and its size
and the user's line that built the op: when the op is built for constant indices on an axis of
known size, else when the program runs. There :func:`_sg_check_indices` (one min and one max
per index array) runs before each gather and each scatter of a gradient: the references call
it (the interpreter puts the op's name and line in front of the message) and so does the
generated code of every backend, which passes them in.

Gradients scatter-add: each ``take`` op's VJP is a ``take_grad`` op writing the cotangent into
zeros shaped like the input with ``np.add.at``, so a repeated index accumulates. ``take_grad``
is linear in the cotangent and its VJP is ``take`` again (likewise ``take_along_axis`` /
``take_along_axis_grad``), so derivatives of any order exist.

``x[idx]`` takes exactly one integer-array index among basic items (slices, ints, ``None``,
``...``) and follows NumPy's placement of the gathered dims: where the indexed axis was, or
first when the advanced items (the array and any ints) are not next to each other.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, IndexOutOfRangeError, ShapeError
from ..ir.dims import broadcast_dims
from ..ir.value import Value, format_shape
from .batching import all_batched, axis_batch, batch_size, move_to_front
from .core import (INJECTIVE, OPAQUE, SOURCE, OpDef, bind, broadcast_shapes, normalize_axis,
                   raise_with_context, register)
from .shape import frontend_checks
from .source import as_value

__all__ = ["take", "take_along_axis"]


# --- the range check ---------------------------------------------------------------------------
def _sg_check_indices(indices, shape, axis, site=None):
    """``indices`` when each lies in ``[-n, n)``, ``n`` the length of ``axis`` of ``shape`` (of
    the flattened shape for ``axis`` None), else :class:`IndexOutOfRangeError` naming the
    extreme index out of range, after ``site`` (the op and the line that built it) when given.
    One min and one max per array (on the device where CuPy stands in for NumPy); nothing is
    checked while ``n`` is unknown (a dim None, when the op is built)."""
    size = 1
    for n in shape if axis is None else (shape[axis],):
        if n is None:
            return indices
        size *= n
    if indices.size:
        low, high = indices.min(), indices.max()
        if low < -size or high >= size:
            bad = int(low) if low < -size else int(high)
            where = "the flattened input" if axis is None else f"axis {axis}"
            message = f"index {bad} is out of bounds for {where} with size {size}"
            raise IndexOutOfRangeError(message if site is None else f"{site}: {message}")
    return indices


def _check_indices(dtype):
    if np.dtype(dtype).kind not in "iu":
        raise DTypeError(f"indices need an integer dtype, got {dtype}")


def _axis_of(attrs, ndim):
    axis = attrs["axis"]
    if axis is not None and not 0 <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for rank {ndim}")
    return axis


def _like_inputs(x):
    """The extra input of a ``*_grad`` op: ``x`` itself when its shape is known only at run
    time (read for its shape only), else nothing (the shape is an attr)."""
    return [x] if None in x.shape else []


def _gather_rule(gathered_shape):
    """Shape rule of a gather of ``(x, indices)`` whose result has the shape
    ``gathered_shape(x shape, indices shape, axis)``, and ``x``'s dtype."""
    def rule(types, attrs):
        (xs, xd), (is_, idt) = types
        _check_indices(idt)
        return gathered_shape(xs, is_, _axis_of(attrs, len(xs))), xd
    return rule


def _scatter_rule(gathered_shape):
    """Shape rule of the gradient of a gather, ``(g, indices[, like])``: the gathered
    array's shape (the run-time shape of ``like``, else the attr), checked against ``g``."""
    def rule(types, attrs):
        (gs, gd), (is_, idt) = types[:2]
        _check_indices(idt)
        shape = tuple(types[2][0]) if len(types) > 2 else tuple(attrs["shape"])
        expected = gathered_shape(shape, is_, _axis_of(attrs, len(shape)))
        if len(gs) != len(expected) or any(a is not None and b is not None and a != b
                                           for a, b in zip(gs, expected)):
            raise ShapeError(f"cotangent {format_shape(gs)} does not match the gather "
                             f"{format_shape(expected)} of {format_shape(shape)}")
        return shape, gd
    return rule


# --- take ---------------------------------------------------------------------------------------
def _take_shape(x_shape, i_shape, axis):
    if axis is None:
        return tuple(i_shape)
    return tuple(x_shape[:axis]) + tuple(i_shape) + tuple(x_shape[axis + 1:])


def _sg_take(x, indices, axis, site=None):
    """``np.take`` after :func:`_sg_check_indices` (``site``: see there)."""
    return np.take(x, _sg_check_indices(indices, x.shape, axis, site), axis=axis)


def _sg_take_grad(g, indices, *like, shape, axis, site=None):
    """Zeros shaped like the gathered array with ``g`` added at ``indices`` along ``axis``
    (the flattened array for ``axis=None``); repeated indices accumulate. The indices are
    checked first (:func:`_sg_check_indices`)."""
    out = np.zeros(like[0].shape if like else shape, dtype=g.dtype)
    indices = _sg_check_indices(indices, out.shape, axis, site)
    if axis is None:
        np.add.at(out.reshape(-1), indices, g)
    else:
        np.add.at(out, (slice(None),) * axis + (indices,), g)
    return out


def _take_vjp(op, g):
    x, indices = op.inputs
    return [lambda: take_grad(g[0], indices, x, op.attrs["axis"]), None]


def _take_grad_vjp(op, g):
    return [take(g[0], op.inputs[1], op.attrs["axis"])] + [None] * (len(op.inputs) - 1)


def _take_dims(input_dims, attrs, shapes):
    return [_take_shape(input_dims[0], input_dims[1], attrs["axis"])]


def _scattered_dims(input_dims, attrs, shapes):
    """A scatter's result is shaped like its third input (when it has one)."""
    return [input_dims[2] if len(input_dims) > 2 else None]


def _along_dims(input_dims, attrs, shapes):
    x, indices = input_dims
    axis = attrs["axis"]
    if axis is None:
        return [tuple(indices)]
    others = [tuple(1 if d == axis else n for d, n in enumerate(dims)) for dims in (x, indices)]
    merged = broadcast_dims(*others, what="the indices against the input")
    return [merged[:axis] + (indices[axis],) + merged[axis + 1:]]


def _take_batch(op, inputs, axes):
    """A batched input: its axis moves up by one. Batched indices into a shared input: the
    batch lands where the indices go (at ``axis``) and moves to the front."""
    axis = op.attrs["axis"]
    if axis is None or (axes[0] is not None and axes[1] is not None):
        return NotImplemented
    if axes[0] is not None:
        return _TAKE_AXIS(op, inputs, axes)
    return [move_to_front(bind(take_p, inputs, op.attrs), axis)], [0]


_TAKE_AXIS = axis_batch("axis", shared_ok=True)


def _scatter_batch(indices_batch):
    """The rule of ``take_grad`` / ``take_along_axis_grad`` with a batched cotangent: the
    batch leads the scattered shape (a static batch size, or the run-time shape of the
    batched third input) and the axis moves up by one. ``indices_batch``: batched indices
    scatter each example into its own row (take_along_axis's indices have the gathered
    array's rank); otherwise the indices must be shared."""
    def rule(op, inputs, axes):
        axis = op.attrs["axis"]
        like = inputs[2:]
        if axis is None or axes[0] is None or (like and axes[2] is None) or \
                (axes[1] is not None and not indices_batch):
            return NotImplemented
        pair = all_batched(inputs[:2], axes[:2]) if indices_batch else inputs[:2]
        size = batch_size(inputs, axes)
        if pair is None or (size is None and not like):
            return NotImplemented
        attrs = {**op.attrs, "axis": axis + 1, "shape": (size,) + tuple(op.attrs["shape"])}
        return [bind(op.opdef, [*pair, *like], attrs)], [0]
    return rule


def _along_batch(op, inputs, axes):
    if op.attrs["axis"] is None:
        return NotImplemented
    return _ALONG_AXIS(op, inputs, axes)


_ALONG_AXIS = axis_batch("axis")


take_p = register(OpDef(
    "take", INJECTIVE, _gather_rule(_take_shape),
    impl=_sg_take, vjp=_take_vjp,
    dims=_take_dims,
    batch=_take_batch,
    doc="np.take: elements of x at integer indices along axis (of the flattened x for None)."))

take_grad_p = register(OpDef(
    "take_grad", OPAQUE, _scatter_rule(_take_shape), impl=_sg_take_grad, vjp=_take_grad_vjp,
    dims=_scattered_dims,
    batch=_scatter_batch(indices_batch=False),
    doc="Gradient of take: the cotangent scatter-added into zeros of the input's shape (the "
        "run-time shape of the optional third input)."))


def take_grad(g, indices, like, axis):
    """Internal: ``g`` scatter-added at ``indices`` into zeros shaped like Value ``like``."""
    return bind(take_grad_p, [g, indices] + _like_inputs(like),
                {"shape": like.shape, "axis": axis})


# --- take_along_axis -----------------------------------------------------------------------------
def _along_shape(x_shape, i_shape, axis):
    if axis is None:
        if len(i_shape) != 1:
            raise ShapeError(f"with axis=None the indices must be 1-D, got {format_shape(i_shape)}")
        return tuple(i_shape)
    if len(x_shape) != len(i_shape):
        raise ShapeError(f"indices {format_shape(i_shape)} must have the rank of "
                         f"{format_shape(x_shape)}")
    others = [tuple(1 if d == axis else n for d, n in enumerate(s)) for s in (x_shape, i_shape)]
    try:
        merged = broadcast_shapes(*others)
    except ShapeError:
        raise ShapeError(f"indices {format_shape(i_shape)} do not broadcast against "
                         f"{format_shape(x_shape)} outside axis {axis}") from None
    return merged[:axis] + (i_shape[axis],) + merged[axis + 1:]


def _sg_take_along_axis(x, indices, axis, site=None):
    """``np.take_along_axis`` after :func:`_sg_check_indices` (``site``: see there)."""
    return np.take_along_axis(x, _sg_check_indices(indices, x.shape, axis, site), axis=axis)


def _sg_take_along_axis_grad(g, indices, *like, shape, axis, site=None):
    """Zeros shaped like the gathered array with ``g`` added where take_along_axis read it
    (summed over the dims the gather broadcast); repeated indices accumulate. The indices are
    checked first (:func:`_sg_check_indices`)."""
    shape = like[0].shape if like else tuple(shape)
    out = np.zeros(shape, dtype=g.dtype)
    indices = _sg_check_indices(indices, shape, axis, site)
    if axis is None:
        np.add.at(out.reshape(-1), indices, g)
        return out
    index = []
    for d in range(g.ndim):
        if d == axis:
            index.append(np.broadcast_to(indices, g.shape))
        else:
            index.append(np.arange(g.shape[d] if shape[d] != 1 else 1)
                         .reshape([-1 if k == d else 1 for k in range(g.ndim)]))
    np.add.at(out, tuple(index), g)
    return out


def _along_vjp(op, g):
    x, indices = op.inputs
    return [lambda: bind(take_along_axis_grad_p, [g[0], indices] + _like_inputs(x),
                         {"shape": x.shape, "axis": op.attrs["axis"]}), None]


def _along_grad_vjp(op, g):
    gathered = bind(take_along_axis_p, [g[0], op.inputs[1]], {"axis": op.attrs["axis"]})
    return [gathered] + [None] * (len(op.inputs) - 1)


take_along_axis_p = register(OpDef(
    "take_along_axis", INJECTIVE, _gather_rule(_along_shape),
    impl=_sg_take_along_axis, vjp=_along_vjp,
    dims=_along_dims,
    batch=_along_batch,
    doc="np.take_along_axis: x[..., indices[...], ...] along axis, other dims broadcast."))

take_along_axis_grad_p = register(OpDef(
    "take_along_axis_grad", OPAQUE, _scatter_rule(_along_shape), impl=_sg_take_along_axis_grad,
    vjp=_along_grad_vjp,
    dims=_scattered_dims,
    batch=_scatter_batch(indices_batch=True),
    doc="Gradient of take_along_axis: the cotangent scatter-added into zeros of the input's "
        "shape (the run-time shape of the optional third input)."))


# --- front end ---------------------------------------------------------------------------------
def _indices_value(name, indices, program):
    """``indices`` as an integer Value (NumPy/Python integer arrays become int64 constants; an
    empty list, which NumPy makes float64, is an empty integer index as NumPy takes it)."""
    if not isinstance(indices, Value):
        array = np.asarray(indices)
        if array.size == 0 and isinstance(indices, (list, tuple)):
            array = array.astype(np.int64)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{name}: indices must be integers, got {array.dtype} {indices!r}")
        indices = as_value(array.astype(np.int64), program=program)
    return indices


def _constant_bounds(value):
    """``(min, max)`` of an integer Value whose elements are known when the program is built
    (a constant, or a filled tensor), else None (also when it is empty)."""
    op = value.op
    if op is None or op.opdef.category != SOURCE or op.opdef.feedable or \
            value.dtype.kind not in "iu" or value.size == 0:
        return None
    if "value" in op.attrs:
        array = op.attrs["value"]
        return int(array.min()), int(array.max())
    fill = op.opdef.algebra.fill(op) if op.opdef.algebra.fill is not None else None
    return None if fill is None else (int(fill), int(fill))


def check_constant_indices(name, inputs, indices, shape, axis) -> None:
    """Refuse, as front end ``name`` builds its op from ``inputs``, constant ``indices`` out of
    range for ``axis`` of ``shape`` (None: the flattened shape; a length known only at run time
    is checked then): an :class:`IndexOutOfRangeError` naming the op, the index, the axis and
    its size, and the user's line."""
    bounds = _constant_bounds(indices)
    if bounds is None:
        return
    try:
        _sg_check_indices(np.array(bounds), shape, axis)
    except IndexOutOfRangeError as exc:
        raise_with_context(exc, name, [(v.shape, v.dtype) for v in inputs])


def _frontend_axis(name, x, axis):
    if axis is None:
        return None
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an int or None, got {axis!r}")
    with frontend_checks(name, [x]):
        if x.ndim == 0:
            raise ShapeError("needs an input of rank >= 1 when axis is given")
        return normalize_axis(int(axis), x.ndim)[0]


def gather(opdef, name, x, indices, axis):
    """The ``take``/``take_along_axis`` op (``opdef``) of ``x`` at ``indices`` along ``axis``,
    as front end ``name`` builds it: constant indices out of range are refused here."""
    x = as_value(x)
    indices = _indices_value(name, indices, x.program)
    axis = _frontend_axis(name, x, axis)
    result = bind(opdef, [x, indices], {"axis": axis})
    check_constant_indices(name, [x, indices], indices, x.shape, axis)
    return result


def take(x, indices, axis=None):
    """``np.take``: the elements of ``x`` at integer ``indices`` along ``axis`` (``None``:
    of the flattened ``x``). The result has ``x``'s dims before ``axis``, then the dims of
    ``indices``, then ``x``'s dims after ``axis``. Negative indices count from the end; an
    index out of range is an :class:`~symgrad.errors.IndexOutOfRangeError` (see the module
    docstring)."""
    return gather(take_p, "take", x, indices, axis)


def take_along_axis(x, indices, axis):
    """``np.take_along_axis``: ``indices`` has ``x``'s rank; ``result[..., i, ...] =
    x[..., indices[..., i, ...], ...]`` along ``axis`` (``None``: ``x`` flattened, 1-D
    indices), the other dims broadcast against each other. Indices as for :func:`take`."""
    return gather(take_along_axis_p, "take_along_axis", x, indices, axis)


def is_array_index(item) -> bool:
    """Is ``item`` of an index an integer array (a Value, NumPy array or list)?"""
    return isinstance(item, (Value, np.ndarray, list))


def array_getitem(x, index):
    """``x[index]`` where ``index`` holds one integer array (see the module docstring):
    the basic items first (a slice in place of the array), then a ``take`` along the axis the
    array indexes."""
    from .shape import getitem

    items = index if isinstance(index, tuple) else (index,)
    arrays = [i for i, item in enumerate(items) if is_array_index(item)]
    if len(arrays) != 1:
        raise TypeError(f"getitem: at most one integer-array index is supported, got "
                        f"{len(arrays)} (index them one after the other)")
    at = arrays[0]
    indices = items[at]
    if isinstance(indices, Value) and indices.dtype.kind == "b" or \
            not isinstance(indices, Value) and np.asarray(indices).dtype.kind == "b":
        raise TypeError("getitem: boolean mask indexing is not supported (the result's size "
                        "would depend on the data); use sg.where")
    indices = _indices_value("getitem", indices, x.program)
    basic = items[:at] + (slice(None),) + items[at + 1:]
    consumed = sum(item is not None and item is not Ellipsis for item in basic)
    axis = source = 0   # the indexed axis in the basic-indexed result, and in x
    for item in items[:at]:
        if item is Ellipsis:
            axis += x.ndim - consumed
            source += x.ndim - consumed
        else:
            axis += not isinstance(item, (int, np.integer))
            source += item is not None
    if source < x.ndim:
        check_constant_indices("getitem", [x, indices], indices, x.shape, source)
    advanced = [i for i, item in enumerate(items) if i == at or (
        isinstance(item, (int, np.integer)) and not isinstance(item, bool))]
    trivial = all(item is Ellipsis or item == slice(None) for item in basic)
    result = take(x if trivial else getitem(x, basic), indices, axis)
    if advanced != list(range(advanced[0], advanced[-1] + 1)) and axis:
        # NumPy: advanced items that are not next to each other put the gathered dims first
        from .shape import transpose

        gathered = list(range(axis, axis + indices.ndim))
        rest = [d for d in range(result.ndim) if d not in gathered]
        result = transpose(result, gathered + rest)
    return result
