"""The host layer every code generator shares.

A compiled program is a generated Python *host module*: it names values, frees buffers after
their last use, runs control flow as Python ``if``/``for``/``while``, keeps the program's state,
checks run-time dims, and calls opaque ops (matmul through NumPy's BLAS, conv, data movement)
through NumPy. This package writes that module (:mod:`.generator`, with :mod:`.regions`,
:mod:`.functions`, :mod:`.literals`, :mod:`.state_buffers`, :mod:`.ops_text`), holds the
NumPy lowering of every op (:mod:`.lowering`) and the chunked NumPy loop of a fused group
(:mod:`.chunks`), and ships the runtime helper generated modules import (:mod:`.row_pool`).

Each backend renders only its own groups, through one hook: a subclass of
:class:`~.generator.Generator` overrides :meth:`~.generator.Generator.lower_ops` (the C
backend turns runs of loop groups into C entry points, the CUDA backend launches kernels);
what it leaves is written as NumPy. The NumPy backend is this layer with no hook. No backend
imports another.
"""
from __future__ import annotations

from ...errors import GENERATED_CODE_ERRORS
from . import row_pool

# The package a generated module is executed in: its ``from .row_pool import RowPool`` reads
# this package's row_pool (an artifact ships a copy of that file: RUNTIME_MODULES).
PACKAGE = __name__
RUNTIME_MODULES = {"row_pool": row_pool}


def bind_references(module, references) -> None:
    """Give ``module`` the functions its helpers name by reference (``HelperReference``), and
    symgrad's own error classes in place of the NumPy-only stand-ins it defines
    (:data:`~symgrad.errors.GENERATED_CODE_ERRORS`)."""
    for name, reference in references.items():
        setattr(module, name, reference.function)
    for error in GENERATED_CODE_ERRORS:
        if error.__name__ in vars(module):
            setattr(module, error.__name__, error)


def lowers(opdef) -> bool:
    """Can the host module compute ``opdef`` (with NumPy)? Sources, and every op with a rule
    in the host's lowering table (region ops included)."""
    from ...ops.core import SOURCE
    from .lowering import LOWERINGS

    return opdef.category == SOURCE or LOWERINGS.lowers(opdef)
