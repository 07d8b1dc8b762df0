"""Graph queries over a program: users, reachability, and networkx / Graphviz views.

All traversals are iterative and linear in the number of ops.
"""
from __future__ import annotations

from .printer import format_attrs, value_label


def users(program) -> dict:
    """Map each Value (by identity) to the list of ops that read it."""
    table: dict = {}
    for op in program.ops:
        for value in op.inputs:
            table.setdefault(value, []).append(op)
    return table


def ancestors_of(values) -> set:
    """Ops on which ``values`` depend (iterative depth-first search), as a set of ops."""
    seen = set()
    stack = [v.op for v in values if v.op is not None]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(v.op for v in op.inputs if v.op is not None and v.op not in seen)
    return seen


def to_networkx(program):
    """A ``networkx.DiGraph``: one node per op (attributes ``op``, ``name``, ``label``,
    ``backward``) and an edge per Value flowing from producer to consumer (``value``)."""
    import networkx as nx

    graph = nx.DiGraph()
    for index, op in enumerate(program.ops):
        graph.add_node(index, op=op, name=op.name, backward=op.forward_op is not None,
                       label=f"{', '.join(map(value_label, op.results))} = {op.name}")
    position = {op: i for i, op in enumerate(program.ops)}
    for index, op in enumerate(program.ops):
        for value in op.inputs:
            graph.add_edge(position[value.op], index, value=value)
    return graph


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(program, groups=None) -> str:
    """Graphviz source. Backward ops are drawn shaded; ``groups`` (a list of lists of ops,
    e.g. fusion groups) are drawn as clusters."""
    lines = ["digraph program {", '  rankdir=TB; node [shape=box, fontname="monospace"];']
    position = {op: i for i, op in enumerate(program.ops)}

    def node(op):
        label = f"{', '.join(map(value_label, op.results))} = {op.name}{format_attrs(op.attrs)}"
        label += "\n" + ", ".join(v.type_str for v in op.results)
        style = ', style=filled, fillcolor="#ffe9c6"' if op.forward_op is not None else ""
        return f'  n{position[op]} [label="{_dot_escape(label)}"{style}];'

    grouped = set()
    for g, group in enumerate(groups or []):
        lines.append(f'  subgraph cluster_{g} {{ label="group {g}"; style=dashed; color=blue;')
        for op in group:
            lines.append("  " + node(op))
            grouped.add(op)
        lines.append("  }")
    for op in program.ops:
        if op not in grouped:
            lines.append(node(op))
    for op in program.ops:
        for value in op.inputs:
            lines.append(f"  n{position[value.op]} -> n{position[op]};")
    lines.append("}")
    return "\n".join(lines)
