"""The graph-query kit: every walk over a program, regions included, lives here.

* :func:`walk_ops` visits ops and the ops of their nested blocks (each op before its inner
  ops); :func:`walk_blocks` visits blocks the same way, :func:`walk_defined` the Values
  they define (results and block arguments).
* :func:`free_values` lists what a set of blocks reads from outside (a region op's
  captures); :func:`is_visible` tells whether a block may read a Value.
* :func:`ancestors_of`, :func:`live_ops` and :func:`last_uses` answer
  dependence and liveness within one block. A region op lists its captures among its inputs,
  so these never need to look inside nested blocks: a Value read deep inside a loop body is
  read, at the loop's level, by the loop op.
* :func:`users`, :func:`to_networkx` and :func:`to_dot` are views for people and tools.

All walks are iterative and linear in the number of ops they visit.
"""
from __future__ import annotations

from .printer import format_attrs, value_label


class IdentityMap(dict):
    """A Value map that maps every Value it does not hold to itself (for copying ops that
    keep reading the Values they read)."""

    def __missing__(self, key):
        return key


def walk_ops(ops):
    """Every op of ``ops`` (a block's list) and of their nested blocks, at any depth, each op
    before its inner ops."""
    stack = [iter(ops)]
    while stack:
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        yield op
        if op.blocks:
            stack.extend(iter(block.ops) for block in reversed(op.blocks))


def walk_blocks(blocks):
    """``blocks`` and every block nested in them, outer blocks first."""
    stack = list(reversed(blocks))
    while stack:
        block = stack.pop()
        yield block
        for op in block.ops:
            if op.blocks:
                stack.extend(reversed(op.blocks))


def walk_defined(ops):
    """Every Value that ``ops`` (a block's list) and their nested blocks define, in order:
    each op's results, then the arguments of its blocks, then what the ops inside define."""
    for op in walk_ops(ops):
        yield from op.results
        for block in op.blocks:
            yield from block.args


def defined_in(blocks) -> set:
    """Every Value that ``blocks`` (or blocks nested in them) define: arguments and results."""
    defined = set()
    for block in walk_blocks(blocks):
        defined.update(block.args)
        for op in block.ops:
            defined.update(op.results)
    return defined


def free_values(blocks) -> list:
    """The Values that ops (and yields) of ``blocks`` read without defining them, in order of
    first use: what a region op owning ``blocks`` captures."""
    defined = defined_in(blocks)
    free: dict = {}
    for block in walk_blocks(blocks):
        for op in block.ops:
            for value in op.inputs:
                if value not in defined:
                    free[value] = None
        for value in block.yields:
            if value not in defined:
                free[value] = None
    return list(free)


def is_visible(value, block) -> bool:
    """May ops of ``block`` read ``value`` (defined in ``block`` or a block enclosing it)?"""
    defining = value.block
    return defining is not None and defining.encloses(block)


def ancestors_of(values) -> set:
    """Ops of the values' own blocks on which ``values`` depend (iterative depth-first search),
    as a set of ops. Block arguments have no producer: the walk stops there."""
    seen = set()
    stack = [v.op for v in values if v.op is not None]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(v.op for v in op.inputs if v.op is not None and v.op not in seen)
    return seen


def live_ops(ops, needed) -> list:
    """The ops of ``ops`` (one block's list, in order) that the Values ``needed`` depend on,
    in program order. One backward sweep: an op is live when one of its results is needed,
    and then its inputs are."""
    needed = set(needed)
    live = []
    for op in reversed(ops):
        if any(value in needed for value in op.results):
            live.append(op)
            needed.update(op.inputs)
    live.reverse()
    return live


def last_uses(ops, reads_after=()) -> dict:
    """``{Value: index of the last op of ops reading it}``; Values in ``reads_after`` (read
    after the last op, such as a block's yields) map to ``len(ops)``."""
    last = {}
    for index, op in enumerate(ops):
        for value in op.inputs:
            last[value] = index
    for value in reads_after:
        last[value] = len(ops)
    return last


def users(ops) -> dict:
    """Map each Value (by identity) to the list of ops of ``ops`` that read it."""
    table: dict = {}
    for op in ops:
        for value in op.inputs:
            table.setdefault(value, []).append(op)
    return table


