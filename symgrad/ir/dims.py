"""Symbolic dims: the sizes a program knows only at run time, as symbols and expressions.

A dim of a :class:`~symgrad.ir.value.Value` is an ``int``, a :class:`Symbol` or an
:class:`Expr`:

* a **named** symbol (``sg.data("x", ["batch", 784])``): within one program the same name is
  the same size;
* an **anonymous** symbol (``None`` or ``-1`` in a declared shape, or a dim no rule can express
  exactly): a size of its own, printed ``?0``, ``?1``... (numbered per program);
* an **expression** of symbols with integer coefficients: sums (``n + m``, from
  ``concatenate``), products (``batch*784``, from ``reshape(x, [-1])``) and floor division by
  a positive constant (``(n + 1)//2``, from strided windows). Expressions are kept in one
  canonical form (a sum of monomials), so equal expressions compare equal, and an expression
  that reduces to one symbol or to a constant *is* that symbol or int
  (``(batch*784)//784`` is ``batch``).

:func:`unify` is the one place two dims that must be equal meet: two different names, a name
and a constant other than 1, or two different constants are a ``ShapeError`` naming both; an
anonymous symbol or an expression unifies with what it meets, and the equality is recorded as
a :class:`Constraint` that the run-time binding checks, unless the two differ by a constant
(``n + 1`` and ``n``, ``?0*2 + 2`` and ``?0*2``): no size makes those equal, so they are a
``ShapeError`` too. Symbols and expressions are immutable
and hashable; nothing here depends on a program.
"""
from __future__ import annotations

import contextvars
import dataclasses
import itertools

from ..errors import ShapeError

_anonymous_ids = itertools.count()


class Symbol:
    """A symbolic dim: named (``name`` set; equal to every symbol of that name) or anonymous
    (``name`` None; equal only to itself, printed ``?number``)."""

    __slots__ = ("name", "number", "_key")

    def __init__(self, name: str | None = None, number: int = 0):
        self.name = name
        self.number = number
        self._key = ("n", name) if name is not None else ("a", next(_anonymous_ids))

    @property
    def anonymous(self) -> bool:
        return self.name is None

    def __eq__(self, other):
        return type(other) is Symbol and other._key == self._key

    def __hash__(self):
        return hash(self._key)

    def __lt__(self, other):   # a stable order for canonical expressions
        return _atom_key(self) < _atom_key(other)

    def __str__(self):
        return self.name if self.name is not None else f"?{self.number}"

    def __repr__(self):
        return f"Symbol({str(self)!r})"

    # arithmetic builds expressions
    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __sub__(self, other):
        return add(self, mul(other, -1))

    def __rsub__(self, other):
        return add(other, mul(self, -1))


class FloorDiv:
    """``numerator // divisor`` where the division is not exact symbolically (an atom of
    expressions)."""

    __slots__ = ("numerator", "divisor")

    def __init__(self, numerator, divisor: int):
        self.numerator = numerator
        self.divisor = divisor

    def __eq__(self, other):
        return type(other) is FloorDiv and (other.numerator, other.divisor) == \
            (self.numerator, self.divisor)

    def __hash__(self):
        return hash(("//", self.numerator, self.divisor))

    def __lt__(self, other):
        return _atom_key(self) < _atom_key(other)

    def __str__(self):
        inner = str(self.numerator)
        if isinstance(self.numerator, Expr) and len(self.numerator.terms) > 1:
            inner = f"({inner})"
        return f"{inner}//{self.divisor}"


def _atom_key(atom):
    """The canonical order of atoms (within a monomial, and of monomials within an
    :class:`Expr`): anonymous symbols by their program number (``?0`` before ``?1``), then named
    symbols by name, then floor divisions by numerator (:func:`_dim_key`) and divisor. It
    depends only on what the atoms are, not on the order they were made in or on hashing, so
    an expression prints, saves and loads the same in every process. Two anonymous symbols
    with one number (from different programs: never within one) are ordered by identity, so
    that the order is total and equal expressions have equal ``terms``."""
    if type(atom) is Symbol:
        if atom.name is None:
            return (0, atom.number, atom._key[1])
        return (1, atom.name)
    return (2, _dim_key(atom.numerator), atom.divisor)


def _dim_key(dim):
    """A key ordering dims (ints, atoms, expressions) by their structure (see :func:`_atom_key`)."""
    if isinstance(dim, int):
        return (0, dim)
    if type(dim) is Expr:
        return (2, tuple((tuple(_atom_key(a) for a in atoms), c) for atoms, c in dim.terms))
    return (1, _atom_key(dim))


