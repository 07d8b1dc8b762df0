"""Per-op text shared by the module generator and the group lowering."""
from __future__ import annotations

import functools

from ...ir.location import op_site
from ...ir.printer import format_op_head
from ..common import comment
from .lowering import rule_of


def visible_attrs(op) -> dict:
    return {k: v for k, v in op.attrs.items() if not k.startswith("_")}


def numpy_emitter(op, dim_code=None, over_rows=None, pool=None):
    """The emitter of ``op``'s NumPy lowering (see :mod:`.lowering`); one that declares
    ``wants_types`` also gets the op's result types as ``types=[(shape, dtype), ...]`` (a
    custom op checks its forward's results), one that declares ``wants_site`` the op's name
    and line as ``site=`` (:func:`~symgrad.ir.location.op_site`, for run-time errors), one
    that declares ``wants_shapes`` the source of every dim of its inputs and results as
    ``shapes=([[dim source, ...] per input], [... per result])``, rendered by ``dim_code``
    from the binding (:mod:`symgrad.backends.dim_code`), one that declares ``wants_rows`` the
    ``over_rows`` source given here (None: the helper's own serial default), one that has
    ``pool_helpers`` the module's pool source ``pool`` given here (None: no pool)."""
    emitter = rule_of(op).emit
    extra = {}
    if getattr(emitter, "wants_shapes", False):
        extra["shapes"] = ([[dim_code(d) for d in v.dims] for v in op.inputs],
                           [[dim_code(d) for d in v.dims] for v in op.results])
    if getattr(emitter, "wants_types", False):
        extra["types"] = [(v.shape, v.dtype) for v in op.results]
    if getattr(emitter, "wants_site", False):
        extra["site"] = op_site(op)
    if over_rows is not None and getattr(emitter, "wants_rows", False):
        extra["over_rows"] = over_rows
    if pool is not None and hasattr(emitter, "pool_helpers"):
        extra["pool"] = pool
    return functools.partial(emitter, **extra) if extra else emitter


class OpText:
    """The comments naming ops in one generated module; each op's head (``%5 = tanh(%4)``) is
    formatted once, however many backward ops name it as their forward op."""

    def __init__(self):
        self.heads: dict = {}

    def head(self, op) -> str:
        text = self.heads.get(op)
        if text is None:
            text = self.heads[op] = format_op_head(op)
        return text

    def describe(self, op) -> str:
        """``%5 = tanh(%4); backward of %3 = tanh(%2)``, safe inside a comment."""
        text = self.head(op)
        if op.forward_op is not None:
            text += f"; backward of {self.head(op.forward_op)}"
        return comment(text)

    def trailing(self, op) -> str:
        """``  # %5 = tanh(%4); backward of %3 = tanh(%2)``: the comment ending a statement."""
        return "  # " + self.describe(op)

    def provenance(self, op) -> str:
        """``  # backward of %12 = tanh(%7)`` for a backward op, else ``""``."""
        if op.forward_op is None:
            return ""
        return "  # " + comment(f"backward of {self.head(op.forward_op)}")

    def line(self, op) -> str:
        """``# %5 = tanh(%4)``: a comment line naming the op."""
        return "# " + comment(self.head(op))
