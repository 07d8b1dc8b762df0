"""The module-level functions of a generated module, each written once.

A fused group lowers to one or two functions (:mod:`.group`); a region nested too deep to
write inline lowers to one (:mod:`.regions`), never shared. Programs with repeated structure
(unrolled loops, stacked layers, long chains) produce many groups whose functions are the same
code up to the names of the group's own values. :class:`FunctionTable` keeps the first such
group's functions and has the later ones call them, so that Python compiles each distinct
function once::

    # fused group 7 (64 ops, chunked) -> %456 (runs _group4: the same code as fused group 4)
    t456 = _group4(t392, t107, t105, ...)

The lowering writes every name of the group's own things (parameters, values, scratch buffers,
the functions themselves) as a placeholder ``\\x01N\\x02``, N counting the names in the order
the lowering asks for them (:class:`Placeholders`), and leaves comments and docstrings to be
rendered later (:class:`Commented`). Two groups share when that text is equal: equal text with
different names filled in is the same function up to renaming its locals, so sharing never
changes what runs. Only the functions written out get their names filled in and their
comments rendered. Before rendering, a group is looked up by its *structure* (see
``group._Lowering.structure``): one whose structure was seen reuses that group's functions
without rendering; the test suite renders them anyway and checks that the code is the same
(``group.CHECK_STRUCTURES``).
"""
from __future__ import annotations

import dataclasses
import re
import textwrap
from typing import Callable

from ..common import docstring_line

DOC_WIDTH = 92
_PLACEHOLDER = re.compile("\x01([0-9]+)\x02")


class Placeholders:
    """Placeholders ``\\x01N\\x02`` for the names a group's functions use; ``names[N]`` is the
    name filled in when the function is written out."""

    def __init__(self):
        self.names: list[str] = []
        self.numbers: dict[str, str] = {}

    def of(self, name: str) -> str:
        placeholder = self.numbers.get(name)
        if placeholder is None:
            placeholder = self.numbers[name] = f"\x01{len(self.names)}\x02"
            self.names.append(name)
        return placeholder


def fill(text: str, names: list) -> str:
    """``text`` with every placeholder replaced by its name."""
    return _PLACEHOLDER.sub(lambda match: names[int(match[1])], text) if "\x01" in text \
        else text


class Commented:
    """A statement whose trailing comment (``note(op)``, e.g. ``"  # %5 = tanh(%4)"``) is
    rendered only when the statement is written out. ``code`` may be empty (a comment line)."""

    __slots__ = ("code", "note", "op")

    def __init__(self, code: str, note: Callable, op):
        self.code, self.note, self.op = code, note, op

    def __str__(self) -> str:
        return self.code + self.note(self.op)

    __format__ = object.__format__   # f"{line}" renders str(line)


def indented(line, prefix: str = "    "):
    """``line`` (``str`` or :class:`Commented`) with ``prefix`` before its code."""
    if isinstance(line, Commented):
        return Commented(prefix + line.code, line.note, line.op)
    return prefix + line


def wrap_doc(text: str) -> list[str]:
    """``text`` as docstring lines of at most :data:`DOC_WIDTH` characters."""
    return textwrap.wrap(docstring_line(text), DOC_WIDTH, break_long_words=False,
                         break_on_hyphens=False) or [""]


