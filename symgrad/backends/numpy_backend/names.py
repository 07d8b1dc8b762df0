"""Safe, readable Python identifiers for the generated module.

User names appear in generated code only as sanitized identifiers (ASCII letters, digits and
``_``; never a keyword, a builtin or a name the module defines) or, verbatim, inside string
literals and comments written with ``ascii()``/:func:`comment`. Internal names start with
``_``; sanitized user names never do, so the two cannot collide.
"""
from __future__ import annotations

import builtins
import keyword

MAX_LENGTH = 40
MODULE_NAMES = {"np", "feeds", "run", "CONSTANTS", "INPUTS", "OUTPUTS", "CHUNK"}
RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | MODULE_NAMES


def sanitize(name: str) -> str:
    """An identifier made from ``name`` (may still need a suffix to be unique)."""
    text = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    text = text.strip("_")[:MAX_LENGTH].rstrip("_")
    if not text or text[0].isdigit():
        text = "v_" + text
    return text


def comment(text: str) -> str:
    """``text`` made safe for a one-line ``#`` comment (ASCII, no line breaks)."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text.replace("\r", "\\r").replace("\n", "\\n")


class Namer:
    """Hands out unique identifiers; one name per Value id (fusion results share the id,
    hence the name, of the inner Value they export)."""

    def __init__(self, reserved=()):
        self.used = set(RESERVED) | set(reserved)
        self.by_id: dict[int, str] = {}

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.used:
            name = f"{base}_{n}"
            n += 1
        self.used.add(name)
        return name

    def value(self, value) -> str:
        name = self.by_id.get(value.id)
        if name is None:
            name = self.fresh(sanitize(value.name) if value.name else f"t{value.id}")
            self.by_id[value.id] = name
        return name
