"""``Value``: a typed SSA value of a program, with NumPy-style operators.

A Value is the result of exactly one :class:`~symgrad.ir.operation.Operation`. Its shape is a
tuple whose entries are ints or ``None`` (size known only at run time). Values are hashed by
identity and ``bool(value)`` raises, because ``==`` builds an elementwise op as in NumPy.
"""
from __future__ import annotations

import numpy as np

_ops_module = None


def _ops():
    """The op front end (imported late: the IR layer must not import ops at load time)."""
    global _ops_module
    if _ops_module is None:
        import symgrad.ops as module

        _ops_module = module
    return _ops_module


def format_shape(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class Value:
    """A typed SSA value: ``shape`` (a tuple of ints, ``None`` for a dim known only at run
    time), ``dtype`` (a NumPy dtype), ``name`` (None unless the user named it),
    ``stop_gradient``, ``grad`` (set by ``grad(..., set_grad=True)`` or ``retain_grad``) and
    ``op``, the operation that defines it. Operators build ops (``+ - * / ** @``, comparisons,
    ``[...]``); ``bool(value)`` raises and hashing is by identity."""

    __slots__ = ("program", "id", "shape", "dtype", "name", "stop_gradient", "op",
                 "index", "grad", "__weakref__")

    def __init__(self, program, id, shape, dtype, op=None, index=0, name=None,
                 stop_gradient=False):
        self.program = program
        self.id = id
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.dtype = dtype if type(dtype) is np.dtype or isinstance(dtype, np.dtype) \
            else np.dtype(dtype)
        self.op = op
        self.index = index
        self.name = name
        self.stop_gradient = stop_gradient
        self.grad = None

    # --- type queries -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def type_str(self) -> str:
        return f"{self.dtype}{format_shape(self.shape)}"

    @property
    def size(self):
        """Number of elements, or ``None`` when a dim is unknown."""
        n = 1
        for d in self.shape:
            if d is None:
                return None
            n *= d
        return n

    def __repr__(self) -> str:
        label = f"%{self.id}" + (f" ({self.name})" if self.name else "")
        return f"Value({label} : {self.type_str})"

    # --- identity semantics --------------------------------------------------------------
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(
            "the truth value of a symgrad Value is unknown until the program runs; "
            "use sg.where / comparisons as ops, and key tables by identity")

    def __len__(self):
        if not self.shape or self.shape[0] is None:
            raise TypeError(f"len() of {self!r} is not known statically")
        return self.shape[0]

    def __iter__(self):
        raise TypeError("a symgrad Value is not iterable; index it or use sg.split")

    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our operators

    # --- operators -----------------------------------------------------------------------
    def __add__(self, other): return _ops().add(self, other)
    def __radd__(self, other): return _ops().add(other, self)
    def __sub__(self, other): return _ops().subtract(self, other)
    def __rsub__(self, other): return _ops().subtract(other, self)
    def __mul__(self, other): return _ops().multiply(self, other)
    def __rmul__(self, other): return _ops().multiply(other, self)
    def __truediv__(self, other): return _ops().divide(self, other)
    def __rtruediv__(self, other): return _ops().divide(other, self)
    def __pow__(self, other): return _ops().power(self, other)
    def __rpow__(self, other): return _ops().power(other, self)
    def __matmul__(self, other): return _ops().matmul(self, other)
    def __rmatmul__(self, other): return _ops().matmul(other, self)
    def __neg__(self): return _ops().negative(self)
    def __pos__(self): return self
    def __abs__(self): return _ops().abs(self)
    def __eq__(self, other): return _ops().equal(self, other)
    def __ne__(self, other): return _ops().not_equal(self, other)
    def __lt__(self, other): return _ops().less(self, other)
    def __le__(self, other): return _ops().less_equal(self, other)
    def __gt__(self, other): return _ops().greater(self, other)
    def __ge__(self, other): return _ops().greater_equal(self, other)
    def __and__(self, other): return _ops().logical_and(self, other)
    def __or__(self, other): return _ops().logical_or(self, other)
    def __invert__(self): return _ops().logical_not(self)
    def __getitem__(self, index): return _ops().getitem(self, index)

    # --- methods -------------------------------------------------------------------------
    @property
    def T(self):
        return _ops().transpose(self)

    def sum(self, axis=None, keepdims=False): return _ops().sum(self, axis=axis, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return _ops().mean(self, axis=axis, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _ops().max(self, axis=axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _ops().min(self, axis=axis, keepdims=keepdims)
    def prod(self, axis=None, keepdims=False): return _ops().prod(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        return _ops().reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = axes[0]
        return _ops().transpose(self, axes or None)

    def astype(self, dtype): return _ops().cast(self, dtype)
