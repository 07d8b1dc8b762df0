"""``Program`` and ``Block``: ordered lists of operations in SSA form.

A program owns a global block (``program.global_block()``); nested blocks (owned by control
flow ops) hang off operations and share the program's value numbering. Values are numbered in
creation order (``%0, %1, ...``), which is also a topological order of the global block.
"""
from __future__ import annotations

import contextlib
import itertools

from ..gc_pause import gc_paused
from .operation import Operation
from .value import Value

_program_ids = itertools.count()


class Block:
    """A straight-line list of operations; ``parent_op`` is None for the global block."""

    __slots__ = ("program", "ops", "parent_op", "__weakref__")

    def __init__(self, program, parent_op=None):
        self.program = program
        self.ops: list[Operation] = []
        self.parent_op = parent_op

    def append_op(self, opdef, inputs, attrs, result_types, loc=None, forward_op=None):
        """Create an op with results of ``result_types`` [(shape, dtype), ...] and append it."""
        program = self.program
        if forward_op is None:
            forward_op = program._backward_of
        op = Operation(opdef, inputs, attrs, self, loc=loc, forward_op=forward_op)
        results = op.results
        for index, (shape, dtype) in enumerate(result_types):
            results.append(Value(program, program._next_id, shape, dtype, op=op, index=index))
            program._next_id += 1
        self.ops.append(op)
        return op

    def __iter__(self):
        return iter(self.ops)

    def __len__(self):
        return len(self.ops)


