"""``Program`` and ``Block``: ordered lists of operations in SSA form, and where new ops go.

A program owns a global block (``program.global_block()``). Region ops (``cond``,
``while_loop``, ``scan``, the fusion op) own nested blocks; a nested block has *arguments*
(Values defined on entry: a loop's carries, a branch's operands) and *yields* (the Values it
hands back to its op). Ops of a nested block may read Values of the blocks that enclose it
directly (captures); the region op lists those captures among its inputs, after its explicit
operands, so every block's dataflow is complete at its own level. All blocks share the
program's value numbering (``%0, %1, ...`` in creation order).

New ops go into the *insertion block*: the innermost block pushed with :func:`insertion_point`
for the program (a region op's builder pushes its block while the user's branch or body
function runs), else the global block. ``program_guard`` and insertion points are per thread
(context variables), so threads building their own programs never see each other's.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools

from ..gc_pause import gc_paused
from .operation import Operation
from .dims import Symbol
from .value import Value

_program_ids = itertools.count()


class Block:
    """A straight-line list of operations with arguments and yielded results;
    ``parent_op`` is None for the global block, and for a region's block while the region op
    is being built (``outer`` then names the block the op will go into)."""

    __slots__ = ("program", "ops", "parent_op", "args", "yields", "outer", "__weakref__")

    def __init__(self, program, parent_op=None, outer=None):
        self.program = program
        self.ops: list[Operation] = []
        self.parent_op = parent_op
        self.args: list[Value] = []
        self.yields: list[Value] = []
        self.outer = outer

    @property
    def parent_block(self):
        """The block enclosing this one (None for the global block)."""
        op = self.parent_op
        return op.block if op is not None else self.outer

    def add_arg(self, shape, dtype, name=None) -> Value:
        """A new argument of the block (numbered like any Value of the program)."""
        program = self.program
        value = Value(program, program._take_id(), shape, dtype, index=len(self.args),
                      name=name, arg_of=self)
        self.args.append(value)
        return value

    def append_op(self, opdef, inputs, attrs, result_types, loc=None, forward_op=None,
                  blocks=()):
        """Create an op with results of ``result_types`` [(shape, dtype), ...] (and nested
        ``blocks``, which it becomes the parent of) and append it."""
        program = self.program
        if forward_op is None:
            forward_op = program._backward_of
        op = Operation(opdef, inputs, attrs, self, loc=loc, forward_op=forward_op,
                       blocks=blocks)
        for block in op.blocks:
            block.parent_op = op
        results = op.results
        for index, (shape, dtype) in enumerate(result_types):
            results.append(Value(program, program._next_id, shape, dtype, op=op, index=index))
            program._next_id += 1
        self.ops.append(op)
        return op

    def encloses(self, other) -> bool:
        """Is ``other`` this block or a block nested (at any depth) inside it?"""
        while other is not None:
            if other is self:
                return True
            other = other.parent_block
        return False

    def __iter__(self):
        return iter(self.ops)

    def __len__(self):
        return len(self.ops)

    def __repr__(self):
        owner = "global" if self.parent_op is None else f"of {self.parent_op.name}"
        return f"<Block {owner}: {len(self.args)} args, {len(self.ops)} ops>"


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
        """The ``data`` Values, in creation order: the positional feed order."""
        self.parameters: list[Value] = []
        """The ``parameter`` Values, in creation order."""
        self._backward_of = None
        self._scalar_constants: dict = {}  # (block, dtype, type, value) -> constant Value
        self._undo: list = []              # changes to existing ops, undone by a failed transaction
        self._open_transactions = 0
        self._next_dim = 0                 # number of the next anonymous dim (?0, ?1...)
        # (Constraint, op): equalities of dims an op assumed, checked when the program runs
        self.dim_constraints: list = []

    def fresh_dim(self) -> Symbol:
        """A new anonymous dim of this program (printed ``?N``)."""
        number = self._next_dim
        self._next_dim = number + 1
        return Symbol(None, number)

    @property
    def feedable(self) -> list[Value]:
        """The data inputs then the parameters (see the class docstring)."""
        return self.inputs + self.parameters

    # --- structure -----------------------------------------------------------------------
    def global_block(self) -> Block:
        """The program's top-level block: it holds the ``data`` and ``parameter`` ops and
        every op built outside a branch or loop body (a region op's blocks hang below it)."""
        return self._blocks[0]

    @property
    def ops(self) -> list[Operation]:
        """The ops of the global block, in program order (the list itself, not a copy: do not
        modify it). The ops of regions are in their op's ``blocks``."""
        return self._blocks[0].ops

    @property
    def num_ops(self) -> int:
        """How many ops the global block holds (``len(program.ops)``; a region op counts as
        one, whatever its blocks hold)."""
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
    def record_undo(self, undo) -> None:
        """Inside a :meth:`transaction`, remember ``undo()``, which reverts a change made to
        an existing op (a transformation that grows an op calls it); a failed transaction
        calls it. Outside any transaction it is forgotten."""
        if self._open_transactions:
            self._undo.append(undo)

    def _snapshot(self):
        block = current_block(self)
        return (block, len(block.ops), self._next_id, len(self.inputs), len(self.parameters),
                len(self._undo), self._next_dim, len(self.dim_constraints))

    def _restore(self, snapshot):
        """Drop every op and Value created after ``snapshot`` in the insertion block, and
        revert the changes recorded since (used by failed transformations)."""
        block, num_ops, next_id, num_inputs, num_params, num_undo, next_dim, num_constraints = \
            snapshot
        self._next_dim = next_dim
        del self.dim_constraints[num_constraints:]
        while len(self._undo) > num_undo:
            self._undo.pop()()
        del block.ops[num_ops:]
        del self.inputs[num_inputs:]
        del self.parameters[num_params:]
        self._next_id = next_id
        self.forget_cached_constants(next_id)

    def cached_scalar_constant(self, key, make):
        """The constant Value cached under ``key`` in the insertion block, made by ``make()``
        on first use. Reusing one Value for every ``x * 2.0`` keeps programs (and backward
        passes) small; the cache is per block, so a constant of a loop body is never read
        outside it."""
        key = (current_block(self), key)
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
        """Everything appended to the insertion block inside is removed again, and every
        recorded change reverted, if the block raises."""
        snapshot = self._snapshot()
        saved_backward_of = self._backward_of
        self._open_transactions += 1
        try:
            yield
        except BaseException:
            self._restore(snapshot)
            self._backward_of = saved_backward_of
            raise
        finally:
            self._open_transactions -= 1
            if not self._open_transactions:
                self._undo.clear()

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
        block = new.global_block()
        ops = self.ops if keep is None else [op for op in self.ops if op in keep]
        with gc_paused():
            for op in ops:
                block.ops.append(copy_op(op, [value_map[v] for v in op.inputs], op.attrs,
                                         block, value_map, op_map))
        new._next_id = self._next_id
        new._next_dim = self._next_dim
        # an op of this program that was not kept takes its constraints along; one of an
        # earlier program (a pass rebuilt this one) stays, for its name and line
        new.dim_constraints = [(c, op_map.get(op, op)) for c, op in self.dim_constraints
                               if op in op_map or op.block is None
                               or op.block.program is not self]
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
        """The program as a ``networkx.DiGraph``: one node per op (the ops of regions
        included) and per block argument, an edge per Value from its producer to each
        consumer (see ``symgrad.ir.graph.to_networkx``)."""
        from .graph import to_networkx

        return to_networkx(self)

    def to_dot(self, groups=None) -> str:
        """Graphviz source of the program: backward ops shaded, regions drawn as clusters
        inside their op's, and each list of ops in ``groups`` (fusion groups, say) as a
        cluster of its own."""
        from .graph import to_dot

        return to_dot(self, groups=groups)


# --- copying ops -------------------------------------------------------------------------------
# Copies fill every slot of a fresh Operation / Value directly: the constructors would only
# re-check types that the copied objects already have
_new_op = Operation.__new__
_new_value = Value.__new__


def copy_value(old, program, op=None, arg_of=None) -> Value:
    """A copy of ``old`` (same id, type, name and flags) for ``program``."""
    value = _new_value(Value)
    value.program = program
    value.id = old.id
    value.shape = old.shape
    value.dims = old.dims
    value.dtype = old.dtype
    value.op = op
    value.index = old.index
    value.name = old.name
    value.stop_gradient = old.stop_gradient
    value.grad = None
    value.arg_of = arg_of
    return value


def _mapped_twin(twin_of, value_map):
    """``twin_of`` (:class:`~symgrad.ir.operation.Operation`) read through ``value_map``;
    None when a Value it names was not copied (the copy then stands in for nothing)."""
    try:
        return tuple([None if v is None else value_map[v] for v in twin_of])
    except KeyError:
        return None


def copy_op(op, inputs, attrs, block, value_map, op_map, fill_block=None, kept=None) -> Operation:
    """A copy of ``op`` for ``block`` (not appended to it) reading ``inputs``, with ``attrs``;
    its results keep their ids, names and types and are entered in ``value_map`` (old Value
    -> new), and ``op_map`` maps ``op`` to the copy (provenance follows it); its ``twin_of``
    names the copies of the Values it named (:func:`_mapped_twin`). Nested blocks are
    copied with their arguments and yields; ``fill_block(index, old_block, new_block)``, if
    given, fills each new block instead of copying its ops unchanged (a pass that rewrites
    inside regions). ``kept = (result indices, [yield indices per block])`` keeps only those
    results and yields (a region narrowed by dead-code elimination). Nesting depth, not program
    size, bounds the recursion."""
    program = block.program
    forward_op = op.forward_op
    if forward_op is not None:
        forward_op = op_map.get(forward_op, forward_op)
    new_op = _new_op(Operation)
    new_op.opdef = op.opdef
    new_op.inputs = list(inputs)
    new_op.attrs = dict(attrs)
    new_op.block = block
    new_op.loc = op.loc
    new_op.forward_op = forward_op
    new_op.passes_cotangents = op.passes_cotangents
    new_op.blocks = []
    new_op.results = results = []
    kept_results, kept_yields = kept if kept is not None else (None, None)
    twin = op.twin_of
    if twin is not None and kept_results is not None:
        twin = [twin[i] for i in kept_results]
    new_op.twin_of = None if twin is None else _mapped_twin(twin, value_map)
    olds = op.results if kept_results is None else [op.results[i] for i in kept_results]
    for index, old in enumerate(olds):
        value = copy_value(old, program, op=new_op)
        value.index = index
        results.append(value)
        value_map[old] = value
    for number, old_block in enumerate(op.blocks):
        inner = Block(program, parent_op=new_op)
        for old_arg in old_block.args:
            arg = copy_value(old_arg, program, arg_of=inner)
            inner.args.append(arg)
            value_map[old_arg] = arg
        new_op.blocks.append(inner)
        if fill_block is not None:
            fill_block(number, old_block, inner)
        else:
            for inner_op in old_block.ops:
                inner.ops.append(copy_op(inner_op, [value_map[v] for v in inner_op.inputs],
                                         inner_op.attrs, inner, value_map, op_map))
        yields = old_block.yields if kept_yields is None else \
            [old_block.yields[i] for i in kept_yields[number]]
        inner.yields = [value_map[v] for v in yields]
    op_map[op] = new_op
    return new_op


# --- the default program, program_guard and insertion points ------------------------------------
_default_program = Program()
_guarded: contextvars.ContextVar = contextvars.ContextVar("symgrad_guarded_programs",
                                                          default=())
_insertion: contextvars.ContextVar = contextvars.ContextVar("symgrad_insertion_blocks",
                                                            default=())


def default_main_program() -> Program:
    """The program ops go into when no input Value names one: the innermost
    ``program_guard``'s program of this thread, else the process-wide default program."""
    guarded = _guarded.get()
    return guarded[-1] if guarded else _default_program


@contextlib.contextmanager
def program_guard(program: Program):
    """Build ops into ``program`` inside the ``with`` block (Paddle's ``program_guard``); per
    thread."""
    if not isinstance(program, Program):
        raise TypeError(f"program_guard expects a symgrad.Program, got {type(program).__name__}")
    token = _guarded.set(_guarded.get() + (program,))
    try:
        yield program
    finally:
        _guarded.reset(token)


def current_block(program: Program) -> Block:
    """Where ops built for ``program`` go now: its innermost block pushed by
    :func:`insertion_point` in this thread, else its global block."""
    for block in reversed(_insertion.get()):
        if block.program is program:
            return block
    return program.global_block()


@contextlib.contextmanager
def insertion_point(block: Block):
    """Build the ops of ``block.program`` into ``block`` inside the ``with`` block (a region
    op's builder runs the user's branch or body function here)."""
    token = _insertion.set(_insertion.get() + (block,))
    try:
        yield block
    finally:
        _insertion.reset(token)


def is_default_program(program) -> bool:
    """Whether ``program`` is the default program: the one ops go into when no
    ``program_guard`` is active and none of their inputs names a program."""
    return program is _default_program