class Expr:
    """A canonical sum of monomials: ``terms`` is a tuple of ``(atoms, coefficient)``, atoms a
    sorted tuple of :class:`Symbol`/:class:`FloorDiv` (``()`` for the constant term), no zero
    coefficient. Build expressions with :func:`add`, :func:`mul`, :func:`floordiv` (or a
    symbol's operators), which return an ``int`` or a :class:`Symbol` when that is what the
    expression is."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms):
        self.terms = terms
        self._hash = hash(terms)

    def __eq__(self, other):
        return type(other) is Expr and other.terms == self.terms

    def __hash__(self):
        return self._hash

    def __str__(self):
        parts = []
        for atoms, coefficient in sorted(self.terms, key=lambda term: not term[0]):
            names = [str(a) if type(a) is Symbol or len(atoms) == 1 and coefficient == 1
                     else f"({a})" for a in atoms]
            if not names:
                parts.append(str(coefficient))
            elif coefficient == 1:
                parts.append("*".join(names))
            elif coefficient == -1:
                parts.append("-" + "*".join(names))
            else:
                parts.append("*".join(names) + f"*{coefficient}")
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def __repr__(self):
        return f"Expr({str(self)!r})"

    __add__ = Symbol.__add__
    __radd__ = Symbol.__radd__
    __mul__ = Symbol.__mul__
    __rmul__ = Symbol.__rmul__
    __floordiv__ = Symbol.__floordiv__
    __sub__ = Symbol.__sub__
    __rsub__ = Symbol.__rsub__


def is_symbolic(dim) -> bool:
    """Is ``dim`` a symbol or an expression (not an int)?"""
    return type(dim) is Symbol or type(dim) is Expr


def _terms(dim) -> dict:
    if type(dim) is Expr:
        return dict(dim.terms)
    if type(dim) is Symbol or type(dim) is FloorDiv:
        return {(dim,): 1}
    if isinstance(dim, int) and not isinstance(dim, bool):
        return {(): int(dim)} if dim else {}
    raise TypeError(f"not a dim: {dim!r}")


def _make(terms: dict):
    terms = {atoms: c for atoms, c in terms.items() if c}
    if not terms:
        return 0
    if len(terms) == 1:
        (atoms, coefficient), = terms.items()
        if not atoms:
            return coefficient
        if coefficient == 1 and len(atoms) == 1 and type(atoms[0]) is Symbol:
            return atoms[0]
    return Expr(tuple(sorted(terms.items(), key=lambda t: [_atom_key(a) for a in t[0]])))


def add(a, b):
    terms = _terms(a)
    for atoms, c in _terms(b).items():
        terms[atoms] = terms.get(atoms, 0) + c
    return _make(terms)


def mul(a, b):
    terms: dict = {}
    for atoms_a, ca in _terms(a).items():
        for atoms_b, cb in _terms(b).items():
            atoms = tuple(sorted(atoms_a + atoms_b, key=_atom_key))
            terms[atoms] = terms.get(atoms, 0) + ca * cb
    return _make(terms)


def floordiv(a, divisor):
    """``a // divisor`` for a positive int ``divisor``: exact when every coefficient divides,
    else a :class:`FloorDiv` atom."""
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 1:
        raise TypeError(f"a dim can only be floor-divided by a positive int, got {divisor!r}")
    if isinstance(a, int):
        return a // divisor
    terms = _terms(a)
    if all(c % divisor == 0 for c in terms.values()):
        return _make({atoms: c // divisor for atoms, c in terms.items()})
    return _make({(FloorDiv(a, divisor),): 1})


def product(dims):
    """The product of ``dims`` (ints and symbolic dims)."""
    total = 1
    for d in dims:
        total = mul(total, d)
    return total


def symbols_of(dim) -> set:
    """The symbols ``dim`` is written in."""
    found = set()
    stack = [dim]
    while stack:
        d = stack.pop()
        if type(d) is Symbol:
            found.add(d)
        elif type(d) is FloorDiv:
            stack.append(d.numerator)
        elif type(d) is Expr:
            for atoms, _ in d.terms:
                stack.extend(atoms)
    return found


def evaluate(dim, sizes: dict):
    """``dim``'s size given ``sizes`` (symbol, or a dim bound whole -> int); None when some
    symbol of it is not in ``sizes``."""
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return sizes[dim]
    if type(dim) is Symbol:
        return None
    if type(dim) is FloorDiv:
        numerator = evaluate(dim.numerator, sizes)
        return None if numerator is None else numerator // dim.divisor
    total = 0
    for atoms, coefficient in dim.terms:
        for atom in atoms:
            size = evaluate(atom, sizes)
            if size is None:
                return None
            coefficient *= size
        total += coefficient
    return total


def dim_text(dim) -> str:
    """How a dim is named in messages: ``784``, ``'batch'``, ``'?0'``, ``'batch*784'``."""
    return str(dim) if isinstance(dim, int) else repr(str(dim))


# --- unification ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Constraint:
    """``left == right`` must hold at run time (an anonymous dim or an expression met another
    dim when an op was built; the program records it with that op)."""

    left: object
    right: object


_recording: contextvars.ContextVar = contextvars.ContextVar("symgrad_dim_constraints",
                                                           default=None)


def recording_into(found: list):
    """Let :func:`unify` append the constraints it records to ``found`` until
    :func:`stop_recording` is given the token this returns."""
    return _recording.set(found)


def stop_recording(token) -> None:
    _recording.reset(token)


def _rank(dim) -> int:
    """Which of two unified dims names the result: an int, then a named symbol, then an
    expression, then an anonymous symbol."""
    if isinstance(dim, int):
        return 0
    if type(dim) is Symbol:
        return 3 if dim.anonymous else 1
    return 2


def unify(a, b, what: str = "dims"):
    """The one dim ``a`` and ``b`` are, as they must be equal (see the module docstring).
    ``what`` names where they meet, for the error."""
    if a == b:
        return a
    ra, rb = _rank(a), _rank(b)
    if ra == 0 and rb == 0 or ra == 1 and rb in (0, 1) or rb == 1 and ra == 0:
        raise ShapeError(f"{what}: dim {dim_text(a)} meets dim {dim_text(b)}, and they cannot "
                         f"be the same size (a named dim is one size, the same wherever it "
                         f"appears, and only meets itself or an anonymous dim)")
    difference = add(a, mul(b, -1))
    if isinstance(difference, int):
        raise ShapeError(f"{what}: dim {dim_text(a)} meets dim {dim_text(b)}, and they cannot "
                         f"be the same size (they always differ by {abs(difference)})")
    sink = _recording.get()
    if sink is not None:
        sink.append(Constraint(a, b))
    return a if ra <= rb else b


def broadcast_dims(*all_dims, what: str = "shapes"):
    """NumPy broadcasting of dims tuples: a dim of 1 stretches; any two other dims of one axis
    are unified (:func:`unify`: a symbolic dim is never stretched)."""
    shaped = [dims for dims in all_dims if dims]   # a scalar broadcasts to anything
    if not shaped:
        return ()
    first = shaped[0]
    if all(dims is first or dims == first for dims in shaped):
        return first if type(first) is tuple else tuple(first)
    ndim = max((len(d) for d in all_dims), default=0)
    result = []
    for axis in range(ndim):
        dim = 1
        for dims in all_dims:
            offset = axis - (ndim - len(dims))
            if offset < 0:
                continue
            d = dims[offset]
            if d == 1:
                continue
            dim = d if dim == 1 else unify(dim, d, f"{what}, axis {axis}")
        result.append(dim)
    return tuple(result)


# --- JSON ------------------------------------------------------------------------------------------
def dim_to_json(dim):
    """A dim as JSON: an int as itself, ``{"name": "batch"}``, ``{"anonymous": 0}``,
    ``{"floordiv": [numerator, divisor]}`` or ``{"sum": [[[atom...], coefficient]...]}``."""
    if isinstance(dim, int):
        return dim
    if type(dim) is Symbol:
        return {"name": dim.name} if dim.name is not None else {"anonymous": dim.number}
    if type(dim) is FloorDiv:
        return {"floordiv": [dim_to_json(dim.numerator), dim.divisor]}
    return {"sum": [[[dim_to_json(a) for a in atoms], c] for atoms, c in dim.terms]}


def dim_from_json(obj, anonymous: dict):
    """The dim ``obj`` (from :func:`dim_to_json`) encodes; ``anonymous`` maps the numbers of
    one program's anonymous dims to their symbols (filled as they are met). A malformed
    ``obj`` is a ``ValueError``."""
    if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0:
        return obj
    if isinstance(obj, dict) and len(obj) == 1:
        (kind, body), = obj.items()
        if kind == "name" and isinstance(body, str) and body.isidentifier():
            return Symbol(body)
        if kind == "anonymous" and type(body) is int and body >= 0:
            if body not in anonymous:
                anonymous[body] = Symbol(None, body)
            return anonymous[body]
        if kind == "floordiv" and isinstance(body, list) and len(body) == 2 and \
                type(body[1]) is int and body[1] >= 1:
            return floordiv(dim_from_json(body[0], anonymous), body[1])
        if kind == "sum" and isinstance(body, list):
            total = 0
            for term in body:
                if not (isinstance(term, list) and len(term) == 2 and type(term[1]) is int
                        and isinstance(term[0], list)):
                    raise ValueError(f"malformed dim {obj!r}")
                total = add(total, mul(product(dim_from_json(a, anonymous) for a in term[0]),
                                       term[1]))
            return total
    raise ValueError(f"malformed dim {obj!r}")
