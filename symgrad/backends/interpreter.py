"""The reference interpreter: runs the IR op by op with each OpDef's NumPy ``impl``.

It is the oracle every pass and backend is tested against, so it stays as simple as
possible: no fusion, no buffer reuse, float64 where the program says float64. A region op
runs by its OpDef's reference semantics (``Region.run``), which call back into
:func:`run_block` for its blocks; a block reads the Values of enclosing blocks from their
environments. An :class:`~symgrad.errors.IndexOutOfRangeError` a reference raises gets the
op's name and the line that built it in front of its message, as generated code writes it.

Sizes: a program with symbolic dims runs with the call's binding (``{symbol text: size}``,
made from the feeds before anything runs). A ``shape`` attribute's ``-1`` (``reshape``,
``broadcast_to``: "the run-time size") is replaced by the result's dim evaluated from the
binding, never inferred from the operand; every result's symbolic dims are checked against
the binding, and a fresh anonymous dim an op defines at run time (the one exception, see
:mod:`symgrad.backends.dim_code`) is bound from that op's result, for the ops after it.
"""
from __future__ import annotations

import collections
import functools

import numpy as np

from ..errors import FeedError, IndexOutOfRangeError
from ..ir.dims import Symbol, evaluate
from ..ir.graph import ancestors_of
from ..ir.location import op_site
from . import Backend
from .dim_code import RunTimeChecks


def needed_ops(program, fetches):
    """The ops the fetches depend on, in program order."""
    needed = ancestors_of(fetches)
    return [op for op in program.ops if op in needed]


def run_ops(ops, env, feeds=None, sizes=None, checks=None) -> None:
    """Run ``ops`` in order, storing every result in ``env``; ``feeds`` maps feedable Values
    to arrays; ``sizes`` (symbol -> size; None: no symbolic dims) is the binding, which the
    dims an op defines extend, each checked right away against what the program assumed of
    it (``checks``, a :class:`~.dim_code.RunTimeChecks`)."""
    for op in ops:
        if feeds and op.opdef.feedable and op.results[0] in feeds:
            outputs = (feeds[op.results[0]],)
        else:
            args = [env[v] for v in op.inputs]
            if op.blocks:
                outputs = op.opdef.region.run(
                    op, args, lambda block, arrays: run_block(block, arrays, env, sizes,
                                                              checks))
            else:
                attrs = op.attrs if sizes is None else _bound_attrs(op, sizes)
                try:
                    result = op.opdef.impl(*args, **attrs)
                except IndexOutOfRangeError as exc:
                    raise IndexOutOfRangeError(f"{op_site(op)}: {exc}") from None
                outputs = result if isinstance(result, tuple) else (result,)
        defined = set()
        for value, array in zip(op.results, outputs):
            array = _typed(array, value)
            if sizes is not None and value.dims is not value.shape:
                array = _check_dims(op, value, array, sizes, defined)
            env[value] = array
        if defined and checks is not None:
            _check_constraints(checks, defined, sizes)


def _bound_attrs(op, sizes) -> dict:
    """``op``'s attrs with a ``shape`` holding ``-1`` (a run-time size) given the result's
    sizes from the binding."""
    shape = op.attrs.get("shape")
    if not isinstance(shape, (tuple, list)) or -1 not in shape or len(op.results) != 1 \
            or len(shape) != op.results[0].ndim:
        return op.attrs
    bound = [evaluate(d, sizes) for d in op.results[0].dims]
    if None in bound:
        return op.attrs
    return {**op.attrs, "shape": tuple(bound)}