# --- views ---------------------------------------------------------------------------------------
def _label(op) -> str:
    return f"{', '.join(map(value_label, op.results))} = {op.name}"


def to_networkx(program):
    """A ``networkx.DiGraph``: one node per op, nested ops included (attributes ``op``,
    ``name``, ``label``, ``backward``, ``depth``), one node per block argument (``arg``), and
    an edge per Value flowing from its producer to each consumer (``value``)."""
    import networkx as nx

    graph = nx.DiGraph()
    node_of: dict = {}
    for block in walk_blocks([program.global_block()]):
        depth = 0
        parent = block.parent_block
        while parent is not None:
            depth, parent = depth + 1, parent.parent_block
        for arg in block.args:
            node_of[arg] = len(node_of)
            graph.add_node(node_of[arg], arg=arg, name="arg", label=value_label(arg),
                           backward=False, depth=depth)
        for op in block.ops:
            node_of[op] = len(node_of)
            graph.add_node(node_of[op], op=op, name=op.name, label=_label(op),
                           backward=op.forward_op is not None, depth=depth)
    for op in walk_ops(program.ops):
        for value in op.inputs:
            source = node_of[value.op if value.op is not None else value]
            graph.add_edge(source, node_of[op], value=value)
    return graph


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(program, groups=None) -> str:
    """Graphviz source. Backward ops are drawn shaded; the blocks of region ops are drawn as
    clusters inside their op's cluster, with their arguments as ellipses and a ``yield`` node
    that the yielded Values flow into (dashed); ``groups`` (a list of lists of top-level ops,
    e.g. fusion groups) are drawn as clusters too."""
    lines = ["digraph program {", '  rankdir=TB; node [shape=box, fontname="monospace"];']
    name_of: dict = {}

    def node_name(thing):
        name = name_of.get(thing)
        if name is None:
            name = name_of[thing] = f"n{len(name_of)}"
        return name

    def node(op, indent):
        label = f"{_label(op)}{format_attrs(op.attrs)}"
        label += "\n" + ", ".join(v.type_str for v in op.results)
        style = ', style=filled, fillcolor="#ffe9c6"' if op.forward_op is not None else ""
        return f'{indent}{node_name(op)} [label="{_dot_escape(label)}"{style}];'

    clusters = iter(range(1 << 62))

    def emit_ops(ops, pad):
        # recursion over nesting depth only (a region op's blocks are clusters in its cluster)
        for op in ops:
            if not op.blocks:
                lines.append(node(op, pad))
                continue
            lines.append(f'{pad}subgraph cluster_r{next(clusters)} {{ label="{op.name}"; '
                         f'style=rounded; color=gray;')
            lines.append(node(op, pad + "  "))
            for block in op.blocks:
                lines.append(f'{pad}  subgraph cluster_r{next(clusters)} {{ label=""; '
                             f'style=dotted;')
                lines.extend(f'{pad}    {node_name(arg)} [label="{_dot_escape(value_label(arg))}'
                             f'", shape=ellipse];' for arg in block.args)
                emit_ops(block.ops, pad + "    ")
                if block.yields:
                    lines.append(f'{pad}    {node_name(block)} [label="yield", shape=plain];')
                lines.append(f"{pad}  }}")
            lines.append(f"{pad}}}")

    grouped = set()
    for g, group in enumerate(groups or []):
        lines.append(f'  subgraph cluster_{g} {{ label="group {g}"; style=dashed; color=blue;')
        for op in group:
            lines.append(node(op, "    "))
            grouped.add(op)
        lines.append("  }")
    emit_ops([op for op in program.ops if op not in grouped], "  ")
    for op in walk_ops(program.ops):
        for value in op.inputs:
            source = value.op if value.op is not None else value
            lines.append(f"  {node_name(source)} -> {node_name(op)};")
        for block in op.blocks:
            for value in block.yields:
                source = value.op if value.op is not None else value
                lines.append(f"  {node_name(source)} -> {node_name(block)} [style=dashed];")
    lines.append("}")
    return "\n".join(lines)
