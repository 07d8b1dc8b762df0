"""The one binding of a program's symbolic dims, made from the feeds before anything runs.

A program's inputs declare their dims: ints, named symbols (``"batch"``) and anonymous ones
(``None``). When ops were built, dims that had to be equal met through
:func:`symgrad.ir.dims.unify`: two names that differ, or a name and a constant, were refused
then; an anonymous dim (or an expression) that met another dim left a constraint, recorded on
the program with the op that made it. At call time :class:`DimBinding`:

1. binds every symbol of the fed inputs to its size, once. A named dim fed two different sizes
   is a :class:`~symgrad.errors.FeedError` naming the symbol, both inputs and both sizes
   (``dim 'batch' is 6 in t but 8 in x``);
2. checks every constraint of the ops the fetches need whose dims it can now evaluate, and
   raises a FeedError naming the op, the line that built it, both dims and their sizes.

A program built assuming an anonymous dim is some other size (``x + y`` of ``[?0]`` and
``[8]``: a dim known when it was built is never broadcast from a fed 1) is checked the same way.
Each distinct set of fed shapes is bound once; later calls with the same shapes cost one dict
lookup. Programs whose inputs have no symbolic dim get no binding at all.
"""
from __future__ import annotations

from ..errors import FeedError
from ..ir.dims import Symbol, dim_text, evaluate
from ..ir.graph import ancestors_of

MAX_CHECKED_SHAPES = 256   # distinct input-shape sets remembered as checked


def _top_level(op):
    """The op of the global block that ``op`` is (or is nested in)."""
    while op.block is not None and op.block.parent_op is not None:
        op = op.block.parent_op
    return op


class DimBinding:
    """``binding(feeds) -> {Symbol: size}`` binds and checks the symbolic dims (see the module
    docstring); a feed missing here is left to the feed check."""

    def __init__(self, inputs, constraints):
        self.inputs = inputs              # (name, dims) of data inputs with a symbolic dim
        self.constraints = constraints    # (Constraint, op name, its line or None), in order
        self.bound: dict = {}             # fed shapes -> sizes

    @classmethod
    def for_fetches(cls, program, needed) -> "DimBinding | None":
        """The binding for computing the fetches whose ancestor ops are ``needed``: the
        constraints of those ops and of the forward ops of the backward ops among them (a
        gradient may no longer read the input whose dims its forward op assumed)."""
        inputs = [(v.name, v.dims) for v in program.inputs if v.dims is not v.shape]
        if not inputs:
            return None
        forward = {op.forward_op for op in needed if op.forward_op is not None}
        ops = set(needed) | ancestors_of([v for op in forward for v in op.results])
        constraints = [(c, op.name, op.loc) for c, op in program.dim_constraints
                       if _top_level(op) in ops]
        return cls(inputs, constraints)

    def __call__(self, feeds) -> dict:
        key = tuple(getattr(feeds.get(name), "shape", None) for name, _ in self.inputs)
        sizes = self.bound.get(key)
        if sizes is None:
            sizes = self._bind(key)
            if len(self.bound) >= MAX_CHECKED_SHAPES:
                self.bound.clear()
            self.bound[key] = sizes
        return sizes

    def _bind(self, shapes) -> dict:
        sizes: dict = {}
        source: dict = {}
        for (name, dims), shape in zip(self.inputs, shapes):
            if shape is None or len(shape) != len(dims):
                continue
            for dim, size in zip(dims, shape):
                if type(dim) is not Symbol:
                    continue
                size = int(size)
                if dim in sizes and sizes[dim] != size:
                    raise FeedError(f"dim {dim_text(dim)} is {size} in {name} but "
                                    f"{sizes[dim]} in {source[dim]}")
                sizes.setdefault(dim, size)
                source.setdefault(dim, name)
        for constraint, op_name, loc in self.constraints:
            left = evaluate(constraint.left, sizes)
            right = evaluate(constraint.right, sizes)
            if left is not None and right is not None and left != right:
                raise FeedError(_message(op_name, loc, constraint, left, right, source))
        return sizes


def _message(op_name, loc, constraint, left, right, source) -> str:
    where = f" (built at {loc})" if loc else ""

    def shown(dim, size):
        if type(dim) is Symbol and dim in source:
            return f"dim {dim_text(dim)} ({size} in {source[dim]})"
        return f"dim {dim_text(dim)} (= {size})"

    (dim, size), (other, other_size) = sorted(
        [(constraint.left, left), (constraint.right, right)], key=lambda p: isinstance(p[0], int))
    need = f"to be {other_size}" if isinstance(other, int) else \
        f"and {shown(other, other_size)} to be equal"
    return (f"the fed shapes do not fit the program: op {op_name}{where} needs "
            f"{shown(dim, size)} {need} (a dim unknown when the program was built is never "
            f"broadcast)")
