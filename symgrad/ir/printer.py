"""Readable text form of a program, one op a line::

    %0 = data {name="x"} : float32[?, 784]
    %x = ...                                  # named Values print with their name
    %12 = tanh(%7) : float32[?, 10]
    %20 = multiply(%19, %18) : float32[?, 10]  # backward of %12 = tanh(%7)
"""
from __future__ import annotations

import numpy as np

from .value import format_shape


def value_label(value) -> str:
    """``%7``, or ``%name`` for a Value the user named (``%"odd name"`` if not an identifier)."""
    name = value.name
    if not name:
        return f"%{value.id}"
    if name.isidentifier():
        return f"%{name}"
    return "%" + _quote(name)


def _quote(text: str) -> str:
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def format_attr(value) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 4:
            return np.array2string(value, separator=", ").replace("\n", "")
        return f"array<{value.dtype}{format_shape(value.shape)}>"
    if isinstance(value, np.dtype):
        return str(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (np.generic,)):
        return repr(value.item())
    return repr(value)


_IMPLIED_BY_RESULT_TYPE = ("shape", "dtype")


def format_attrs(attrs: dict, result=None) -> str:
    """``{k=v, ...}``; attrs starting with ``_`` are hidden, and so are a source op's
    ``shape``/``dtype``/``name`` when the result's type and label already show them."""
    shown = {k: v for k, v in attrs.items() if not k.startswith("_")}
    if result is not None and result.op.opdef.category == "source":
        for key in _IMPLIED_BY_RESULT_TYPE:
            shown.pop(key, None)
        if shown.get("name") == result.name and value_label(result)[1:] == result.name:
            shown.pop("name")
    if not shown:
        return ""
    return " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in shown.items()) + "}"


def counted(n: int, noun: str) -> str:
    """``1 op``, ``2 ops``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def format_op_head(op) -> str:
    """``%12 = tanh(%7)`` — the op without types, used in provenance comments."""
    results = ", ".join(value_label(v) for v in op.results)
    args = ", ".join(value_label(v) for v in op.inputs)
    return f"{results} = {op.name}({args})"


def format_op(op) -> str:
    types = ", ".join(v.type_str for v in op.results)
    result = op.results[0] if len(op.results) == 1 else None
    line = f"{format_op_head(op)}{format_attrs(op.attrs, result)} : {types}"
    if op.forward_op is not None:
        line += f"  # backward of {format_op_head(op.forward_op)}"
    return line


def format_program(program, annotate=None) -> str:
    """The whole program; ``annotate(op) -> str | None`` may add a trailing comment per op."""
    lines = [f"program #{program.uid} ({len(program.ops)} ops) {{"]
    for op in program.ops:
        line = "  " + format_op(op)
        if annotate is not None:
            extra = annotate(op)
            if extra:
                line += ("  " if op.forward_op is None else "; ") + \
                    ("# " if op.forward_op is None else "") + extra
        lines.append(line)
        for block in op.blocks:
            for inner in block.ops:
                lines.append("    " + format_op(inner))
    lines.append("}")
    return "\n".join(lines)