def _check_dims(op, value, array, sizes, defined):
    """``array``, checked against ``value``'s dims under the binding ``sizes`` (an empty
    array, such as the stack of a loop that ran no step, takes the shape the binding gives);
    binds the dims ``op`` defines (no size yet) from it, adding them to ``defined``."""
    if array.size == 0:
        bound = [evaluate(d, sizes) for d in value.dims]
        bound = [size if want is None else want for want, size in zip(bound, array.shape)]
        if 0 in bound:
            array = np.empty(bound, array.dtype)
    for axis, (dim, size) in enumerate(zip(value.dims, array.shape)):
        if isinstance(dim, int):
            continue
        want = evaluate(dim, sizes)
        if want is None:
            sizes[dim] = int(size)
            defined.add(dim)
        elif want != size:
            raise ValueError(f"{op_site(op)}: its result has {size} elements along axis "
                             f"{axis}, where the binding of the program's dims gives dim "
                             f"{dim} = {want}")
    return array


def _check_constraints(checks, defined, sizes) -> None:
    """Raise the FeedError of the first constraint on the dims ``defined`` that the sizes
    bound so far break."""
    def size(dim):
        return evaluate(dim, sizes)

    for constraint, op in checks.after(defined, lambda dim: size(dim) is not None):
        left, right = size(constraint.left), size(constraint.right)
        if left != right:
            raise FeedError(RunTimeChecks.message(constraint, op, defined) % (left, right))


def run_block(block, args, outer_env, sizes=None, checks=None) -> list:
    """Run ``block`` with its arguments bound to ``args``, reading captured Values from
    ``outer_env``; returns the yielded arrays. Dims defined inside stay inside."""
    env = collections.ChainMap({}, outer_env)
    for value, array in zip(block.args, args):
        env[value] = _typed(array, value)
    run_ops(block.ops, env, sizes=None if sizes is None else collections.ChainMap({}, sizes),
            checks=checks)
    return [env[v] for v in block.yields]


def _typed(array, value):
    array = np.asarray(array)
    if array.dtype != value.dtype:  # keep the IR's types exactly (NumPy scalars drift)
        array = array.astype(value.dtype)
    return array


def execute(ops, fetches, feeds, sizes=None, checks=None):
    """Run ``ops`` in order; ``feeds`` maps feedable Values to arrays, ``sizes`` symbols to
    their sizes (the binding), ``checks`` what ops assumed of the dims others define. Returns
    the fetches."""
    env: dict = {}
    run_ops(ops, env, feeds, sizes, checks)
    return [env[v] for v in fetches]


class InterpreterExecutable:
    """Backend executable: ``run(feeds_by_name, buffers=None, dims=None) -> list of arrays``
    (it writes nothing in place: ``buffers`` is ignored; ``dims``: the binding, ``{symbol
    text: size}``)."""

    backend = "interpreter"

    def __init__(self, program, fetches, options):
        self.program = program
        self.fetches = list(fetches)
        self.ops = needed_ops(program, self.fetches)
        self.kernels = {}
        self.stats = {"ops": len(self.ops)}
        self.numpy_module = None
        self.in_place = self.overwrites = ()
        self.symbols = {str(d): d for v in program.inputs for d in v.dims if type(d) is Symbol}
        self.checks = RunTimeChecks(program.dim_constraints)

    @functools.cached_property
    def source(self) -> str:
        """The program's text (printed when first asked for: the program is the compile's
        own copy, and most callers of the oracle never read it)."""
        return str(self.program)

    def run(self, feeds, buffers=None, dims=None):
        by_value = {}
        for op in self.ops:
            if op.opdef.feedable and op.attrs["name"] in feeds:
                by_value[op.results[0]] = feeds[op.attrs["name"]]
        sizes = None
        if dims is not None:
            sizes = {symbol: dims[text] for text, symbol in self.symbols.items()
                     if text in dims}
        return execute(self.ops, self.fetches, by_value, sizes, self.checks)


def build(program, fetches, options):
    return InterpreterExecutable(program, fetches, options)


# every op has a NumPy reference; the oracle runs the program exactly as it was built
BACKEND = Backend("interpreter", build, lowers=lambda opdef: True, default_passes=(),
                  generates_code=False)
