"""Regenerate the documentation's pictures under docs/img/.

    python docs/scripts/make_figures.py            # graphs + plots from docs/data/benchmarks.json
    python docs/scripts/make_figures.py --measure  # re-measure the benchmarks first (a few minutes)

Graphs: ``Program.to_dot()`` of a small MLP (forward; forward + backward; the optimized and
fused program with each fused group drawn as a cluster) and of an RNN's forward and reverse
scan, rendered with Graphviz's ``dot`` (Debian: ``apt-get install -y graphviz``). Plots: the
benchmark tables of docs/performance.md drawn with matplotlib (``pip install -e ".[docs]"``).
Every picture is drawn to be shown at its natural size in the pages' column (983 px wide at a
1280 px screen) with its text 11 px high or more; ``docs/scripts/check_layout.py`` checks the
SVGs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.passes import is_fusion
from symgrad.passes.rewrite import Rebuilder

DOCS = Path(__file__).resolve().parents[1]
IMG = DOCS / "img"
DATA = DOCS / "data" / "benchmarks.json"

sys.path.insert(0, str(DOCS.parent / "benchmarks"))
from build_scaling import build_chain  # noqa: E402
from common import median_time, paired_median_times  # noqa: E402


# --- graphs ------------------------------------------------------------------------------------
def small_mlp(with_grad: bool):
    """x[None, 4] -> linear(5) -> tanh -> linear(3) -> softmax cross-entropy; optionally the
    gradients of the loss w.r.t. every parameter. Returns (program, fetches)."""
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape=[None, 4], dtype="float32")
        y = sg.data("y", shape=[None], dtype="int64")
        w1 = sg.parameter("w1", [4, 5], "float32", init=rng.normal(size=(4, 5)).astype("float32"))
        b1 = sg.parameter("b1", [5], "float32", init=np.zeros(5, "float32"))
        w2 = sg.parameter("w2", [5, 3], "float32", init=rng.normal(size=(5, 3)).astype("float32"))
        hidden = sg.tanh(nn.linear(x, w1, b1))
        loss = nn.softmax_cross_entropy(nn.linear(hidden, w2), y)
        fetches = [loss]
        if with_grad:
            fetches += ir_backward.grad(loss, [w1, b1, w2])
    return prog, fetches


def flatten_fusion(program):
    """A copy of an optimized program with each fusion op replaced by the ops of its body.
    Returns ``(flat_program, groups)``: ``groups`` lists, per fusion op, its ops in the copy
    (ready for ``flat_program.to_dot(groups=groups)``)."""
    builder = Rebuilder(program)
    groups = []
    for op in program.ops:
        if not is_fusion(op):
            builder.copy(op)
            continue
        (body,) = op.blocks
        groups.append([builder.copy(inner) for inner in body.ops])
        for outer, inner in zip(op.results, body.yields):
            builder.alias(outer, builder.get(inner))
    flat, _ = builder.finish([])
    return flat, groups


GRAPH_STYLE = ('nodesep=0.12; ranksep=0.15; graph [fontname="sans-serif", fontsize=10]; '
               'node [fontsize=10, margin="0.05,0.01", height=0.3]; edge [arrowsize=0.6];')


def readable(dot_source: str) -> str:
    """``Program.to_dot()`` made to fit a page's column with its text at 10 pt (13 px where
    the picture is shown at its natural size): the labels lose the ops' attributes (name, op
    and result types stay), nodes sit closer, and :func:`layout_hints` draw each region op's
    body below the op."""
    dot_source = re.sub(r" \{.*?\}(?=\\n)", "", dot_source)
    dot_source = dot_source.replace("rankdir=TB;", f"rankdir=TB; {GRAPH_STYLE}", 1)
    lines = dot_source.splitlines()
    return "\n".join(lines[:-1] + layout_hints(lines) + lines[-1:])


def layout_hints(lines: list[str]) -> list[str]:
    """Invisible edges for the clusters ``to_dot`` draws around region ops (a cluster holding
    the op's node, then one cluster per block): from the op to every node of its blocks, and
    from its blocks' ``yield`` nodes to every consumer of the op. Graphviz then draws a body
    below its op and what reads the op's results below the body, instead of side by side."""
    hints, yields_of = [], {}
    clusters = []   # per open subgraph: [kind, region op node]; kind "op", "block" or "other"
    for line in lines:
        text = line.strip()
        if text.startswith("subgraph"):
            kind = "other"
            if text.startswith("subgraph cluster_r"):
                kind = "block" if 'label=""' in text else "op"
            clusters.append([kind, clusters[-1][1] if kind == "block" else None])
        elif text == "}" and clusters:
            clusters.pop()
        elif node := re.match(r"(n\d+) \[", text):
            if clusters and clusters[-1][0] == "op" and clusters[-1][1] is None:
                clusters[-1][1] = node[1]
            elif clusters and clusters[-1][0] == "block":
                op = clusters[-1][1]
                hints.append(f"  {op} -> {node[1]} [style=invis];")
                if 'label="yield"' in text:
                    yields_of.setdefault(op, []).append(node[1])
        elif edge := re.match(r"(n\d+) -> (n\d+);", text):
            hints += [f"  {y} -> {edge[2]} [style=invis];" for y in yields_of.get(edge[1], ())]
    return hints


def render(dot_source: str, name: str) -> None:
    """Write docs/img/<name>.dot (made :func:`readable`) and render it to docs/img/<name>.svg
    with Graphviz."""
    dot_source = readable(dot_source)
    (IMG / f"{name}.dot").write_text(dot_source + "\n")
    subprocess.run(["dot", "-Tsvg", str(IMG / f"{name}.dot"), "-o", str(IMG / f"{name}.svg")],
                   check=True)
    print("wrote", IMG / f"{name}.svg")


def small_rnn():
    """A tanh RNN over a sequence with ``sg.scan`` and the gradient of its final state's
    energy w.r.t. the recurrent weights: the forward scan and the reverse scan ``grad``
    appends, each with its body drawn inside it."""
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", shape=[None, 4, 3], dtype="float32")
        w = sg.parameter("w", [3, 3], "float32", init=np.eye(3, dtype="float32") * 0.5)
        h, _ = sg.scan(lambda h, x: (sg.tanh(h @ w + x), None), sg.zeros([4, 3]), xs)
        loss = sg.sum(h * h)
        ir_backward.grad(loss, [w])
    return prog


def make_graphs() -> None:
    if shutil.which("dot") is None:
        sys.exit("Graphviz's `dot` is not installed (Debian: apt-get install -y graphviz)")
    forward, _ = small_mlp(with_grad=False)
    render(forward.to_dot(), "mlp_forward")
    full, fetches = small_mlp(with_grad=True)
    render(full.to_dot(), "mlp_forward_backward")
    compiled = sg.compile(full, fetch_list=fetches, backend="numpy")
    flat, groups = flatten_fusion(compiled.program)
    render(flat.to_dot(groups=groups), "mlp_fused")
    render(small_rnn().to_dot(), "rnn_scan")


# --- benchmarks ------------------------------------------------------------------------------
def measure_scaling(sizes=(1_000, 10_000, 100_000)) -> dict:
    """Seconds to build a chain of n ops, and to append its backward with ``grad``."""
    rows = []
    for n in sizes:
        build = median_time(lambda: build_chain(n), 3, warmup=0)

        def differentiate():
            prog, x, y = build_chain(n)
            start = time.perf_counter()
            ir_backward.grad(sg.sum(y), [x])
            return time.perf_counter() - start

        grad_time = statistics.median(differentiate() for _ in range(3))
        rows.append({"ops": n, "build_s": build, "grad_s": grad_time})
        print(f"  chain of {n:>7,} ops: build {build:.3f} s, grad {grad_time:.3f} s")
    return {"rows": rows}


def mlp_train_step(batch: int, sizes=(784, 256, 10)):
    """Program, fetches, feeds and a hand-written NumPy equivalent of one MLP gradient step."""
    rng = np.random.default_rng(0)
    w1 = (rng.normal(size=sizes[:2]) / np.sqrt(sizes[0])).astype("float32")
    w2 = (rng.normal(size=sizes[1:]) / np.sqrt(sizes[1])).astype("float32")
    b1 = np.zeros(sizes[1], "float32")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, sizes[0]], "float32")
        y = sg.data("y", [None], "int64")
        pw1, pb1, pw2 = (sg.parameter(n, list(a.shape), "float32", init=a)
                         for n, a in (("w1", w1), ("b1", b1), ("w2", w2)))
        loss = nn.softmax_cross_entropy(nn.linear(nn.gelu(nn.linear(x, pw1, pb1)), pw2), y)
        fetches = [loss] + ir_backward.grad(loss, [pw1, pb1, pw2])
    feeds = {"x": rng.normal(size=(batch, sizes[0])).astype("float32"),
             "y": rng.integers(0, sizes[2], size=batch)}

    def by_hand(x, y):
        a = x @ w1 + b1
        inner = np.float32(0.7978845608) * (a + np.float32(0.044715) * a * a * a)
        t = np.tanh(inner)
        h = 0.5 * a * (1 + t)
        z = h @ w2
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.mean(np.log(p[np.arange(len(y)), y]))
        dz = p
        dz[np.arange(len(y)), y] -= 1
        dz /= len(y)
        gw2 = h.T @ dz
        dh = dz @ w2.T
        dinner = 0.5 * a * (1 - t * t) * np.float32(0.7978845608) * (1 + 3 * np.float32(0.044715) * a * a)
        da = dh * 0.5 * (1 + t) + dh * dinner
        return [loss, x.T @ da, da.sum(axis=0), gw2]

    return prog, fetches, feeds, by_hand


