"""``vmap``: batching as a program transformation (JAX's ``vmap``, at build time).

``vmap(fn)(*args)`` traces ``fn`` once on per-example Values (the arguments without their batch
axis), into a scratch block that is never attached to the program, then rewrites each traced op
into the insertion block by its batching rule (:func:`symgrad.ops.core.batch_rule`; the
contract is in :mod:`symgrad.ops.batching`). An op none of whose inputs is batched is built
again as it is; an op without a rule, or whose rule does not cover the case, is batched by a
loop: a ``scan`` over the batch axis whose body is that one op. The region ops' rules
(:mod:`symgrad.autodiff.vmap_regions`) batch their blocks with :func:`batch_ops` again, so a
loop stays one loop. A vmapped function of n ops adds about n ops whatever the batch size,
and ``grad`` differentiates the result like any other ops.

Inside the transformation every batched Value carries its batch axis in front; ``in_axes``
are moved there on entry and ``out_axes`` from there on exit. The walk over the traced ops is a
loop (no recursion over the graph); only nested regions recurse, bounded by their depth.
"""
from __future__ import annotations

import functools

from ..ir.program import Block, current_block, insertion_point, program_guard
from ..ir.value import Value, format_shape
from ..ops.batching import move_to_front
from ..ops.control_flow import scan
from ..ops.core import batch_rule, bind, bind_region, program_of
from ..ops.source import as_value
from ..ops.trees import LEAF, flatten, unflatten

__all__ = ["vmap"]


def vmap(fn, in_axes=0, out_axes=0, axis_size=None):
    """``fn`` mapped over a batch axis of its arguments: called with Values, builds the
    batched program and returns its results.

    ``in_axes``: for each positional argument, the axis its batch is along, ``None`` for an
    argument every example shares; an int or None applies to every argument, a tuple/list
    has one entry per argument, and an entry may itself be a tuple/list matching a
    tuple/list argument (JAX's prefix rule). ``out_axes``: where the batch axis goes in each
    result, the same way (``None``: the result must be the same for every example).
    ``axis_size``: the batch size, needed when no argument is batched. Batched arguments must
    agree on the batch size; a wrong axis or a disagreement is a ``ValueError`` naming the
    argument. ``fn`` may call ``ir_backward.grad`` (per-example gradients), control flow and
    ``vmap`` itself; the batched result is differentiable like any other Value."""
    if not callable(fn):
        raise TypeError(f"vmap: fn must be callable, got {type(fn).__name__}")
    _check_spec(in_axes, "in_axes")
    _check_spec(out_axes, "out_axes")
    if axis_size is not None and (isinstance(axis_size, bool) or not isinstance(axis_size, int)
                                  or axis_size < 1):
        raise TypeError(f"vmap: axis_size must be a positive int, got {axis_size!r}")

    @functools.wraps(fn)
    def batched(*args):
        spec = in_axes
        if isinstance(spec, (tuple, list)) and len(spec) != len(args):
            raise ValueError(f"vmap: in_axes {spec!r} has {len(spec)} entries for "
                             f"{len(args)} arguments")
        leaves, structure = flatten(list(args))
        axes = _leaf_axes(spec, list(args), "in_axes", "argument")
        values = [leaf for leaf in leaves if isinstance(leaf, Value)]
        program = program_of(values, "vmap")
        with program.transaction(), program_guard(program):
            return _call(fn, program, leaves, structure, axes, out_axes, axis_size)

    return batched


