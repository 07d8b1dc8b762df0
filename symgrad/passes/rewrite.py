"""Rebuilding programs: the one tool every pass uses to stay a pure ``Program -> Program``.

A :class:`Rebuilder` replays the ops of a source program into a fresh program, op by op, with
a map from old Values to new ones. A pass walks the old ops in order and, for each, either
copies it (:meth:`Rebuilder.copy`), replaces its results by existing new Values
(:meth:`Rebuilder.alias`) or appends different ops (:meth:`Rebuilder.emit`). The old program
is never touched. Copies keep Value ids, names, flags and types (no shape rule runs again), so
the printed IR of an optimized program still reads like the user's. A region op is copied with
its blocks; :meth:`Rebuilder.copy_region` lets a pass rewrite inside them (the pass's own
per-block loop fills each new block), and the copy's captures are recomputed from what its new
blocks read. Nesting depth, not program size, bounds that recursion.
"""
from __future__ import annotations

from ..ir.graph import free_values, live_ops
from ..ir.program import Program, copy_op
from ..ir.value import Value
from ..ops.core import result_dims
from ..ops.fused import is_fusion

__all__ = ["Rebuilder", "clone", "live_ops", "rewrites_inside"]


def rewrites_inside(op) -> bool:
    """Do passes rewrite inside ``op``'s blocks? Yes for control flow; a fused group is the
    fusion pass's product and is copied as it is."""
    return bool(op.blocks) and not is_fusion(op)


class Rebuilder:
    """Build ``self.program`` from ``source`` (see the module docstring)."""

    def __init__(self, source: Program):
        self.source = source
        self.program = Program()
        self.program._next_id = source._next_id
        self.program._next_dim = source._next_dim
        # what the ops assumed of anonymous dims (checked at run time): the dims are the same
        # in every rebuilt program; each stays with the op that assumed it, for its messages
        self.program.dim_constraints = list(source.dim_constraints)
        self.block = self.program.global_block()
        self.value_map: dict[Value, Value] = {}
        self.op_map: dict = {}

    # --- lookups -----------------------------------------------------------------------------
    def get(self, value: Value) -> Value:
        """The new Value standing for old ``value``."""
        return self.value_map[value]

    def inputs_of(self, op) -> list[Value]:
        value_map = self.value_map
        return [value_map[v] for v in op.inputs]

    # --- building ----------------------------------------------------------------------------
    def copy(self, op, inputs=None, attrs=None):
        """Append a copy of old ``op`` (with new ``inputs``/``attrs`` if given, which must give
        the same result types); its results keep their ids, names and types. Returns the new
        op."""
        if op.blocks:
            return self.copy_region(op, attrs=attrs)
        new_op = copy_op(op, [self.value_map[v] for v in op.inputs] if inputs is None
                         else inputs, op.attrs if attrs is None else attrs, self.block,
                         self.value_map, self.op_map)
        self.block.ops.append(new_op)
        return new_op

    def copy_region(self, op, fill=None, attrs=None, kept=None):
        """Append a copy of region op ``op``: ``fill(index, old_block)`` (default: copy its
        ops unchanged) appends the new ops of each block while that block is this builder's
        insertion block; ``kept`` narrows the results and yields (see
        :func:`~symgrad.ir.program.copy_op`). The copy's inputs are its explicit operands
        followed by what its new blocks read from outside."""
        outer = self.block

        def fill_block(index, old_block, new_block):
            self.block = new_block
            if fill is None:
                self.copy_all(old_block.ops)
            else:
                fill(index, old_block)

        try:
            new_op = copy_op(op, [], op.attrs if attrs is None else attrs, outer,
                             self.value_map, self.op_map, fill_block=fill_block, kept=kept)
        finally:
            self.block = outer
        count = op.opdef.explicit_inputs(op.attrs)
        new_op.inputs = [self.value_map[v] for v in op.inputs[:count]] + \
            free_values(new_op.blocks)
        outer.ops.append(new_op)
        return new_op

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
        if like is not None and types[0][0] == like.shape:
            types = [(like.dims, types[0][1])]
        else:
            types = result_dims(opdef, inputs, attrs, types)
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
