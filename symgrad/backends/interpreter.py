"""The reference interpreter: runs the IR op by op with each OpDef's NumPy ``impl``.

It is the oracle every pass and backend is tested against, so it stays as simple as
possible: no fusion, no buffer reuse, float64 where the program says float64. A region op
runs by its OpDef's reference semantics (``Region.run``), which call back into
:func:`run_block` for its blocks; a block reads the Values of enclosing blocks from their
environments. An :class:`~symgrad.errors.IndexOutOfRangeError` a reference raises gets the
op's name and the line that built it in front of its message, as generated code writes it.
"""
from __future__ import annotations

import collections

import numpy as np

from ..errors import IndexOutOfRangeError
from ..ir.graph import ancestors_of
from ..ir.location import op_site
from . import Backend


def needed_ops(program, fetches):
    """The ops the fetches depend on, in program order."""
    needed = ancestors_of(fetches)
    return [op for op in program.ops if op in needed]


def run_ops(ops, env, feeds=None) -> None:
    """Run ``ops`` in order, storing every result in ``env``; ``feeds`` maps feedable Values
    to arrays."""
    for op in ops:
        if feeds and op.opdef.feedable and op.results[0] in feeds:
            outputs = (feeds[op.results[0]],)
        else:
            args = [env[v] for v in op.inputs]
            if op.blocks:
                outputs = op.opdef.region.run(
                    op, args, lambda block, arrays: run_block(block, arrays, env))
            else:
                try:
                    result = op.opdef.impl(*args, **op.attrs)
                except IndexOutOfRangeError as exc:
                    raise IndexOutOfRangeError(f"{op_site(op)}: {exc}") from None
                outputs = result if isinstance(result, tuple) else (result,)
        for value, array in zip(op.results, outputs):
            env[value] = _typed(array, value)


def run_block(block, args, outer_env) -> list:
    """Run ``block`` with its arguments bound to ``args``, reading captured Values from
    ``outer_env``; returns the yielded arrays."""
    env = collections.ChainMap({}, outer_env)
    for value, array in zip(block.args, args):
        env[value] = _typed(array, value)
    run_ops(block.ops, env)
    return [env[v] for v in block.yields]


def _typed(array, value):
    array = np.asarray(array)
    if array.dtype != value.dtype:  # keep the IR's types exactly (NumPy scalars drift)
        array = array.astype(value.dtype)
    return array


def execute(ops, fetches, feeds):
    """Run ``ops`` in order; ``feeds`` maps feedable Values to arrays. Returns the fetches."""
    env: dict = {}
    run_ops(ops, env, feeds)
    return [env[v] for v in fetches]


class InterpreterExecutable:
    """Backend executable: ``run(feeds_by_name, buffers=None) -> list of arrays`` (it writes
    nothing in place: ``buffers`` is ignored)."""

    backend = "interpreter"

    def __init__(self, program, fetches, options):
        self.program = program
        self.fetches = list(fetches)
        self.ops = needed_ops(program, self.fetches)
        self.source = str(program)
        self.kernels = {}
        self.stats = {"ops": len(self.ops)}
        self.numpy_module = None
        self.in_place = self.overwrites = ()

    def run(self, feeds, buffers=None):
        by_value = {}
        for op in self.ops:
            if op.opdef.feedable and op.attrs["name"] in feeds:
                by_value[op.results[0]] = feeds[op.attrs["name"]]
        return execute(self.ops, self.fetches, by_value)


def build(program, fetches, options):
    return InterpreterExecutable(program, fetches, options)


# every op has a NumPy reference; the oracle runs the program exactly as it was built
BACKEND = Backend("interpreter", build, lowers=lambda opdef: True, default_passes=(),
                  generates_code=False)