# --- the transformation -------------------------------------------------------------------------
def _call(fn, program, leaves, structure, axes, out_axes, axis_size):
    entries = []   # (leaf, the leaf as a Value with its batch in front, or None if shared)
    size = axis_size
    sized_by = "axis_size" if axis_size is not None else None
    for (leaf, path), axis in zip(_with_paths(leaves, structure, "argument"), axes):
        if axis is None:
            entries.append((leaf, None))
            continue
        value = as_value(leaf)
        if not -value.ndim <= axis < max(value.ndim, 1) or value.ndim == 0:
            raise ValueError(f"vmap: in_axes {axis} is out of range for {path} of shape "
                             f"{format_shape(value.shape)}")
        moved = move_to_front(value, axis)
        dim = moved.shape[0]
        if dim is not None:
            if size is not None and dim != size:
                raise ValueError(f"vmap: {path} has batch size {dim} along axis {axis}, but "
                                 f"{sized_by} says {size}")
            size, sized_by = dim, sized_by or path
        entries.append((leaf, moved))
    if all(moved is None for _, moved in entries) and axis_size is None:
        raise ValueError("vmap: no argument is batched (every in_axes is None): give "
                         "axis_size")

    scratch = Block(program, outer=current_block(program))
    env = {}
    traced = []
    for leaf, moved in entries:
        if moved is None:
            traced.append(leaf)
            continue
        example = scratch.add_arg(moved.dims[1:], moved.dtype)
        env[example] = (moved, 0)
        traced.append(example)
    with insertion_point(scratch):
        out = fn(*unflatten(structure, traced))
    batch_ops(scratch.ops, env, size)
    program.dim_constraints[:] = [(c, op) for c, op in program.dim_constraints
                                  if not scratch.encloses(op.block)]

    out_leaves, out_structure = flatten(out)
    out_spec = _leaf_axes(out_axes, out, "out_axes", "result")
    results = []
    for (leaf, path), axis in zip(_with_paths(out_leaves, out_structure, "result"), out_spec):
        if not isinstance(leaf, Value):
            raise TypeError(f"vmap: fn must return Values (in tuples/lists), got "
                            f"{type(leaf).__name__} at {path}")
        value, batch_axis = env.get(leaf, (leaf, None))
        results.append(_place(value, batch_axis, axis, size, path))
    return unflatten(out_structure, results)


def _place(value, batch_axis, axis, size, path):
    """``value`` (batch along ``batch_axis``, None when shared) with its batch along ``axis``
    (None: it must be shared)."""
    if axis is None:
        if batch_axis is not None:
            raise ValueError(f"vmap: out_axes is None for {path}, but it differs between "
                             f"examples")
        return value
    if batch_axis is None:
        if size is None:
            raise ValueError(f"vmap: {path} is the same for every example and the batch size "
                             f"is known only at run time: it cannot be broadcast along "
                             f"out_axes {axis}; give axis_size")
        value = bind("broadcast_to", [value], {"shape": (size,) + tuple(
            -1 if d is None else d for d in value.shape)})
    ndim = value.ndim
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap: out_axes {axis} is out of range for {path}, of rank "
                         f"{ndim - 1} per example")
    axis %= ndim
    if axis == 0:
        return value
    order = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, ndim))
    return bind("transpose", [value], {"axes": order})


def batch_ops(ops, env, size) -> None:
    """Rewrite ``ops`` (in order) into the insertion block, batched over ``size`` examples
    (None: known only at run time): ``env`` maps each traced Value to ``(Value, batch axis
    or None)`` and receives the results. Values not in ``env`` are shared by every example."""
    for op in ops:
        inputs, axes = [], []
        for value in op.inputs:
            new, axis = env.get(value, (value, None))
            inputs.append(new)
            axes.append(axis)
        rule = batch_rule(op.opdef)
        batched = any(axis is not None for axis in axes)
        out = NotImplemented
        if getattr(rule, "per_example", False):
            out = rule(op, inputs, axes, size)
        elif rule is not None and batched:
            out = rule(op, inputs, axes)
        if out is NotImplemented:
            out = loop_batch(op, inputs, axes) if batched else \
                (replay(op, inputs), [None] * len(op.results))
        for old, new, axis in zip(op.results, *out):
            if old.stop_gradient:
                new.stop_gradient = True
            env[old] = (new, axis)
        if op.twin_of is not None or op.passes_cotangents:
            _carry_autodiff_fields(op, env)