class Program:
    """A static program: a global block of ops plus its data inputs and parameters.

    ``program.inputs`` lists the ``data`` Values only, in creation order (the positional feed
    order); ``program.parameters`` the ``parameter`` Values in creation order; and
    ``program.feedable`` both, data first: every Value a runner accepts a feed for, in the
    order of a compiled program's (and an artifact's) input signature.
    """

    def __init__(self):
        self.uid = next(_program_ids)
        self._next_id = 0
        self._blocks = [Block(self)]
        self.inputs: list[Value] = []
        self.parameters: list[Value] = []
        self._backward_of = None
        self._scalar_constants: dict = {}  # (dtype, type, value) -> constant Value, for reuse

    @property
    def feedable(self) -> list[Value]:
        """The data inputs then the parameters (see the class docstring)."""
        return self.inputs + self.parameters

    # --- structure -----------------------------------------------------------------------
    def global_block(self) -> Block:
        return self._blocks[0]

    @property
    def ops(self) -> list[Operation]:
        return self._blocks[0].ops

    @property
    def num_ops(self) -> int:
        return len(self._blocks[0].ops)

    def _take_id(self) -> int:
        i = self._next_id
        self._next_id = i + 1
        return i

    def values(self):
        """Every Value defined in the global block, in definition order."""
        for op in self.ops:
            yield from op.results

    def find(self, name: str) -> Value:
        """The Value the user named ``name`` (data, parameter or any named Value)."""
        for value in self.values():
            if value.name == name:
                return value
        raise KeyError(f"no Value named {name!r} in this program")

    # --- provenance of backward ops --------------------------------------------------------
    @contextlib.contextmanager
    def backward_of(self, forward_op):
        """Mark every op built inside the block as the backward of ``forward_op``."""
        saved = self._backward_of
        self._backward_of = forward_op
        try:
            yield
        finally:
            self._backward_of = saved

    # --- transactions ----------------------------------------------------------------------
    def _snapshot(self):
        return (self._next_id, len(self.ops), len(self.inputs), len(self.parameters))

    def _restore(self, snapshot):
        """Drop every op and Value created after ``snapshot`` (used by failed transformations)."""
        next_id, num_ops, num_inputs, num_params = snapshot
        del self.ops[num_ops:]
        del self.inputs[num_inputs:]
        del self.parameters[num_params:]
        self._next_id = next_id
        self.forget_cached_constants(next_id)

    def cached_scalar_constant(self, key, make):
        """The constant Value cached under ``key``, made by ``make()`` on first use. Reusing
        one Value for every ``x * 2.0`` keeps programs (and backward passes) small."""
        value = self._scalar_constants.get(key)
        if value is None:
            value = self._scalar_constants[key] = make()
        return value

    def forget_cached_constants(self, first_id):
        """Drop cached constants numbered ``first_id`` or later (their ops may be removed)."""
        stale = [k for k, v in self._scalar_constants.items() if v.id >= first_id]
        for key in stale:
            del self._scalar_constants[key]

    @contextlib.contextmanager
    def transaction(self):
        """Everything appended inside is removed again if the block raises."""
        snapshot = self._snapshot()
        saved_backward_of = self._backward_of
        try:
            yield
        except BaseException:
            self._restore(snapshot)
            self._backward_of = saved_backward_of
            raise

    # --- copies --------------------------------------------------------------------------
    def clone(self, keep=None):
        """A deep copy of the program (nested blocks included); returns ``(program,
        value_map)`` mapping old -> new Values by identity (a dict keyed by the old Value
        objects). Copies keep ids, names, flags and types; no shape rule runs again. ``keep``
        (a set of top-level ops closed under their inputs' producers, such as
        :func:`~symgrad.ir.graph.ancestors_of` returns) copies only those ops, and only the
        inputs and parameters among their results."""
        new = Program()
        value_map: dict[Value, Value] = {}
        op_map: dict[Operation, Operation] = {}

        def copy_ops(ops, block):
            append = block.ops.append
            for op in ops:
                forward_op = op.forward_op
                if forward_op is not None:
                    forward_op = op_map.get(forward_op, forward_op)
                new_op = Operation(op.opdef, [value_map[v] for v in op.inputs], op.attrs, block,
                                   op.loc, forward_op)
                results = new_op.results
                for old in op.results:
                    value = Value(new, old.id, old.shape, old.dtype, new_op, old.index, old.name,
                                  old.stop_gradient)
                    results.append(value)
                    value_map[old] = value
                for old_block in op.blocks:   # nesting depth, not program size, bounds this
                    inner = Block(new, parent_op=new_op)
                    copy_ops(old_block.ops, inner)
                    new_op.blocks.append(inner)
                body = op.attrs.get("_body") if op.blocks else None
                if hasattr(body, "remap"):    # a fused body: captures/outputs into the copy
                    new_op.attrs["_body"] = body.remap(value_map, new_op.blocks)
                op_map[op] = new_op
                append(new_op)

        ops = self.ops if keep is None else [op for op in self.ops if op in keep]
        with gc_paused():
            copy_ops(ops, new.global_block())
        new._next_id = self._next_id
        new.inputs = [value_map[v] for v in self.inputs if v in value_map]
        new.parameters = [value_map[v] for v in self.parameters if v in value_map]
        for old, value in value_map.items():
            grad = old.grad
            if grad is not None and grad in value_map:
                value.grad = value_map[grad]
        return new, value_map

    # --- views ---------------------------------------------------------------------------
    def __str__(self) -> str:
        from .printer import format_program

        return format_program(self)

    def __repr__(self) -> str:
        return f"<symgrad.Program #{self.uid}: {len(self.ops)} ops>"

    def verify(self):
        """Raise :class:`~symgrad.errors.VerificationError` if the program is malformed."""
        from .verifier import verify

        verify(self)

    def to_networkx(self):
        from .graph import to_networkx

        return to_networkx(self)

    def to_dot(self, groups=None) -> str:
        from .graph import to_dot

        return to_dot(self, groups=groups)


# --- the default program and program_guard ----------------------------------------------------
_program_stack: list[Program] = [Program()]


def default_main_program() -> Program:
    """The program ops go into when no input Value names one (``program_guard`` sets it)."""
    return _program_stack[-1]


@contextlib.contextmanager
def program_guard(program: Program):
    """Build ops into ``program`` inside the ``with`` block (Paddle's ``program_guard``)."""
    if not isinstance(program, Program):
        raise TypeError(f"program_guard expects a symgrad.Program, got {type(program).__name__}")
    _program_stack.append(program)
    try:
        yield program
    finally:
        _program_stack.pop()


def is_default_program(program) -> bool:
    """Whether ``program`` is the default program: the one ops go into when no
    ``program_guard`` is active and none of their inputs names a program."""
    return program is _program_stack[0]
