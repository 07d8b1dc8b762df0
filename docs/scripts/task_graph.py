"""Draw the task graph of a ``map_reduce`` call as docs/img/map_reduce_graph.svg.

    python docs/scripts/task_graph.py

The graph is the real one (``map_reduce(..., compute=False)`` of a linear model over six
chunks of rows, on the local scheduler, where the artifact is one node of the graph), drawn
without Graphviz: tasks that only pick an item or alias a key are contracted into edges, and
the rest are laid out in layers (longest path from the inputs). The reduction tree is drawn
with a fan-in of 3 (``TREE_FAN_IN`` is 8) so that six chunks show two levels.
"""
from __future__ import annotations

import html
from pathlib import Path

import dask.array as da
import dask.core
import numpy as np

import symgrad as sg
from symgrad import ir_backward
from symgrad.distributed import driver, map_reduce

OUT = Path(__file__).resolve().parents[1] / "img" / "map_reduce_graph.svg"
CHUNKS = 6

# Node kinds: fill colour and whether edges from it are dashed (shipped once, not per task).
KINDS = {"input": ("#dbe9f6", False), "shipped": ("#fde2c4", True), "run": ("#d5ecd4", False),
         "tree": ("#e6dcf2", False), "output": ("#eeeeee", False)}


def program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        y = sg.data("y", [None], "float64")
        w = sg.parameter("w", [3], "float64", init=np.zeros(3))
        pred = x @ w
        loss = sg.mean((pred - y) ** 2)
        grad_w, = ir_backward.grad(loss, [w])
    return sg.compile(prog, [loss, grad_w, pred])


def lazy_graph():
    """The graph, the output arrays and the sharded arrays of one call."""
    x = da.zeros((60, 3), chunks=(10, 3))
    y = da.ones(60, chunks=10)
    fan_in, driver.TREE_FAN_IN = driver.TREE_FAN_IN, 3
    try:
        outputs = map_reduce(program(), {"x": x, "y": y}, replicated={"w": np.ones(3)},
                             reduce=["mean", "mean", "concat"], compute=False)
    finally:
        driver.TREE_FAN_IN = fan_in
    graph = {}
    for array in outputs:
        graph.update(array.__dask_graph__())
    return graph, outputs, {"x": x, "y": y}


def labels(graph, outputs, sharded):
    """key -> (label, kind) for the nodes drawn; other keys are contracted."""
    named = {}
    for name, array in sharded.items():
        for index, key in enumerate(dask.core.flatten(array.__dask_keys__())):
            named[key] = (f"{name}[{index}]", "input")
    for name, array in zip(["loss", "grad w", "predictions"], outputs):
        for key in dask.core.flatten(array.__dask_keys__()):
            per_row = array.ndim and array.numblocks[0] > 1
            named[key] = (f"{name} (concat)" if per_row else name, "output")
    runs = 0
    for key in graph:
        text = str(key)
        if text.startswith("symgrad-run-chunk"):
            named[key] = (f"run chunk {runs}", "run")
            runs += 1
        elif text.startswith("symgrad-add-parts"):
            named[key] = ("add parts", "tree")
        elif text.startswith("symgrad-finish"):
            named[key] = ("finish: / rows", "tree")
        elif text.startswith("symgrad-artifact"):
            named[key] = ("artifact (once)", "shipped")
        elif text.startswith("dict-"):
            named[key] = ("replicated w (once)", "shipped")
    return named


def contracted_edges(graph, named):
    """Edges between drawn nodes, through any chain of contracted ones."""
    dependencies, _ = dask.core.get_deps(graph)

    def drawn_sources(key, seen):
        for dep in dependencies.get(key, ()):
            if dep in named:
                yield dep
            elif dep not in seen:
                seen.add(dep)
                yield from drawn_sources(dep, seen)

    edges = set()
    for key in named:
        for source in drawn_sources(key, set()):
            edges.add((named_id(source, named), named_id(key, named)))
    return edges


def named_id(key, named):
    label, kind = named[key]
    return (label, key) if kind != "output" or "concat" not in label else (label, None)


