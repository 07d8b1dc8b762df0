"""Run-time sizes in generated code: every symbolic dim is read from the one binding.

The rule every backend's generated code follows (the contract of DESIGN.md's "Symbolic
dims"): before anything runs, the caller binds each symbol of the program's inputs to its
size (:class:`~symgrad.runtime.standalone.DimBinder`, ``{symbol text: size}``) and hands that
binding to the generated ``run`` as its first argument, ``run(_dims, _buffers, /, **feeds)``.
The first lines of ``run`` copy each bound symbol into a local of its own, named by number
(user text never becomes an identifier; the symbol's name appears only inside an ``ascii()``
string literal)::

    _d0 = _dims['batch']
    _d1 = _dims['?0']

and every run-time size in the generated code (NumPy, C host and C entry arguments, CUDA
host) is then rendered from those locals: a symbol as its local, an expression
(:mod:`symgrad.ir.dims`: sums, products, floor division by a constant) as integer arithmetic
(``_d0 * 784``, ``(_d0 - 1) // 2 + 1``; in C ``(int64_t)`` arithmetic with a floor division
that rounds down like Python's). No size is inferred from an operand's shape.

**The one exception**: a fresh anonymous dim that an op defines at run time (its size
depends on values, or no exact expression of the op's result exists) cannot be known before
that op runs. It is bound right after the op that produces it, from that op's result::

    t5 = ...                     # %5 = some_op(%4)
    _d2 = t5.shape[0]            # dim ?2, defined by this op's result

That is the only place generated code reads an array's shape for a size. A dim defined
inside a region's block is local to that block (a loop body binds it at every step).

**Checks at run time.** When an op was built, an anonymous dim that met another dim left a
constraint (``program.dim_constraints``: ``x[1:] + t`` of ``[k]`` and ``[k]`` assumes the
slice's ``?0`` is ``k``; a loop body that gives back a carry's ``?4`` for ``k`` assumes the
same). The binding checks those written in the inputs' symbols before anything runs; one that
mentions a dim an op defines is checked right after that op binds it (in a loop body, at
every step), before anything reads the result (:class:`RunTimeChecks`)::

    _d2 = t5.shape[0]  # dim ?0, defined by this op
    if _d2 != _d0:
        raise FeedError('op add (built at model.py:7) needs dim ?0 (= %d, defined at run time '
                        'by an op) and dim k (= %d) to be equal ...' % (_d2, _d0))

so a size that an op's result gets wrong is a ``FeedError`` naming the op that assumed it,
never a silent wrong result nor a bare NumPy broadcasting error.
"""
from __future__ import annotations

from ..ir.dims import FloorDiv, Symbol, symbols_of
from ..ir.location import op_site


class UnboundDim(LookupError):
    """A dim was rendered before anything bound it (a code generator's bug, never a user
    error)."""


def _c_floordiv(numerator: str, divisor: int) -> str:
    """C source of ``numerator // divisor`` rounding toward minus infinity (as Python does;
    C's ``/`` rounds toward zero), ``divisor`` a positive int."""
    return (f"((({numerator}) >= 0) ? ({numerator}) / {divisor} : "
            f"(({numerator}) - {divisor - 1}) / {divisor})")


class DimNames:
    """Which local of the generated code holds each symbolic dim, with scopes for blocks.

    ``names[dim]`` is the identifier holding ``dim`` (a :class:`Symbol`, or an expression
    bound whole because one of its symbols has no local of its own). :meth:`code` renders any
    dim from them, in Python (``c=False``) or C."""

    def __init__(self):
        self.names: dict = {}
        self._saved: list = []

    def bind(self, dim, name: str) -> None:
        self.names[dim] = name

    def known(self, dim) -> bool:
        """Can ``dim`` be rendered from what is bound now?"""
        if isinstance(dim, int) or dim in self.names:
            return True
        return type(dim) is not Symbol and all(s in self.names for s in symbols_of(dim))

    def push(self) -> None:
        """Enter a block: what it binds is forgotten at :meth:`pop`."""
        self._saved.append(dict(self.names))

    def pop(self) -> None:
        self.names = self._saved.pop()

    def code(self, dim, c: bool = False) -> str:
        """Source of ``dim``'s size (Python, or C with ``c``)."""
        if isinstance(dim, int):
            return str(dim)
        name = self.names.get(dim)
        if name is not None:
            return name
        if type(dim) is Symbol:
            raise UnboundDim(f"dim {dim} is used before it is bound")
        if type(dim) is FloorDiv:
            numerator = self.code(dim.numerator, c)
            return _c_floordiv(numerator, dim.divisor) if c else \
                f"({numerator}) // {dim.divisor}"
        parts = []
        for atoms, coefficient in dim.terms:   # Expr: a sum of monomials
            factors = [self.code(a, c) for a in atoms]
            factors = [f if type(a) is Symbol or a in self.names else f"({f})"
                       for f, a in zip(factors, atoms)]
            if coefficient != 1 or not factors:
                factors.append(str(coefficient) if coefficient >= 0 else f"({coefficient})")
            parts.append(" * ".join(factors))
        return "(" + " + ".join(parts) + ")" if len(parts) > 1 else parts[0]


def shape_code(dims) -> str:
    """A Python tuple expression from dim sources (strings)."""
    dims = list(dims)
    if len(dims) == 1:
        return f"({dims[0]},)"
    return "(" + ", ".join(dims) + ")"


class RunTimeChecks:
    """The constraints of a program (``program.dim_constraints``: ``(Constraint, op)``) that
    mention a dim some op defines at run time, by symbol: :meth:`after` tells which to check
    once an op has bound its dims (see the module docstring)."""

    def __init__(self, constraints):
        self.by_symbol: dict = {}
        for constraint, op in constraints:
            for symbol in symbols_of(constraint.left) | symbols_of(constraint.right):
                self.by_symbol.setdefault(symbol, []).append((constraint, op))

    def after(self, defined, known) -> list:
        """``(constraint, op)`` to check once the dims ``defined`` are bound: those that
        mention one of them and whose every dim ``known(dim)`` can now evaluate."""
        found = {}
        for dim in defined:
            for constraint, op in self.by_symbol.get(dim, ()):
                if constraint not in found and known(constraint.left) \
                        and known(constraint.right):
                    found[constraint] = op
        return list(found.items())

    @staticmethod
    def message(constraint, op, defined) -> str:
        """The error of a failed check, with ``%d`` for the left and then the right size
        (``defined``: the dims bound from an op's result)."""
        def side(dim):
            how = ", defined at run time by an op's result" if symbols_of(dim) & defined \
                else ""
            return f"dim {dim} (= %d{how})"
        site = op_site(op).replace("%", "%%")
        return (f"the shapes do not fit the program: op {site} needs "
                f"{side(constraint.left)} and {side(constraint.right)} to be equal (a dim "
                f"unknown when the program was built is never broadcast)")
