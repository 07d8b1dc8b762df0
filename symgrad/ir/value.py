"""``Value``: a typed SSA value of a program.

A Value is either the result of exactly one :class:`~symgrad.ir.operation.Operation` (``op``
is that operation, ``index`` the result position) or an argument of a
:class:`~symgrad.ir.program.Block` (``op`` is None, ``arg_of`` is the block, ``index`` the
argument position). Its ``dims`` are ints and symbolic dims (:mod:`symgrad.ir.dims`: named
symbols, anonymous ones, expressions); its ``shape`` shows every symbolic dim as ``None``
(size known only at run time). Values are hashed by identity and ``bool(value)`` raises, because ``==`` builds an
elementwise op as in NumPy.

The IR layer defines no arithmetic: the ops package installs Value's operators (``+``, ``@``,
``[...]``, ``.sum()``...) when it is imported (:mod:`symgrad.ops.operators`).
"""
from __future__ import annotations

import numpy as np


def format_shape(shape) -> str:
    """``[?, 784]`` for a shape; a dims tuple reads ``[batch, 784]``."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# the dims tuple split last and its shape, one pair replaced whole (threads may build programs)
_last_split = ((), ())


def split_dims(program, dims) -> tuple[tuple, tuple]:
    """``(shape, dims)`` of a declared or inferred ``dims`` sequence (ints, symbolic dims, or
    None for a fresh anonymous dim of ``program``)."""
    global _last_split
    last = _last_split
    if dims is last[0]:
        return last[1], dims
    if type(dims) is not tuple:
        dims = tuple(dims)
    shape = tuple([d if type(d) is int else None for d in dims])
    if None not in shape:
        return dims, dims
    if None in dims:
        dims = tuple([program.fresh_dim() if d is None else d for d in dims])
    else:
        _last_split = (dims, shape)   # ops of a chain share one dims tuple
    return shape, dims


class Value:
    """A typed SSA value: ``dims`` (a tuple of ints and symbolic dims: ``batch``, ``?0``,
    ``batch*784``), ``shape`` (the same with ``None`` for every symbolic dim), ``dtype`` (a NumPy dtype), ``name`` (None unless the user named it),
    ``stop_gradient``, ``grad`` (set by ``grad(..., set_grad=True)`` or ``retain_grad``) and
    ``op``, the operation that defines it (None for a block argument, whose block is
    ``arg_of``). ``bool(value)`` raises and hashing is by identity.

    Operators build ops, NumPy style: ``+ - * / ** @``, unary ``-``, ``abs()``, comparisons
    ``== != < <= > >=``, ``& | ~`` and indexing ``x[1:3, ::2]``; so do the methods ``.T``,
    ``.sum(axis=None, keepdims=False)`` (likewise ``.mean .max .min .prod``),
    ``.reshape(*shape)``, ``.transpose(*axes)`` and ``.astype(dtype)``. They are installed by
    the op library (:mod:`symgrad.ops.operators`) when ``symgrad`` is imported."""

    __slots__ = ("program", "id", "shape", "dims", "dtype", "name", "stop_gradient", "op",
                 "index", "grad", "arg_of", "__weakref__")

    def __init__(self, program, id, shape, dtype, op=None, index=0, name=None,
                 stop_gradient=False, arg_of=None):
        """``shape``: the dims (ints, symbolic dims, or None for a fresh anonymous dim)."""
        self.program = program
        self.id = id
        self.shape, self.dims = split_dims(program, shape)
        self.dtype = dtype if type(dtype) is np.dtype or isinstance(dtype, np.dtype) \
            else np.dtype(dtype)
        self.op = op
        self.index = index
        self.name = name
        self.stop_gradient = stop_gradient
        self.grad = None
        self.arg_of = arg_of

    # --- type queries -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The rank (``len(shape)``)."""
        return len(self.shape)

    @property
    def type_str(self) -> str:
        """The type as the printer shows it: ``float32[batch, 784]``."""
        return f"{self.dtype}{format_shape(self.dims)}"

    @property
    def size(self):
        """Number of elements, or ``None`` when a dim is unknown."""
        n = 1
        for d in self.shape:
            if d is None:
                return None
            n *= d
        return n

    @property
    def block(self):
        """The block that defines this Value (its op's block, or the block it is an
        argument of)."""
        op = self.op
        return op.block if op is not None else self.arg_of

    def __repr__(self) -> str:
        label = f"%{self.id}" + (f" ({self.name})" if self.name else "")
        return f"Value({label} : {self.type_str})"

    # --- identity semantics --------------------------------------------------------------
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(
            "the truth value of a symgrad Value is unknown until the program runs; "
            "use sg.where / comparisons as ops (sg.cond for control flow), and key tables "
            "by identity")

    def __len__(self):
        if not self.shape or self.shape[0] is None:
            raise TypeError(f"len() of {self!r} is not known statically")
        return self.shape[0]

    def __iter__(self):
        raise TypeError("a symgrad Value is not iterable; index it or use sg.split (vjp, jvp, "
                        "jacobian and hessian give a single Value for a single Value argument, "
                        "and a list or tuple for a list or tuple: pass a one-element list to "
                        "unpack one result)")

    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our operators
