"""Per-op text shared by the module generator and the group lowering."""
from __future__ import annotations

from ...ir.printer import format_op_head
from .names import comment


def provenance(op) -> str:
    """``# backward of %12 = tanh(%7)`` for a backward op, else ``""``."""
    if op.forward_op is None:
        return ""
    return "  # " + comment(f"backward of {format_op_head(op.forward_op)}")


def visible_attrs(op) -> dict:
    return {k: v for k, v in op.attrs.items() if not k.startswith("_")}


def numpy_emitter(op):
    emitter = op.opdef.emitters.get("numpy")
    if emitter is None:
        raise NotImplementedError(f"op {op.name!r} has no NumPy emitter; register "
                                  f"emitters={{'numpy': ...}} on its OpDef")
    return emitter


def op_comment(op) -> str:
    """``# %5 = tanh(%4)``: a comment line naming the op."""
    return "# " + comment(format_op_head(op))


def describe(op) -> str:
    """``%5 = tanh(%4); backward of %3 = tanh(%2)``, safe inside a comment."""
    text = format_op_head(op)
    if op.forward_op is not None:
        text += f"; backward of {format_op_head(op.forward_op)}"
    return comment(text)


def trailing(op) -> str:
    """``  # %5 = tanh(%4); backward of %3 = tanh(%2)``: the comment ending a statement."""
    return "  # " + describe(op)

