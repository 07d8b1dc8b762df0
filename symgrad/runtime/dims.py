"""The one binding of a program's symbolic dims, made from the feeds before anything runs.

A program's inputs declare their dims: ints, named symbols (``"batch"``) and anonymous ones
(``None``). When ops were built, dims that had to be equal met through
:func:`symgrad.ir.dims.unify`: two names that differ, or a name and a constant, were refused
then; an anonymous dim (or an expression) that met another dim left a constraint, recorded on
the program with the op that made it. At call time a :class:`~.standalone.DimBinder` (one
implementation, which the standalone runner of an artifact shares):

1. binds every symbol of the fed inputs to its size, once. A named dim fed two different sizes
   is a :class:`~symgrad.errors.FeedError` naming the symbol, both inputs and both sizes
   (``dim 'batch' is 6 in t but 8 in x``);
2. checks every constraint of the ops the fetches need whose dims it can now evaluate, and
   raises a FeedError naming the op, the line that built it, both dims and their sizes.

A program built assuming an anonymous dim is some other size (``x + y`` of ``[?0]`` and
``[8]``: a dim known when it was built is never broadcast from a fed 1) is checked the same way.
Each distinct set of fed shapes is bound once; later calls with the same shapes cost one dict
lookup. Programs whose inputs have no symbolic dim get no binding at all.

The binding (``{symbol text: size}``) is what every backend runs with: the compiled
program's call hands it to the executable (``run(feeds, buffers, dims)``), which passes it to
the generated module's ``run(_dims, _buffers, **feeds)``, and the standalone runner does the
same for an artifact; generated code renders every run-time size from it
(:mod:`symgrad.backends.dim_code`) and the interpreter evaluates dims with it.
"""
from __future__ import annotations

from ..ir.dims import dim_to_json
from ..ir.graph import ancestors_of
from .feeds import dims_signature
from .standalone import DimBinder

__all__ = ["DimBinder", "binder_for_fetches"]


def _top_level(op):
    """The op of the global block that ``op`` is (or is nested in)."""
    while op.block is not None and op.block.parent_op is not None:
        op = op.block.parent_op
    return op


def binder_for_fetches(program, needed) -> DimBinder | None:
    """The binding for computing the fetches whose ancestor ops are ``needed``: the program's
    data inputs with a symbolic dim, and the constraints of those ops and of the forward ops
    of the backward ops among them (a gradient may no longer read the input whose dims its
    forward op assumed). None when no input has a symbolic dim."""
    inputs = [(v.name, list(dims)) for v in program.inputs
              if (dims := dims_signature(v)) is not None]
    if not inputs:
        return None
    forward = {op.forward_op for op in needed if op.forward_op is not None}
    ops = set(needed) | ancestors_of([v for op in forward for v in op.results])
    checks = [{"left": dim_to_json(c.left), "right": dim_to_json(c.right),
               "left_text": str(c.left), "right_text": str(c.right), "op": op.name,
               "loc": op.loc} for c, op in program.dim_constraints if _top_level(op) in ops]
    return DimBinder(inputs, checks)
