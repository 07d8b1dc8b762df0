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
MODULE_NAMES = {"np", "feeds", "run", "CONSTANTS", "INPUTS", "OUTPUTS", "RowPool"}
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


def docstring_line(text: str) -> str:
    """``text`` made safe for one line inside a ``\"\"\"`` docstring (no line breaks, quotes
    and backslashes escaped)."""
    return comment(text).replace("\\", "\\\\").replace('"', '\\"')


class Namer:
    """Hands out unique identifiers; one name per Value id (fusion results share the id,
    hence the name, of the inner Value they export)."""

    def __init__(self, reserved=()):
        self.used = set(RESERVED) | set(reserved)
        self.by_id: dict[int, str] = {}
        self.next_suffix: dict[str, int] = {}   # base -> first suffix not yet tried

    def fresh(self, base: str) -> str:
        """``base``, or ``base_N`` with the smallest N not tried before for ``base``
        (amortized O(1): each base remembers where its search stopped)."""
        name = base
        if name in self.used:
            n = self.next_suffix.get(base, 1)
            name = f"{base}_{n}"
            while name in self.used:
                n += 1
                name = f"{base}_{n}"
            self.next_suffix[base] = n + 1
        self.used.add(name)
        return name

    def value(self, value) -> str:
        name = self.by_id.get(value.id)
        if name is None:
            name = self.fresh(sanitize(value.name) if value.name else f"t{value.id}")
            self.by_id[value.id] = name
        return name
