"""Run-time dims of an exported library: symbolic dims as C expressions, and the checks at
its entry point.

The entry point takes one ``int64_t`` per unknown axis of each data input (``x_dim0``). Each
symbol of the program (``batch``, ``?0``) is bound from the first input that has it, into a
local ``sg_s<k>``; the others must agree, and so must the constraints the program's ops
recorded (the same binding, in the same order and with the same messages, as
:class:`~symgrad.runtime.standalone.DimBinder`, whose JSON form the export is given)::

    if (x_dim0 < 0)
        return sg_fail(NAME_ERROR_DIM, "x: dim 0 is %lld, a size must not be negative", ...);
    const int64_t sg_s0 = x_dim0;   /* '?0', from x */
    if (t_dim0 != sg_s0)
        return sg_fail(NAME_ERROR_DIM, "dim '?0' is %lld in t but %lld in x", ...);
"""
from __future__ import annotations

import re

from ...common import comment
from ....ir.dims import dim_to_json
from .errors import LibraryExportError


def c_string(text: str) -> str:
    """``text`` as the inside of a C string literal that is also a printf format."""
    text = comment(text).replace("\\", "\\\\").replace('"', '\\"')
    return text.replace("%", "%%")


def symbol_text(obj) -> str | None:
    """The text of the symbol a JSON dim is (``"batch"``, ``"?0"``), None for another form."""
    if isinstance(obj, dict) and len(obj) == 1:
        (kind, body), = obj.items()
        if kind == "name":
            return body
        if kind == "anonymous":
            return f"?{body}"
    return None


def c_expression(obj, symbols: dict) -> str | None:
    """The C expression of JSON dim ``obj`` over the bound ``symbols`` (text -> C name); None
    when it uses a symbol no input binds. Recursion is over the expression's nesting only."""
    if type(obj) is int:
        return str(obj)
    text = symbol_text(obj)
    if text is not None:
        return symbols.get(text)
    (kind, body), = obj.items()
    if kind == "floordiv":
        inner = c_expression(body[0], symbols)
        return None if inner is None else f"({inner} / {body[1]})"
    terms = []
    for atoms, coefficient in body:
        factors = [c_expression(atom, symbols) for atom in atoms]
        if any(f is None for f in factors):
            return None
        terms.append(" * ".join([f"(int64_t){coefficient}"] * (coefficient != 1 or not factors)
                                + factors))
    return "(" + " + ".join(terms or ["0"]) + ")"


class DimTable:
    """The entry's dim parameters and bindings for one program (see the module docstring).
    ``binding``: the DimBinder's JSON (``{"inputs": [[name, dims]...], "checks": [...]}``) or
    None; ``arguments[input name]``: ``[(axis, C parameter name)]``."""

    def __init__(self, binding, c_names: dict):
        self.symbols: dict = {}       # symbol text -> C local
        self.arguments: dict = {}     # input name -> [(axis, parameter)]
        self.lines: list = []         # the binding code, at the top of the entry
        binding = binding or {"inputs": [], "checks": []}
        source: dict = {}
        for name, dims in binding["inputs"]:
            c_name = c_names[name]
            params = []
            for axis, dim in enumerate(dims):
                if type(dim) is not str:
                    continue
                param = f"{c_name}_dim{axis}"
                params.append((axis, param))
                self.lines.append(
                    f'    if ({param} < 0)\n        return sg_fail(SG_ERROR_DIM, '
                    f'"{c_string(name)}: dim {axis} is %lld, a size must not be negative", '
                    f'(long long){param});')
                if dim not in self.symbols:
                    local = self.symbols[dim] = f"sg_s{len(self.symbols)}"
                    source[dim] = name
                    self.lines.append(f"    const int64_t {local} = {param};   "
                                      f"/* {comment(repr(dim)).replace('*/', '* /')}, from "
                                      f"{comment(name).replace('*/', '* /')} */")
                    continue
                self.lines.append(
                    f"    if ({param} != {self.symbols[dim]})\n        return sg_fail("
                    f'SG_ERROR_DIM, "dim {c_string(repr(dim))} is %lld in {c_string(name)} '
                    f'but %lld in {c_string(source[dim])}", (long long){param}, '
                    f"(long long){self.symbols[dim]});")
            self.arguments[name] = params
        for check in binding["checks"]:
            for line in self._check(check, source):
                if line not in self.lines:   # ops of one line may assume the same
                    self.lines.append(line)

    def _check(self, check, source) -> list:
        left = c_expression(check["left"], self.symbols)
        right = c_expression(check["right"], self.symbols)
        if left is None or right is None:
            return []
        where = f" (built at {check['loc']})" if check.get("loc") else ""
        sides = sorted([(check["left"], check["left_text"], left),
                        (check["right"], check["right_text"], right)],
                       key=lambda side: type(side[0]) is int)
        (_, text, size), (other, other_text, other_size) = sides

        def shown(text):
            return (f"dim {c_string(repr(text))} (%lld in {c_string(source[text])})"
                    if text in source else f"dim {c_string(repr(text))} (= %lld)")

        need = f"to be {other_size}" if type(other) is int else \
            f"and {shown(other_text)} to be equal"
        values = f"(long long)({size})" + ("" if type(other) is int
                                           else f", (long long)({other_size})")
        message = (f"the fed shapes do not fit the program: op {c_string(check['op'])}"
                   f"{c_string(where)} needs {shown(text)} {need} (a dim unknown when the "
                   f"program was built is never broadcast)")
        return [f"    if ({left} != {right})\n        return sg_fail(SG_ERROR_DIM, "
                f'"{message}", {values});']

    def known(self, dim) -> bool:
        """Has ``dim`` a C expression (a number, or symbols the entry has bound)?"""
        return isinstance(dim, int) or c_expression(dim_to_json(dim), self.symbols) is not None

    def bind(self, dim, local) -> None:
        """Bind the symbol ``dim`` that an op defines at run time (the leading dim of a
        while loop's stacked outputs: its trip count) to the entry's C local ``local``;
        nothing for a number or a symbol bound already."""
        text = None if isinstance(dim, int) else symbol_text(dim_to_json(dim))
        if text is not None and text not in self.symbols:
            self.symbols[text] = local

    def dims_of(self, value) -> list:
        """The C expressions of ``value``'s dims; a :class:`LibraryExportError` when one
        uses a symbol that no input binds."""
        return [self.dim_code(dim, f"%{value.id} (axis {axis})")
                for axis, dim in enumerate(value.dims)]

    def dim_code(self, dim, where="a loop") -> str:
        """The C expression of ``dim`` (``where`` names its place for the error)."""
        if isinstance(dim, int):
            return str(dim)
        text = c_expression(dim_to_json(dim), self.symbols)
        if text is None:
            raise LibraryExportError(
                f"dim {dim} of {where} is bound by no data input: the exported entry point "
                f"takes the sizes of its inputs' dims only")
        return text


def identifier(name: str, taken: set) -> str:
    """A C identifier for ``name`` (an input's name), unique among ``taken`` (added to it)."""
    text = re.sub(r"\W", "_", name, flags=re.ASCII) or "input"
    if text[0].isdigit():
        text = "_" + text
    base, number = text, 1
    while text in taken:
        number += 1
        text = f"{base}_{number}"
    taken.add(text)
    return text