@dataclasses.dataclass
class Function:
    """``def name(params): doc; body`` with placeholders for ``names`` in its code; ``doc``
    is a zero-argument callable returning the docstring text, ``body`` lines are ``str`` or
    :class:`Commented`."""

    name: str
    params: list
    doc: Callable[[], str]
    body: list
    names: list

    def code(self) -> str:
        """What the function does, with placeholders (no docstring, no comments)."""
        body = "\n".join(line.code if isinstance(line, Commented) else line
                         for line in self.body)
        return f"def {self.name}({', '.join(self.params)}):\n{body}"

    def lines(self, note: str = "") -> list[str]:
        """The function's source lines, names filled in, ``note`` ending its docstring."""
        lines = [fill(f"def {self.name}({', '.join(self.params)}):", self.names)]
        doc_lines = self.doc().split("\n") + (["", *note.split("\n")] if note else [])
        if len(doc_lines) == 1:
            lines.append(f'    """{doc_lines[0]}"""')
        else:
            lines.append(f'    """{doc_lines[0]}')
            lines.extend(f"    {line}" if line else "" for line in doc_lines[1:-1])
            lines.append(f'    {doc_lines[-1]}"""')
        for line in self.body:
            if isinstance(line, Commented):
                text = fill(line.code, self.names) + line.note(line.op)
            else:
                text = fill(line, self.names)
            lines.append(f"    {text}" if text else "")
        return lines


def _ranges(numbers) -> str:
    """``1, 3-6, 9``."""
    spans = []
    for n in numbers:
        if spans and spans[-1][1] == n - 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclasses.dataclass
class _Entry:
    functions: list      # the first group's functions; the last one is the one ``run`` calls
    group: int
    code: str            # the functions' code with placeholders: what sharing compares
    sharers: list = dataclasses.field(default_factory=list)

    def share(self, group: int) -> tuple[str, int]:
        self.sharers.append(group)
        main = self.functions[-1]
        return fill(main.name, main.names), self.group


def _code(functions) -> str:
    return "\n".join(function.code() for function in functions)


class FunctionTable:
    """The module's group functions, each distinct one kept once (see the module docstring).

    Groups are looked up twice: by *structure* first (what the lowering computes from the IR
    before rendering anything, :meth:`reuse`), then, once rendered, by code (:meth:`add`)."""

    def __init__(self):
        self.entries: list[_Entry] = []
        self.by_code: dict[str, _Entry] = {}
        self.by_structure: dict = {}

    def reuse(self, structure, group: int) -> tuple[str | None, int | None]:
        """``(name run calls, group it belongs to)`` when a group of this ``structure`` was
        added, else ``(None, None)``: then render the functions and :meth:`add` them."""
        entry = self.by_structure.get(structure)
        return (None, None) if entry is None else entry.share(group)

    def add(self, functions, group: int, structure=None) -> tuple[str, int | None]:
        """Record fused group ``group``'s ``functions``. Returns the name ``run`` calls and the
        group whose functions that is (None: this group's own)."""
        code = _code(functions)
        entry = self.by_code.get(code)
        if entry is not None:
            if structure is not None:
                self.by_structure.setdefault(structure, entry)
            return entry.share(group)
        entry = self.by_code[code] = _Entry(list(functions), group, code)
        if structure is not None:
            self.by_structure[structure] = entry
        self.entries.append(entry)
        main = functions[-1]
        return fill(main.name, main.names), None

    def add_unshared(self, function) -> None:
        """Record a function that no fused group shares (a region written as a function)."""
        self.entries.append(_Entry([function], None, function.code()))

    def check(self, functions, structure) -> None:
        """Assert that ``functions``, rendered for a group whose structure was found, are
        the code recorded for that structure."""
        expected = self.by_structure[structure].code
        if _code(functions) != expected:
            raise AssertionError("two fused groups of equal structure rendered different code:"
                                 f"\n{_code(functions)}\n---\n{expected}")

    def lines(self) -> list[list[str]]:
        """The source lines of each function to write, in the order first added."""
        out = []
        for entry in self.entries:
            *workers, main = entry.functions
            out.extend(worker.lines() for worker in workers)
            many = len(entry.sharers) > 1
            note = "\n".join(wrap_doc(
                f"Fused group{'s' if many else ''} {_ranges(entry.sharers)} "
                f"run{'' if many else 's'} this function too (the same code on their own "
                f"values).")) if entry.sharers else ""
            out.append(main.lines(note))
        return out