def _carry_autodiff_fields(op, env) -> None:
    """Give the batched op of ``op`` (when one op gives all of ``op``'s results, in order)
    ``op``'s ``twin_of`` and ``passes_cotangents`` (:mod:`symgrad.ir.operation`): a twin's
    Values batched along the axis of those it stands for, and the same kind of op for
    ``passes_cotangents``. Otherwise the batched ops differentiate as themselves (the
    derivatives then agree with the unbatched rule's to rounding)."""
    news = [env[old] for old in op.results]
    batched = news[0][0].op
    if batched is None or len(batched.results) != len(news) or any(
            value is not result for (value, _), result in zip(news, batched.results)):
        return
    if op.passes_cotangents and batched.opdef is op.opdef:
        batched.passes_cotangents = True
    if op.twin_of is not None:
        pairs = [None if v is None else env.get(v, (v, None)) for v in op.twin_of]
        if all(pair is None or pair[1] == axis for pair, (_, axis) in zip(pairs, news)):
            batched.twin_of = tuple([None if pair is None else pair[0] for pair in pairs])


def loop_batch(op, inputs, axes):
    """The fallback for any op: a ``scan`` over the batch axis (axis 0 of every batched
    input) whose body builds ``op`` once per example. Returns ``(results, [0, ...])``."""
    positions = [i for i, axis in enumerate(axes) if axis is not None]

    def body(carry, slices):
        args = list(inputs)
        for position, piece in zip(positions, slices):
            args[position] = piece
        return carry, replay(op, args)

    _, ys = scan(body, (), xs=[inputs[i] for i in positions])
    return ys, [0] * len(ys)


def replay(op, inputs) -> list:
    """``op`` built again in the insertion block, reading ``inputs``; a region op gets copies
    of its blocks (reading the new inputs where it read the old). Returns its results."""
    if not op.blocks:
        out = bind(op.opdef, inputs, op.attrs)
        return list(out) if isinstance(out, tuple) else [out]
    program = inputs[0].program if inputs else op.block.program
    mapping = dict(zip(op.inputs, inputs))
    blocks = [_copy_block(block, mapping, program) for block in op.blocks]
    explicit = op.opdef.explicit_inputs(op.attrs)
    return list(bind_region(op.opdef, inputs[:explicit], op.attrs, blocks, program).results)


def _copy_block(block, mapping, program):
    copy = Block(program, outer=current_block(program))
    for arg in block.args:
        mapping[arg] = copy.add_arg(arg.dims, arg.dtype)
    with insertion_point(copy):
        for inner in block.ops:
            results = replay(inner, [mapping.get(v, v) for v in inner.inputs])
            mapping.update(zip(inner.results, results))
    copy.yields = [mapping.get(v, v) for v in block.yields]
    return copy


# --- arguments and axes -------------------------------------------------------------------------
def _check_spec(spec, what):
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return
    if isinstance(spec, (tuple, list)):
        for entry in spec:
            _check_spec(entry, what)
        return
    raise TypeError(f"vmap: {what} must be an int, None or a tuple/list of them, "
                    f"got {spec!r}")


def _with_paths(leaves, structure, noun):
    """``(leaf, path)`` pairs, ``path`` naming the leaf for messages (``argument 1[0]``)."""
    paths = []

    def walk(node, path, top):
        if node == LEAF:
            paths.append(path)
            return
        _, children = node
        for index, child in enumerate(children):
            walk(child, f"{noun} {index}" if top else f"{path}[{index}]", False)

    walk(structure, noun, True)
    return list(zip(leaves, paths))


def _leaf_axes(spec, tree, what, noun) -> list:
    """One axis per leaf of ``tree``, ``spec`` read as a prefix of it (JAX's rule). The
    top-level entries of a tuple/list ``tree`` are named ``noun i``."""
    out = []
    pending = [(spec, tree, noun if not isinstance(tree, (tuple, list)) else "", True)]
    while pending:
        spec, node, path, top = pending.pop()
        if spec is None or isinstance(spec, int):
            out.extend([spec] * len(flatten(node)[0]))
            continue
        if not isinstance(node, (tuple, list)) or len(node) != len(spec):
            raise ValueError(f"vmap: {what} entry {spec!r} does not match the structure of "
                             f"{path or noun}")
        for index in reversed(range(len(spec))):
            name = f"{noun} {index}" if top else f"{path}[{index}]"
            pending.append((spec[index], node[index], name, False))
    return out
