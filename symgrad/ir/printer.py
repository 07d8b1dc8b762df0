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


_IMPLIED_BY_RESULT_TYPE = ("shape", "dtype", "names")


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


def explicit_count(op) -> int:
    """How many of a region op's inputs are its explicit operands (the rest are captures)."""
    explicit = getattr(op.opdef, "explicit_inputs", None)
    return len(op.inputs) if explicit is None else explicit(op.attrs)


def format_op_head(op) -> str:
    """``%12 = tanh(%7)`` — the op without types, used in provenance comments. A control-flow
    op (a region op with named blocks) shows its captures apart: ``%9 = scan(%1, %2)
    captures(%w)``."""
    results = ", ".join(value_label(v) for v in op.results)
    named = getattr(op.opdef, "block_names", ())
    count = explicit_count(op) if named else len(op.inputs)
    args = ", ".join(value_label(v) for v in op.inputs[:count])
    head = f"{results} = {op.name}({args})"
    if count < len(op.inputs):
        head += " captures(" + ", ".join(value_label(v) for v in op.inputs[count:]) + ")"
    return head


def _notes(op) -> list[str]:
    """The comments of ``op``'s line: its provenance, and how reverse mode differentiates it
    (``twin of %12, _``: one entry per result; ``passes cotangents``)."""
    notes = []
    if op.forward_op is not None:
        notes.append(f"backward of {format_op_head(op.forward_op)}")
    if op.twin_of is not None:
        notes.append("twin of " + ", ".join("_" if v is None else value_label(v)
                                            for v in op.twin_of))
    if op.passes_cotangents:
        notes.append("passes cotangents")
    return notes


def format_op(op) -> str:
    types = ", ".join(v.type_str for v in op.results)
    result = op.results[0] if len(op.results) == 1 else None
    line = f"{format_op_head(op)}{format_attrs(op.attrs, result)} : {types}"
    notes = _notes(op)
    if notes:
        line += "  # " + "; ".join(notes)
    return line


def format_block_header(op, index) -> str | None:
    """``body(%2 : float32[3], %3 : float32[4]):`` for block ``index`` of region op ``op``, or
    None for an unnamed block without arguments (a fused group's)."""
    block = op.blocks[index]
    names = getattr(op.opdef, "block_names", ())
    if index >= len(names) and not block.args:
        return None
    name = names[index] if index < len(names) else f"block{index}"
    args = ", ".join(f"{value_label(a)} : {a.type_str}" for a in block.args)
    return f"{name}({args}):"


def format_yield(block) -> str:
    return "yield " + ", ".join(value_label(v) for v in block.yields)


def format_ops(ops, indent="  ", annotate=None) -> list[str]:
    """The lines of ``ops``, nested blocks indented under their op (a header naming the block
    and its arguments, its ops, then ``yield ...``). Recursion is over nesting depth only."""
    lines = []
    for op in ops:
        line = indent + format_op(op)
        if annotate is not None:
            extra = annotate(op)
            if extra:
                line += ("; " if _notes(op) else "  # ") + extra
        lines.append(line)
        for index, block in enumerate(op.blocks):
            header = format_block_header(op, index)
            inner = indent + "  "
            if header is not None:
                lines.append(inner + header)
                inner += "  "
            lines.extend(format_ops(block.ops, inner, annotate))
            if block.yields:
                lines.append(inner + format_yield(block))
    return lines


def format_program(program, annotate=None) -> str:
    """The whole program; ``annotate(op) -> str | None`` may add a trailing comment per op."""
    lines = [f"program #{program.uid} ({len(program.ops)} ops) {{"]
    lines.extend(format_ops(program.ops, "  ", annotate))
    lines.append("}")
    return "\n".join(lines)
