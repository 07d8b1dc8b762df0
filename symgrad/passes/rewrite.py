"""Rebuilding programs: the one tool every pass uses to stay a pure ``Program -> Program``.

A :class:`Rebuilder` replays the ops of a source program into a fresh program, op by op, with
a map from old Values to new ones. A pass walks the old ops in order and, for each, either
copies it (:meth:`Rebuilder.copy`), replaces its results by existing new Values
(:meth:`Rebuilder.alias`) or appends different ops (:meth:`Rebuilder.emit`). The old program
is never touched. Copies keep Value ids, names and flags, so the printed IR of an optimized
program still reads like the user's. Nested blocks (owned by fusion or control-flow ops) are
copied with their owner; their depth, not the program size, bounds that recursion.
"""
from __future__ import annotations

from ..ir.operation import Operation
from ..ir.program import Block, Program
from ..ir.value import Value


class Rebuilder:
    """Build ``self.program`` from ``source`` (see the module docstring)."""

    def __init__(self, source: Program):
        self.source = source
        self.program = Program()
        self.program._next_id = source._next_id
        self.value_map: dict[Value, Value] = {}
        self.op_map: dict[Operation, Operation] = {}

    # --- lookups -----------------------------------------------------------------------------
    def get(self, value: Value) -> Value:
        """The new Value standing for old ``value``."""
        return self.value_map[value]

    def inputs_of(self, op: Operation) -> list[Value]:
        return [self.value_map[v] for v in op.inputs]

    # --- building ----------------------------------------------------------------------------
    def copy(self, op: Operation, inputs=None, attrs=None, block: Block | None = None):
        """Append a copy of old ``op`` (with new ``inputs``/``attrs`` if given); its results
        keep their ids and names. Returns the new op."""
        block = block if block is not None else self.program.global_block()
        new_op = Operation(op.opdef, self.inputs_of(op) if inputs is None else inputs,
                           op.attrs if attrs is None else attrs, block, loc=op.loc,
                           forward_op=self.op_map.get(op.forward_op, op.forward_op))
        for old in op.results:
            value = Value(self.program, old.id, old.shape, old.dtype, op=new_op, index=old.index,
                          name=old.name, stop_gradient=old.stop_gradient)
            new_op.results.append(value)
            self.value_map[old] = value
        for old_block in op.blocks:
            inner = Block(self.program, parent_op=new_op)
            for inner_op in old_block.ops:
                self.copy(inner_op, block=inner)
            new_op.blocks.append(inner)
        if op.blocks and hasattr(op.attrs.get("_body"), "remap"):
            new_op.attrs = dict(new_op.attrs,
                                _body=op.attrs["_body"].remap(self.value_map, new_op.blocks))
        self.op_map[op] = new_op
        block.ops.append(new_op)
        return new_op

    def alias(self, old: Value, new: Value) -> None:
        """Let ``new`` (already in the new program) stand for old ``old`` from now on."""
        self.value_map[old] = new

    def emit(self, opdef, inputs, attrs, like: Value | None = None, forward_op=None) -> Value:
        """Append a new one-result op; with ``like``, the result takes that old Value's id,
        name and flags and stands for it."""
        types = opdef.infer_types([(v.shape, v.dtype) for v in inputs], attrs)
        block = self.program.global_block()
        op = block.append_op(opdef, inputs, attrs, types, forward_op=forward_op)
        result = op.results[0]
        if like is not None:
            self.program._next_id -= 1  # give back the fresh id: the result reuses like's
            result.id, result.name, result.stop_gradient = like.id, like.name, like.stop_gradient
            if like.op is not None:
                op.loc = like.op.loc
                op.forward_op = self.op_map.get(like.op.forward_op, like.op.forward_op)
            self.value_map[like] = result
        return result

    def finish(self, fetches) -> tuple[Program, list[Value]]:
        """Close the rebuild: carry over inputs, parameters and ``.grad`` links that survived;
        return ``(program, new fetches)``."""
        vm = self.value_map
        new = self.program
        new.inputs = [vm[v] for v in self.source.inputs if v in vm and vm[v].op.opdef.feedable]
        new.parameters = [vm[v] for v in self.source.parameters
                          if v in vm and vm[v].op.opdef.feedable]
        for old, value in vm.items():
            if old.grad is not None and old.grad in vm:
                value.grad = vm[old.grad]
        return new, [vm[v] for v in fetches]


def clone(program: Program, fetches) -> tuple[Program, list[Value]]:
    """A copy of ``program`` (nested blocks included) and the fetches mapped into it."""
    builder = Rebuilder(program)
    for op in program.ops:
        builder.copy(op)
    return builder.finish(fetches)