def elementwise_program(n: int):
    """A long elementwise expression and its gradient on n float32 elements."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float32")
        y = sg.sum(sg.tanh(x) * sg.sigmoid(2.0 * x) + sg.exp(-x * x) * sg.sin(x))
        (gx,) = ir_backward.grad(y, [x])
    feeds = {"x": np.random.default_rng(0).normal(size=n).astype("float32")}

    def by_hand(x):
        t, s, e, sn = np.tanh(x), 1 / (1 + np.exp(-2 * x)), np.exp(-x * x), np.sin(x)
        y = np.sum(t * s + e * sn)
        g = (1 - t * t) * s + t * 2 * s * (1 - s) + e * (-2 * x) * sn + e * np.cos(x)
        return [y, g]

    return prog, [y, gx], feeds, by_hand


def measure_runtime(repeats: int = 20) -> dict:
    """Median milliseconds per call: interpreter, generated NumPy (fused / unfused), by hand."""
    cases = {"MLP 784-256-10 gradient, batch 256": mlp_train_step(256),
             "elementwise gradient, 4M elements": elementwise_program(4_000_000)}
    rows = []
    for label, (prog, fetches, feeds, by_hand) in cases.items():
        runners = {
            "interpreter": sg.compile(prog, fetch_list=fetches, backend="interpreter"),
            "numpy, no fusion": sg.compile(prog, fetch_list=fetches, backend="numpy", fusion=False),
            "numpy (fused)": sg.compile(prog, fetch_list=fetches, backend="numpy"),
        }
        expected = runners["interpreter"](**feeds)
        for got, want in zip(by_hand(**feeds), expected):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)
        calls = {name: (lambda fn=fn: fn(**feeds)) for name, fn in runners.items()}
        calls["hand-written NumPy"] = lambda: by_hand(**feeds)
        times = paired_median_times(list(calls.values()), repeats)
        row = {"case": label, **{name: 1e3 * t for name, t in zip(calls, times)}}
        rows.append(row)
        print("  " + ", ".join(f"{k}: {v:.2f} ms" if isinstance(v, float) else v
                               for k, v in row.items()))
    return {"rows": rows}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return (f"{cpu}, {os.cpu_count()} cores visible; Python {platform.python_version()}, "
            f"NumPy {np.__version__}, symgrad {sg.__version__}")


def measure() -> dict:
    print("measuring build and grad scaling ...")
    scaling = measure_scaling()
    print("measuring run time per call ...")
    runtime = measure_runtime()
    data = {"date": datetime.date.today().isoformat(), "machine": machine(),
            "scaling": scaling, "runtime": runtime}
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print("wrote", DATA)
    return data


def make_plots(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["scaling"]["rows"]
    ops = [r["ops"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(ops, [r["build_s"] for r in rows], "o-", label="build the forward chain")
    ax.loglog(ops, [r["grad_s"] for r in rows], "s-", label="ir_backward.grad")
    ax.loglog(ops, [rows[0]["grad_s"] * n / ops[0] for n in ops], "k:", label="linear")
    ax.set_xlabel("ops in the forward program")
    ax.set_ylabel("seconds")
    ax.set_title("Build and grad time against program size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, f"{data['date']}, {data['machine'][:70]}", fontsize=7, color="gray")
    fig.tight_layout()
    fig.savefig(IMG / "scaling.png", dpi=120)
    plt.close(fig)
    print("wrote", IMG / "scaling.png")

    rows = data["runtime"]["rows"]
    runners = [k for k in rows[0] if k != "case"]
    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.6),   # 960 px: the column
                             sharey=True)
    for ax, row in zip(np.atleast_1d(axes), rows):
        values = [row[k] for k in runners]
        bars = ax.barh(runners, values, color=["#bbbbbb", "#9ecae1", "#3182bd", "#fdae6b"])
        ax.bar_label(bars, fmt="%.1f ms", padding=3, fontsize=8)
        ax.set_title(row["case"], fontsize=10)
        ax.set_xlabel("milliseconds per call (median)")
        ax.set_xlim(0, max(values) * 1.3)
    np.atleast_1d(axes)[0].invert_yaxis()   # shared by the panels: the first runner on top
    fig.text(0.01, 0.01, f"{data['date']}, {data['machine'][:90]}", fontsize=7, color="gray")
    fig.tight_layout()
    fig.savefig(IMG / "runtime.png", dpi=120)
    plt.close(fig)
    print("wrote", IMG / "runtime.png")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true",
                        help="re-run the benchmarks and rewrite docs/data/benchmarks.json")
    parser.add_argument("--no-graphs", action="store_true", help="skip the Graphviz pictures")
    args = parser.parse_args(argv)
    IMG.mkdir(parents=True, exist_ok=True)
    if not args.no_graphs:
        make_graphs()
    data = measure() if args.measure or not DATA.exists() else json.loads(DATA.read_text())
    make_plots(data)


if __name__ == "__main__":
    main()
