"""Declared options: each compile option is an :class:`Option` with a type, a default and a
docstring, declared by the layer that reads it (the pass pipeline, or one backend).

:class:`~symgrad.runtime.options.CompileOptions`, the artifact loader and the CLI validate
options from these declarations alone, so a backend's new option needs no change anywhere
else. An unknown name gets a "did you mean" (:func:`unknown_name_message`).
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: ``kind`` is the type its value must have (``bool`` is never taken for
    ``int``); ``nullable`` also admits ``None``; ``minimum`` bounds an ``int``; ``choices`` lists
    the values allowed; ``sequence`` makes it a sequence (a tuple, given as a list or tuple) of
    that type. ``doc`` is the text
    the docs and ``help`` show. ``in_cache_key=False``: the option does not change the code
    that is generated (where to cache it, say)."""

    name: str
    kind: type
    default: Any
    doc: str
    nullable: bool = False
    minimum: int | None = None
    sequence: bool = False
    choices: tuple | None = None
    in_cache_key: bool = True

    def problem(self, value) -> str | None:
        """Why ``value`` is not a valid value of this option (None: it is)."""
        if value is None:
            return None if self.nullable else "must not be None"
        items = value if self.sequence else (value,)
        if self.sequence and not isinstance(value, (list, tuple)):
            return f"must be a list or tuple of {self.kind.__name__}"
        for item in items:
            if type(item) is not self.kind and not (self.kind is float and type(item) is int):
                return f"must be {'a list of ' if self.sequence else ''}{self.kind.__name__}" \
                       f"{' or None' if self.nullable else ''}, got {type(item).__name__}"
            if self.minimum is not None and item < self.minimum:
                return f"must be at least {self.minimum}, got {item!r}"
            if self.choices is not None and item not in self.choices:
                return unknown_name_message("value", item, self.choices)
        return None

    def normalized(self, value):
        """``value`` in the form the option keeps (a sequence as a tuple)."""
        return tuple(value) if self.sequence and value is not None else value


def unknown_name_message(what: str, name, known) -> str:
    """``unknown option 'chunksize'; did you mean 'chunk_size'? (known: ...)``"""
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {name!r}{hint} (choose from {', '.join(known)})"
