"""``Operation``: one node of the IR.

An operation applies an :class:`~symgrad.ops.opdef.OpDef` to input Values with static
attributes and defines one or more result Values. ``blocks`` holds nested regions for control
flow ops (``cond``/``while_loop``, planned); ``forward_op`` is set on ops built by the
backward pass to the forward op they differentiate, which the printer and the code generators
show as provenance (``# backward of %12 = tanh(%7)``).
"""
from __future__ import annotations


class Operation:
    __slots__ = ("opdef", "inputs", "attrs", "results", "blocks", "block", "forward_op",
                 "loc", "__weakref__")

    def __init__(self, opdef, inputs, attrs, block, loc=None, forward_op=None, blocks=()):
        self.opdef = opdef
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.results = []
        self.block = block
        self.loc = loc
        self.forward_op = forward_op
        self.blocks = list(blocks)

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def result(self):
        """The single result (for one-result ops)."""
        if len(self.results) != 1:
            raise ValueError(f"op {self.name} has {len(self.results)} results")
        return self.results[0]

    @property
    def is_backward(self) -> bool:
        return self.forward_op is not None

    def __repr__(self) -> str:
        from .printer import format_op

        return f"Operation({format_op(self)})"
