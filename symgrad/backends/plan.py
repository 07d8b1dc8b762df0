"""The backend-neutral plan of one loop group, built once and rendered by each backend.

A *loop group* is a fusion op (:mod:`symgrad.ops.fused`), or a lone elementwise op or fusible
reduction that runs as a loop of its own. Its plan says what every backend's loop needs: the
*iteration space* S (the shape of its map ops, or of its reduction's input; ``None`` for a dim
known at run time) and its symbolic dims (each backend renders a run-time dim from the
binding, :mod:`.dim_code`), the map phase (elementwise ops
over S), the reduction (its axes of S, whether it keeps them, the accumulator's dtype and
identity, from the op's :class:`~symgrad.ops.core.Reduction`), the epilogue (elementwise ops
over the reduced shape R) and the group's outputs, each a map value (over S) or a reduced value
(over R). Backends decide how to loop over it: NumPy in chunks of rows, C in nested loops, CUDA
in kernels.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ops.core import ELEMENTWISE, REDUCTION, normalize_axis
from ..ops.fused import is_fusion
from ..passes.cse import attrs_key
from ..passes.fusion import split_body


@dataclasses.dataclass
class GroupPlan:
    """See the module docstring. ``captures``: the group's external inputs, in order, each
    once; ``outputs``: the values it hands out (a fusion op's yields, or a lone op's results),
    in the order of ``op.results``; ``map_outputs``: per output, is it a map value?
    ``dims``: the dims of S (ints, symbols and expressions; ``shape`` has None where ``dims``
    is symbolic)."""

    op: object
    map_ops: list
    reduction: object
    epilogue: list
    captures: list
    outputs: list
    map_outputs: list
    shape: tuple
    axes: tuple
    keepdims: bool
    reduced: tuple
    accumulator: np.dtype | None
    identity: object
    dims: tuple

    @property
    def loop_ops(self) -> list:
        """The ops that run in the loop over S: the map ops, then the reduction."""
        return self.map_ops + ([self.reduction] if self.reduction is not None else [])

    @property
    def mean(self) -> bool:
        return self.reduction is not None and self.reduction.opdef.reduction.mean

    @property
    def splits(self) -> bool:
        """May the reduction accumulate parts of its input apart (see ``Reduction.splits``)?"""
        return self.reduction.opdef.reduction.splits

    @property
    def combine(self):
        """The OpDef combining two partial results of the reduction."""
        return self.reduction.opdef.reduction.combine

    def reduced_dims(self, dims) -> list:
        """The dims of R given ``dims``, those of S (texts): a reduced axis kept is ``"1"``."""
        return [("1" if a in self.axes else d) for a, d in enumerate(dims)
                if self.keepdims or a not in self.axes]


def loop_parts(op):
    """``(map_ops, reduction, epilogue)`` of ``op`` when it is a loop group, else None."""
    if is_fusion(op):
        return split_body(op)
    if op.blocks or len(op.results) != 1 or not op.inputs:
        return None
    category = op.opdef.category
    if category == ELEMENTWISE:
        return [op], None, []
    if category == REDUCTION and op.opdef.reduction is not None and len(op.inputs) == 1:
        return [], op, []
    return None


def group_values(op) -> tuple[list, list]:
    """``(captures, outputs)`` of loop group ``op`` (see :class:`GroupPlan`)."""
    if is_fusion(op):
        return list(op.inputs), list(op.blocks[0].yields)
    return list(dict.fromkeys(op.inputs)), list(op.results)


def structure(op, scalars, capture_fact=None) -> tuple:
    """Everything the code of loop group ``op`` depends on, with its Values numbered: per
    capture its shape and dtype (and ``capture_fact(value)``, what else a backend's code
    depends on, such as whether it may be a view), or the dtype and bytes of a scalar constant
    ``scalars`` inlines; per op its OpDef, attributes (not the private ``_`` ones), operands
    and result types; the outputs. Groups of equal structure render to the same code up to the
    names of their values and comments, so backends render one function (or kernel) for all."""
    captures, outputs = group_values(op)
    number, inputs = {}, []
    for value in captures:
        number[value] = len(number)
        array = scalars.get(value)
        inputs.append(("v", value.shape, value.dtype, capture_fact and capture_fact(value))
                      if array is None else ("s", array.dtype, array.tobytes()))
    ops = []
    for inner in (op.blocks[0].ops if is_fusion(op) else [op]):
        attrs = {k: v for k, v in inner.attrs.items() if not k.startswith("_")}
        ops.append((inner.opdef, attrs_key(attrs), tuple([number[v] for v in inner.inputs]),
                    tuple([(v.shape, v.dtype) for v in inner.results])))
        for value in inner.results:
            number[value] = len(number)
    return tuple(inputs), tuple(ops), tuple([number[v] for v in outputs])


def plan_group(op, accumulate_float64=True) -> GroupPlan | None:
    """The plan of loop group ``op`` (None when ``op`` is not one)."""
    parts = loop_parts(op)
    return None if parts is None else plan_parts(op, parts, accumulate_float64)


def plan_parts(op, parts, accumulate_float64=True) -> GroupPlan:
    """The plan of ``op`` run as one loop of ``parts``, ``(map_ops, reduction, epilogue)``
    (:func:`loop_parts`, or a backend's wider choice)."""
    map_ops, reduction, epilogue = parts
    captures, outputs = group_values(op)
    accumulator = identity = None
    if reduction is not None:
        source, result = reduction.inputs[0], reduction.results[0]
        shape, dims = tuple(source.shape), source.dims
        axes = normalize_axis(reduction.attrs.get("axis"), len(shape))
        keepdims = result.ndim == len(shape)
        reduced = tuple(result.shape)
        facts = reduction.opdef.reduction
        accumulator = facts.accumulator(source.dtype, result.dtype, accumulate_float64)
        identity = facts.identity_value(accumulator)
    else:
        shape, dims = tuple(map_ops[0].results[0].shape), map_ops[0].results[0].dims
        axes, keepdims, reduced = (), True, shape
    map_set = set(map_ops)
    return GroupPlan(op, list(map_ops), reduction, list(epilogue), captures, outputs,
                     [v.op in map_set for v in outputs], shape, tuple(axes), keepdims,
                     reduced, accumulator, identity, tuple(dims))
