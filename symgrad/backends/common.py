"""What every code generator shares: names, number text, the program's signature, versions.

Names: user names appear in generated code only as sanitized identifiers (ASCII letters,
digits and ``_``; never a keyword, a builtin or a name the module defines) or, verbatim, inside
string literals and comments written with ``ascii()``/:func:`comment`. Internal names start
with ``_``; sanitized user names never do, so the two cannot collide.
"""
from __future__ import annotations

import builtins
import functools
import keyword
import math

import jinja2
import numpy as np

from ..ops.state import split_state_fetches
from ..version import __version__

MAX_LENGTH = 40
# names generated modules define (the C backend's host module: also its ctypes binding)
MODULE_NAMES = {"np", "feeds", "run", "CONSTANTS", "INPUTS", "OUTPUTS", "RowPool", "ml_dtypes",
                "ctypes", "ENTRIES", "LIBRARY", "bind_library"}
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


# --- numbers ----------------------------------------------------------------------------------
def number_text(array: np.ndarray) -> str | None:
    """The shortest decimal text that reads back as the 0-d ``array``'s value in its own dtype
    (an int's digits; a float always with ``.``, ``e`` or ``n``), ``"True"``/``"False"`` for a
    bool; None for a float that is not finite (each language spells those its own way)."""
    dtype = array.dtype   # an extension dtype (bfloat16) is found by its name
    return _number_text(dtype.name if dtype.kind == "V" else dtype.str, array.tobytes())


@functools.lru_cache(maxsize=4096)
def _number_text(dtype: str, data: bytes) -> str | None:
    """:func:`number_text` of the 0-d array of ``dtype`` holding ``data`` (keyed by the bytes,
    so ``-0.0`` and ``0.0`` stay apart)."""
    array = np.frombuffer(data, dtype=dtype).reshape(())
    value = array[()]
    if array.dtype.kind == "b":
        return repr(bool(value))
    if array.dtype.kind in "iu":
        return repr(int(value))
    if not math.isfinite(float(value)):
        return None
    text = str(value)
    return text if any(c in text for c in ".en") else text + ".0"


# --- the program ------------------------------------------------------------------------------
def signature_literals(program, fetches):
    """``(inputs, outputs)``: the signature generated code states (name, shape with None for
    run-time dims, dtype, and for inputs ``"data"`` or ``"parameter"``); the outputs are the
    fetches before the state outputs (the new values of assigned parameters)."""
    fetches = split_state_fetches(program, fetches)[0]
    inputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "kind": kind}
              for kind, values in (("data", program.inputs), ("parameter", program.parameters))
              for v in values]
    outputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name} for v in fetches]
    return inputs, outputs


def cache_prefix(backend: str, program, fetches) -> str:
    """The readable part of a generated file's name: backend, first fetch, op count."""
    first = fetches[0].name if fetches and fetches[0].name else "program"
    return f"{backend}_{sanitize(first)}_{len(program.ops)}ops"


def library_version() -> str:
    return __version__


@functools.lru_cache(maxsize=None)
def template_environment(folder: str) -> jinja2.Environment:
    """The Jinja environment of the code templates in ``codegen_templates/<folder>`` (``"."``:
    all of them): an undefined name is an error, block tags leave no blank lines, nothing is
    escaped (the output is code)."""
    return jinja2.Environment(loader=jinja2.PackageLoader("codegen_templates", folder),
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
