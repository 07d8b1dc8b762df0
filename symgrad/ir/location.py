"""The user's source line that built an op, for error messages and the printer."""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_internal_code: dict = {}  # code object -> whether it belongs to symgrad (or importlib)


def _is_internal(code) -> bool:
    internal = _internal_code.get(code)
    if internal is None:
        filename = code.co_filename
        internal = _internal_code[code] = (filename.startswith(_PACKAGE_DIR)
                                           or "importlib" in filename)
    return internal


def user_location() -> str | None:
    """Return ``"file.py:LINE"`` of the innermost stack frame outside the symgrad package.

    Walks frames iteratively with a per-code-object cache, so it can be called for every op
    built.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points at the caller's innermost frame
    outside the symgrad package (as :func:`user_location` finds it)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code):
        level, frame = level + 1, frame.f_back
    return level


def op_site(op) -> str:
    """The op as a run-time error names it: ``"take (built at prog.py:12)"``; a backward op
    also names its forward op (``"take_grad (backward of take, built at prog.py:12)"``, the
    line being the forward op's)."""
    notes = [f"backward of {op.forward_op.name}"] if op.forward_op is not None else []
    if op.loc:
        notes.append(f"built at {op.loc}")
    return f"{op.name} ({', '.join(notes)})" if notes else op.name
