"""Run-time checks of what a program assumed about its unknown dims.

A program built with unknown dims (``None``) rests on assumptions its shape rules make about
them: the unknown dims an elementwise op combines are equal, and an unknown dim that meets a
known ``n`` is ``n``, never a broadcast 1 (the gradients were built that way: an input with an
unknown dim gets its cotangent without a sum over that dim). NumPy would silently broadcast a
fed 1, giving a gradient of the wrong shape, and disagreeing batch dims would fail deep inside
generated code.

Before a compiled program runs on a new set of input shapes, :class:`DimCheck` re-runs the
shape rules of the ops that touch unknown dims on the run-time shapes, each formerly unknown
dim a :class:`~symgrad.ops.core.RuntimeDim`, and raises :class:`~symgrad.errors.FeedError`
naming the op and the line that built it when an assumption fails. Each distinct set of input
shapes is checked once; later calls with the same shapes cost one dict lookup. Programs whose
inputs have no unknown dim get no check at all.

Ops inside control-flow regions are not followed (their results count as unknown, and so do
the ops that read them); fused groups of an optimized program are followed into.
"""
from __future__ import annotations

from ..errors import DTypeError, FeedError, ShapeError
from ..ir.graph import ancestors_of
from ..ir.value import format_shape
from ..ops.core import RuntimeDim
from ..ops.fused import is_fusion

MAX_CHECKED_SHAPES = 256   # distinct input-shape sets remembered as checked


def _has_unknown(value) -> bool:
    return None in value.shape


class DimCheck:
    """``check(feeds)`` raises FeedError when the fed shapes break an assumption of the
    program about its unknown dims (see the module docstring)."""

    def __init__(self, inputs, ops):
        self.inputs = inputs          # data Values with an unknown dim, in signature order
        self.ops = ops                # the ops to re-check, in program order
        self.checked: set = set()

    @classmethod
    def for_fetches(cls, program, needed) -> "DimCheck | None":
        """The check for computing the fetches whose ancestor ops are ``needed``: those ops
        and the forward ops of the backward ops among them, with their ancestors (a gradient
        may no longer read the input whose shape its forward op assumed)."""
        if not any(map(_has_unknown, program.inputs)):
            return None
        forward = {op.forward_op for op in needed if op.forward_op is not None}
        return cls.for_program(
            program, needed | ancestors_of([v for op in forward for v in op.results]))

    @classmethod
    def for_program(cls, program, ops=None) -> "DimCheck | None":
        """The check for ``program`` restricted to ``ops`` (default: all its top-level ops),
        or None when no data input has an unknown dim."""
        inputs = [v for v in program.inputs if _has_unknown(v)]
        if not inputs:
            return None
        ops = program.ops if ops is None else [op for op in program.ops if op in ops]
        touching = [op for op in ops if not op.opdef.feedable and (
            op.blocks or any(map(_has_unknown, op.inputs))
            or any(map(_has_unknown, op.results)))]
        return cls(inputs, touching)

    def __call__(self, feeds) -> None:
        key = tuple(getattr(feeds.get(v.name), "shape", None) for v in self.inputs)
        if key in self.checked:
            return
        shapes = {value: tuple(map(int, shape)) for value, shape in zip(self.inputs, key)
                  if shape is not None}
        _propagate(self.ops, shapes)
        if len(self.checked) >= MAX_CHECKED_SHAPES:
            self.checked.clear()
        self.checked.add(key)


def _shape_of(shapes, value):
    """The run-time shape of ``value`` (ints), or None when it cannot be known here."""
    shape = shapes.get(value)
    if shape is None and not _has_unknown(value):
        return value.shape
    return shape


def _propagate(ops, shapes) -> None:
    for op in ops:
        if op.blocks:
            if is_fusion(op):
                _propagate(op.blocks[0].ops, shapes)
                for outer, inner in zip(op.results, op.blocks[0].yields):
                    if inner in shapes:
                        shapes[outer] = shapes[inner]
            continue
        input_shapes = [_shape_of(shapes, v) for v in op.inputs]
        if None in input_shapes:
            continue
        try:
            result = _infer(op, input_shapes)
        except (ShapeError, DTypeError) as exc:
            raise FeedError(_message(op, input_shapes, exc)) from None
        except Exception:   # a rule that cannot take run-time shapes: nothing to check
            continue
        for value, (shape, _) in zip(op.results, result):
            shapes[value] = _run_time_shape(op, value, tuple(shape), input_shapes)


def _infer(op, input_shapes) -> list:
    """The op's result types on run-time input shapes. Where a formerly unknown dim is 1, the
    rule sees it as a :class:`RuntimeDim` (so that broadcasting it is refused); otherwise the
    plain shapes go through the rule's memo (long programs repeat the same types)."""
    types = [(shape, v.dtype) for shape, v in zip(input_shapes, op.inputs)]
    if any(n == 1 and d is None for shape, v in zip(input_shapes, op.inputs)
           for d, n in zip(v.shape, shape)):
        marked = [(tuple(RuntimeDim(n) if d is None else n for d, n in zip(v.shape, shape)),
                   v.dtype) for shape, v in zip(input_shapes, op.inputs)]
        result = op.opdef.infer(marked, op.attrs)
        return result if isinstance(result, list) else [result]
    return op.opdef.infer_types(types, op.attrs)


def _run_time_shape(op, value, shape, input_shapes):
    """``shape`` (from the rule on run-time shapes) as ints, or None when the rule could not
    tell; a known dim the rule now computes differently is a FeedError."""
    if len(shape) != len(value.shape) or None in shape:
        return None
    for axis, (static, now) in enumerate(zip(value.shape, shape)):
        if static is not None and static != now:
            raise FeedError(_message(op, input_shapes, ShapeError(
                f"its result's dim {axis} would be {now} at run time, but the program was "
                f"built for {static}")))
    return tuple(map(int, shape))


def _message(op, input_shapes, exc) -> str:
    where = f" (built at {op.loc})" if op.loc else ""
    shown = ", ".join(format_shape(s) for s in input_shapes)
    return (f"the fed shapes do not fit the program: op {op.name}{where} gets inputs of "
            f"shapes {shown} at run time: {exc}")
