"""A program's C, cut into functions and translation units of bounded size.

gcc's time and memory grow faster than linearly with the size of one function, and with the
size of one translation unit. So no generated C function or unit grows with the program:

- A segment's members (loop groups, native ops, row ops) are called from *step* functions of
  at most :data:`STEP_STATEMENTS` statements each (:func:`steps_of`; a member's call and each
  list of temporaries it allocates count one), which the segment's entry calls in turn (see
  :mod:`.segments`).
- A program whose C has more than :data:`UNIT_LINES` lines or :data:`UNIT_FUNCTIONS` functions
  becomes several translation units (:func:`units_of`): the runtime (the prelude with its
  definitions, the same for every program: compiled once per toolchain), units of the
  members' functions (up to :data:`UNIT_LINES` lines), and units of glue, the steps and then
  the segments' entries (up to :data:`GLUE_LINES`), each in the program's order. A unit
  declares the
  functions of other units it calls (hidden externals, ``SG_LINK``). The compiler compiles the
  units in parallel, caches each unit's object file by the hash of its text and flags, and
  links them (:mod:`.compiler`): a program that shares units with one compiled before reuses
  them.

:func:`joined` is the program's readable C, ``fn.source``: the units one after the other, each
under a header naming it. It is also one valid C file (the prelude and the functions are
guarded), which the C backend compiles whole where a program fits one unit.

The bounds, measured on the W4 chains of ``benchmarks/cpu.py`` (gcc 12, 2 cores): a compiler
process costs about 0.04 s before its first line (the prelude), a group function about 0.05 s
at ``-O3``, glue about 0.1 ms a line at ``-O0`` (3x less than at ``-O3``, and its speed does
not matter: it only allocates, calls and checks). Units of 1,000 lines of group functions
keep two compiler processes busy from the 1,000-op chain on (0.46 s of compiler time in 5
units, against 0.67 s as one file); glue units of 4,000 lines keep the processes' fixed cost
near a tenth of the 100,000-op chain's 6.4 s (96 units of 1,000 lines took 8.3 s). No process
went above 80 MB.
"""
from __future__ import annotations

import dataclasses

STEP_STATEMENTS = 128     # statements of one step function (at least one group each)
UNIT_LINES = 1000         # lines of one translation unit (at least one function each)
GLUE_LINES = 4000         # lines of one unit of glue (compiled at a lower optimization level)
UNIT_FUNCTIONS = 400      # functions of one translation unit


@dataclasses.dataclass(frozen=True)
class Piece:
    """One function of a program's C: its ``code``; for a function that other units may call,
    its ``name`` and ``declaration``; the names of the program's functions it ``calls``;
    ``native``: it needs ``c/native.h.j2``."""

    code: str
    name: str = ""
    declaration: str = ""
    calls: tuple = ()
    native: bool = False

    @property
    def lines(self) -> int:
        return self.code.count("\n") + 1


def guarded(name: str, code: str) -> str:
    """``code``, defining function ``name``, guarded so that a C file defines it once (the
    sources of several programs compiled together may each hold it)."""
    return f"#ifndef {name.upper()}\n#define {name.upper()}\n{code}\n#endif"


def steps_of(costs) -> list[list[int]]:
    """The indices ``0..len(costs)-1`` cut into consecutive runs of total cost at most
    :data:`STEP_STATEMENTS` (a run of one when a cost alone is above it)."""
    runs, total = [], 0
    for index, cost in enumerate(costs):
        if not runs or total + cost > STEP_STATEMENTS:
            runs.append([])
            total = 0
        runs[-1].append(index)
        total += cost
    return runs


def _pack(pieces, most_lines) -> list[list]:
    """``pieces`` in order, cut into runs of at most ``most_lines`` lines and
    :data:`UNIT_FUNCTIONS` pieces (a run of one when a piece alone is longer)."""
    runs, lines = [], 0
    for piece in pieces:
        if not runs or lines + piece.lines > most_lines or len(runs[-1]) >= UNIT_FUNCTIONS:
            runs.append([])
            lines = 0
        runs[-1].append(piece)
        lines += piece.lines
    return runs


@dataclasses.dataclass(frozen=True)
class Unit:
    """One translation unit: its ``text`` and what it holds, ``"program"`` (all of a program
    that fits one unit), ``"runtime"``, ``"group functions"`` (the members' functions: loop
    groups, native ops, row ops) or ``"glue"`` (steps and segment entries, which only
    allocate, call and check: the compiler builds them at a lower optimization level,
    :data:`~.compiler.GLUE_LEVEL`)."""

    text: str
    holds: str

    @property
    def glue(self) -> bool:
        return self.holds == "glue"


def units_of(functions, steps, entries, prelude, native) -> list[Unit]:
    """The translation units of a program: ``functions``, ``steps`` and ``entries`` are
    :class:`Piece` lists (the members' functions, the segments' steps, their entries),
    ``prelude(runtime)`` renders the prelude with or without the runtime's definitions,
    ``native`` is ``c/native.h.j2``'s text. One unit when the program fits the bounds, else as
    the module docstring says."""
    pieces = functions + steps + entries
    if len(pieces) <= UNIT_FUNCTIONS and sum(p.lines for p in pieces) <= UNIT_LINES:
        head = [prelude(True)] + [native] * any(p.native for p in pieces)
        return [Unit("\n".join(head + [p.code for p in pieces]) + "\n", "program")]
    declarations = prelude(False)
    defined = {p.name: p for p in functions + steps if p.name}
    units = [Unit(prelude(True), "runtime")]
    for holds, run in [("group functions", run) for run in _pack(functions, UNIT_LINES)] + \
            [("glue", run) for run in _pack(steps, GLUE_LINES) + _pack(entries, GLUE_LINES)]:
        here = {p.name for p in run}
        needed = dict.fromkeys(name for p in run for name in p.calls if name not in here)
        head = [declarations] + [native] * any(p.native for p in run)
        head += [defined[name].declaration for name in needed]
        units.append(Unit("\n".join(head + [p.code for p in run]) + "\n", holds))
    return units


def joined(units, header: str) -> str:
    """The program's readable C (see the module docstring): ``header``, then each unit under a
    line naming it. One unit is returned as it is, after ``header``."""
    if len(units) == 1:
        return f"{header}\n{units[0].text}"
    parts = [f"{header}\n/* Its C is {len(units)} translation units, compiled apart and "
             f"linked. */\n"]
    for number, unit in enumerate(units):
        parts.append(f"\n/* ==== unit {number + 1} of {len(units)}: {unit.holds} ==== */\n"
                     f"{unit.text}")
    return "".join(parts)
