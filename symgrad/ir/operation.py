"""``Operation``: one node of the IR.

An operation applies an :class:`~symgrad.ops.opdef.OpDef` to input Values with static
attributes and defines one or more result Values. ``blocks`` holds nested regions for control
flow ops (``cond``/``while_loop``, planned); ``forward_op`` is set on ops built by the
backward pass to the forward op they differentiate, which the printer and the code generators
show as provenance (``# backward of %12 = tanh(%7)``).

Two fields tell reverse mode how to differentiate an op; they are part of the op, so every copy
of a program (``Program.clone``, a pass, serialization, ``vmap``) carries them:

* ``twin_of``: None, or one entry per result: None or a Value (of an earlier op of the same
  block) that the result equals bit for bit. Reverse mode sums the cotangents of those Values
  on this op's results and runs this op's VJP in place of their op's (a checkpointed loop's
  store-all *twin*, :mod:`symgrad.autodiff.regions`); nothing reads the twin otherwise, so
  pruning drops it from a program that no later ``grad`` differentiates.
* ``passes_cotangents``: reverse mode passes each cotangent of a result on through the op's
  VJP as it comes, summing on the op's inputs instead of its results (an op of exact indexing,
  such as the reshape that lays a segmented scan's ``ys`` out from its stacks, so that they
  sum as one Value with those stacks).
"""
from __future__ import annotations


class Operation:
    __slots__ = ("opdef", "inputs", "attrs", "results", "blocks", "block", "forward_op",
                 "loc", "twin_of", "passes_cotangents", "__weakref__")

    def __init__(self, opdef, inputs, attrs, block, loc=None, forward_op=None, blocks=()):
        self.opdef = opdef
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.results = []
        self.block = block
        self.loc = loc
        self.forward_op = forward_op
        self.blocks = list(blocks)
        self.twin_of = None
        self.passes_cotangents = False

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
