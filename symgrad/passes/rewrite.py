"""Rebuilding programs: the one tool every pass uses to stay a pure ``Program -> Program``.

A :class:`Rebuilder` replays the ops of a source program into a fresh program, op by op, with
a map from old Values to new ones. A pass walks the old ops in order and, for each, either
copies it (:meth:`Rebuilder.copy`), replaces its results by existing new Values
(:meth:`Rebuilder.alias`) or appends different ops (:meth:`Rebuilder.emit`). The old program
is never touched. Copies keep Value ids, names, flags and types (no shape rule runs again), so
the printed IR of an optimized program still reads like the user's. Nested blocks (owned by
fusion or control-flow ops) are copied with their owner; their depth, not the program size,
bounds that recursion.

:func:`live_ops` is the liveness query the passes share: one backward sweep over a block.
"""
from __future__ import annotations

from ..ir.operation import Operation
from ..ir.program import Block, Program
from ..ir.value import Value


# Copies fill every slot of a fresh Operation / Value directly: their constructors would only
# re-check types that the copied objects already have (tests/passes check that no slot is left
# unset)
_new_op = Operation.__new__
_new_value = Value.__new__


def live_ops(ops, fetches) -> list:
    """The ops of ``ops`` (a block's list, in program order) that ``fetches`` depend on, in
    program order. One backward sweep: an op is live when one of its results is needed."""
    needed = set(fetches)
    live = []
    for op in reversed(ops):
        for value in op.results:
            if value in needed:
                live.append(op)
                needed.update(op.inputs)
                break
    live.reverse()
    return live


class Rebuilder:
    """Build ``self.program`` from ``source`` (see the module docstring)."""

    def __init__(self, source: Program):
        self.source = source
        self.program = Program()
        self.program._next_id = source._next_id
        self.block = self.program.global_block()
        self.value_map: dict[Value, Value] = {}
        self.op_map: dict[Operation, Operation] = {}

    # --- lookups -----------------------------------------------------------------------------
    def get(self, value: Value) -> Value:
        """The new Value standing for old ``value``."""
        return self.value_map[value]

    def inputs_of(self, op: Operation) -> list[Value]:
        value_map = self.value_map
        return [value_map[v] for v in op.inputs]

    # --- building ----------------------------------------------------------------------------
    def copy(self, op: Operation, inputs=None, attrs=None, block: Block | None = None):
        """Append a copy of old ``op`` (with new ``inputs``/``attrs`` if given, which must give
        the same result types); its results keep their ids, names and types. Returns the new
        op."""
        value_map = self.value_map
        if block is None:
            block = self.block
        forward_op = op.forward_op
        if forward_op is not None:
            forward_op = self.op_map.get(forward_op, forward_op)
        new_op = _new_op(Operation)
        new_op.opdef = op.opdef
        new_op.inputs = [value_map[v] for v in op.inputs] if inputs is None else list(inputs)
        new_op.attrs = dict(op.attrs if attrs is None else attrs)
        new_op.block = block
        new_op.loc = op.loc
        new_op.forward_op = forward_op
        new_op.blocks = []
        new_op.results = results = []
        program = self.program
        for old in op.results:
            value = _new_value(Value)
            value.program = program
            value.id = old.id
            value.shape = old.shape
            value.dtype = old.dtype
            value.op = new_op
            value.index = old.index
            value.name = old.name
            value.stop_gradient = old.stop_gradient
            value.grad = None
            results.append(value)
            value_map[old] = value
        if op.blocks:
            self._copy_blocks(op, new_op)
        self.op_map[op] = new_op
        block.ops.append(new_op)
        return new_op

    def _copy_blocks(self, op, new_op):
        for old_block in op.blocks:
            inner = Block(self.program, parent_op=new_op)
            for inner_op in old_block.ops:
                self.copy(inner_op, block=inner)
            new_op.blocks.append(inner)
        body = op.attrs.get("_body")
        if hasattr(body, "remap"):
            new_op.attrs = dict(new_op.attrs, _body=body.remap(self.value_map, new_op.blocks))

    def copy_all(self, ops) -> None:
        """Copy each of ``ops`` unchanged (the common loop, kept tight)."""
        copy = self.copy
        for op in ops:
            copy(op)

    def alias(self, old: Value, new: Value) -> None:
        """Let ``new`` (already in the new program) stand for old ``old`` from now on."""
        self.value_map[old] = new

    def emit(self, opdef, inputs, attrs, like: Value | None = None, forward_op=None) -> Value:
        """Append a new one-result op (its type from the op's shape rule); with ``like``, the
        result takes that old Value's id, name and flags and stands for it."""
        types = opdef.infer_types([(v.shape, v.dtype) for v in inputs], attrs)
        op = self.block.append_op(opdef, inputs, attrs, types, forward_op=forward_op)
        result = op.results[0]
        if like is not None:
            self.program._next_id -= 1  # give back the fresh id: the result reuses like's
            result.id, result.name, result.stop_gradient = like.id, like.name, like.stop_gradient
            if like.op is not None:
                op.loc = like.op.loc
                op.forward_op = self.op_map.get(like.op.forward_op, like.op.forward_op)
            self.value_map[like] = result
        return result

    def finish(self, fetches, drop_dead=False) -> tuple[Program, list[Value]]:
        """Close the rebuild: carry over inputs, parameters and ``.grad`` links that survived;
        return ``(program, new fetches)``. With ``drop_dead``, ops of the new program that no
        fetch depends on (orphaned by the pass's rewrites) are dropped first."""
        vm = self.value_map
        new = self.program
        new_fetches = [vm[v] for v in fetches]
        if drop_dead:
            live = live_ops(new.ops, new_fetches)
            if len(live) != len(new.ops):
                dead = set(new.ops).difference(live)
                new.ops[:] = live
                vm = {old: value for old, value in vm.items() if value.op not in dead}
        new.inputs = [vm[v] for v in self.source.inputs if v in vm and vm[v].op.opdef.feedable]
        new.parameters = [vm[v] for v in self.source.parameters
                          if v in vm and vm[v].op.opdef.feedable]
        for old, value in vm.items():
            grad = old.grad
            if grad is not None and grad in vm:
                value.grad = vm[grad]
        return new, new_fetches


def clone(program: Program, fetches) -> tuple[Program, list[Value]]:
    """A copy of ``program`` (nested blocks included) and the fetches mapped into it."""
    builder = Rebuilder(program)
    builder.copy_all(program.ops)
    return builder.finish(fetches)
