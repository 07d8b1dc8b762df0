"""The user's source line that built an op, for error messages and the printer."""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str | None:
    """Return ``"file.py:LINE"`` of the innermost stack frame outside the symgrad package.

    Walks frames iteratively (cheap: a few attribute reads a frame), so it can be called
    for every op built.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and "importlib" not in filename:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None