def layout(nodes, edges, rank):
    """Layer = longest path from a source; order within a layer by the mean position of the
    sources, then by ``rank`` (inputs keep chunk order, between the nodes shipped once)."""
    preds = {node: [a for a, b in edges if b == node] for node in nodes}
    layer = {}

    def depth(node):
        if node not in layer:
            layer[node] = 1 + max((depth(p) for p in preds[node]), default=-1)
        return layer[node]

    for node in nodes:
        depth(node)
    rows = {}
    for node in nodes:
        rows.setdefault(layer[node], []).append(node)
    position = {}
    for level in sorted(rows):
        if level == 0:
            inputs = sorted((n for n in rows[0] if not n[0].endswith("(once)")),
                            key=lambda n: (int(n[0].split("[")[1][:-1]), n[0]))
            shipped = sorted((n for n in rows[0] if n[0].endswith("(once)")), key=rank.get)
            order = shipped[:1] + inputs + shipped[1:]
        else:
            order = sorted(rows[level], key=lambda n: (np.mean([
                position[p][0] for p in preds[n] if not p[0].endswith("(once)")] or [0]),
                rank[n]))
        for index, node in enumerate(order):
            position[node] = (index - (len(order) - 1) / 2, level)
    return position


def svg(nodes, edges, position, named_kinds):
    """The drawing, sized in px (one unit of its viewBox is one px): the 14 nodes of the top
    row span about 1,000 px, so that shown across the docs' column (983 px at a 1280 px wide
    screen) its 12 px text stays above 11 px."""
    width_unit, height_unit, box_w, box_h, font, line_h = 68, 80, 64, 32, 12, 13
    xs = [p[0] for p in position.values()]
    left = min(xs) * width_unit - box_w
    width = (max(xs) - min(xs)) * width_unit + 2 * box_w
    height = (max(p[1] for p in position.values()) + 1) * height_unit
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
             f'height="{height + 10:.0f}" viewBox="{left:.0f} -10 {width:.0f} {height + 10:.0f}" '
             f'font-family="sans-serif" font-size="{font}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
             '</defs>']

    def centre(node):
        x, level = position[node]
        return x * width_unit, level * height_unit + box_h / 2

    for a, b in sorted(edges, key=str):
        (x1, y1), (x2, y2) = centre(a), centre(b)
        dashed = KINDS[named_kinds[a]][1]
        parts.append(f'<line x1="{x1:.1f}" y1="{y1 + box_h / 2:.1f}" x2="{x2:.1f}" '
                     f'y2="{y2 - box_h / 2:.1f}" stroke="#{"c77" if dashed else "555"}" '
                     f'stroke-width="{0.8 if dashed else 1}" marker-end="url(#arrow)"'
                     + (' stroke-dasharray="3,3"' if dashed else "") + '/>')
    for node in nodes:
        x, y = centre(node)
        fill = KINDS[named_kinds[node]][0]
        parts.append(f'<rect x="{x - box_w / 2:.1f}" y="{y - box_h / 2:.1f}" width="{box_w}" '
                     f'height="{box_h}" rx="5" fill="{fill}" stroke="#666"/>')
        words = node[0].split(" ", 1) if len(node[0]) > 9 else [node[0]]
        for line, word in enumerate(words):
            offset = (line - (len(words) - 1) / 2) * line_h + font * 0.35
            parts.append(f'<text x="{x:.1f}" y="{y + offset:.1f}" text-anchor="middle">'
                         f'{html.escape(word)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    graph, outputs, sharded = lazy_graph()
    named = labels(graph, outputs, sharded)
    edges = contracted_edges(graph, named)
    nodes = sorted({node for edge in edges for node in edge}, key=str)
    kinds = {named_id(key, named): kind for key, (label, kind) in named.items()}
    rank = {}
    for key in named:                       # the order nodes were named in: fetch order
        rank.setdefault(named_id(key, named), len(rank))
    position = layout(nodes, edges, rank)
    OUT.write_text(svg(nodes, edges, position, kinds), encoding="utf-8")
    print(f"wrote {OUT} ({len(nodes)} nodes, {len(edges)} edges, from {len(graph)} tasks)")


if __name__ == "__main__":
    main()
