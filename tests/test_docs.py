"""The documentation builds, and its runnable code blocks run.

A Python code block preceded by the line ``<!-- runnable -->`` is runnable. The runnable blocks
of one page run in order as one script (a page reads like one session), in a fresh Python
process (so a page's custom ops and VJP changes stay there) and a temporary working directory,
with ``backend="numpy"`` as written. Unmarked blocks are only checked by the mkdocs build.
"""
import argparse
import ast
import fcntl
import html
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
RUNNABLE = re.compile(r"<!-- runnable -->\s*\n```python\n(.*?)\n```", re.DOTALL)


def runnable_blocks(page: Path) -> list[str]:
    return RUNNABLE.findall(page.read_text(encoding="utf-8"))


def test_pages_exist():
    names = {p.name for p in PAGES}
    for required in ("index.md", "getting-started.md", "grad.md", "performance.md"):
        assert required in names


def test_getting_started_has_runnable_code():
    assert runnable_blocks(DOCS / "getting-started.md")


@pytest.mark.parametrize("page", [p for p in PAGES if runnable_blocks(p)], ids=lambda p: p.name)
def test_runnable_blocks(page, tmp_path):
    script = tmp_path / f"doc_{page.stem.replace('-', '_')}.py"
    script.write_text("\n\n".join(runnable_blocks(page)) + "\n", encoding="utf-8")
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (f"{page.name}: a runnable block failed\n"
                                    f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The site, built once per test run with ``mkdocs build --strict`` (pytest-xdist workers
    share the run's temporary root: the first builds under a lock, the others reuse it)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):   # gw0, gw1...: the run's root is the parent
        shared = shared.parent
    target = shared / "docs-site"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "index.html").exists():
            env = dict(os.environ, MPLBACKEND="Agg", NO_MKDOCS_2_WARNING="1")
            result = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                 str(target)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return target


def page_text(site, page) -> str:
    """The visible text of a built page (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text()))


def test_mkdocs_build_strict(site):
    assert (site / "index.html").exists()
    assert (site / "grad" / "index.html").exists()
    assert "md-content" in (site / "index.html").read_text()     # Material for MkDocs


def test_api_reference_shows_no_raw_roles_or_internal_attributes(site):
    source = (site / "api" / "index.html").read_text()
    text = page_text(site, "api")
    assert not re.findall(r":(?:class|func|meth|mod|data|attr|exc|obj):", text)
    assert re.search(r'<a [^>]*href="#symgrad\.runtime\.options\.CompileOptions"[^>]*>'
                     r"<code>CompileOptions</code></a>", source)
    for internal in (r"_program_ids", r"\buid\b", r"cached_scalar_constant"):
        assert not re.search(internal, text), internal
    headings = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h[2-6][^>]*>(.*?)</h[2-6]>",
                                                                source, re.DOTALL)]
    assert not [h for h in headings if " = " in h]           # no `attribute = value` lines
    for public in ("ir.program.Program.feedable", "ir.value.Value.ndim",
                   "runtime.compiled.CompiledProgram.save", "runtime.compile.Executor.run"):
        assert f'id="symgrad.{public}"' in source
    assert ".astype(dtype)" in text            # the operators and methods the ops install


def api_entries(source: str) -> dict:
    """``{identifier: text}`` of the API page: the text under each object's heading, up to
    the next heading."""
    parts = re.split(r'<h[2-6] id="(symgrad\.[\w.]+)".*?</h[2-6]>', source, flags=re.DOTALL)
    return {ident: html.unescape(re.sub(r"<[^>]+>", "", body.split("<h", 1)[0])).strip()
            for ident, body in zip(parts[1::2], parts[2::2])}


def test_api_reference_lists_each_grad_parameter_as_an_item(site):
    from symgrad.autodiff.ir_backward import grad

    source = (site / "api" / "index.html").read_text()
    section = source.split('id="symgrad.autodiff.ir_backward.grad"', 1)[1].split("<h3", 1)[0]
    items = re.findall(r'<li class="doc-section-item[^"]*">\s*<b><code>(\w+)</code></b>',
                       section)
    assert items == list(inspect.signature(grad).parameters)
    assert "Returns:" in section


def test_api_reference_describes_every_program_member(site):
    entries = api_entries((site / "api" / "index.html").read_text())
    members = [ident for ident in entries if ident.startswith("symgrad.ir.program.Program.")]
    for name in ("ops", "num_ops", "global_block", "inputs", "parameters", "to_dot"):
        assert f"symgrad.ir.program.Program.{name}" in members, name
    assert not [ident for ident in members if not entries[ident]]


def test_aot_cli_page_lists_the_backends_the_cli_accepts():
    from symgrad.backends import available_backends
    from symgrad.cli import make_parser

    commands = next(action for action in make_parser()._actions
                    if isinstance(action, argparse._SubParsersAction)).choices

    def backend_choices(command):
        choices, = [a.choices for a in commands[command]._actions
                    if "--backend" in a.option_strings]
        return choices

    rows = {m[1]: m[0] for m in re.finditer(r"^\| `symgrad (\w+) .*$",
                                            (DOCS / "aot-cli.md").read_text(), re.MULTILINE)}
    for name in ("dump", "compile"):
        listed = re.search(r"--backend \{([\w,]+)\}\]", rows[name])[1].split(",")
        assert listed == backend_choices(name), name
    assert sorted(backend_choices("compile")) == sorted(available_backends())


def test_no_page_shows_an_escaped_pipe(site):
    """``\\|`` in a table's code span is printed as it is written (backslash included)."""
    shown = [page.stem for page in PAGES
             if "\\|" in page_text(site, "" if page.stem == "index" else page.stem)]
    assert not shown


def test_inline_code_keeps_hyphenated_tokens_on_one_line(site):
    """The MkDocs hook wraps each token of inline code holding punctuation, which browsers
    may end a line after, in a span the stylesheet keeps on one line; code blocks are left
    alone."""
    source = (site / "codegen" / "index.html").read_text()
    assert '<code><span class="nobreak">-fno-trapping-math</span></code>' in source
    assert "<pre" in source and not re.search(r"<pre[^>]*>(?:(?!</pre>).)*nobreak", source,
                                              re.DOTALL)


def test_docs_say_how_to_build_and_serve_them(site):
    for text in ((DOCS / "development.md").read_text(), (ROOT / "README.md").read_text()):
        assert "mkdocs serve" in text and "mkdocs build --strict" in text
        assert 'pip install -e ".[docs]"' in text
    assert (site / "development" / "index.html").exists()


def test_performance_page_has_the_framework_rows():
    text = (DOCS / "performance.md").read_text()
    for row in ("W2 JAX jit(grad)", "W2 PyTorch torch.compile"):
        line, = [line for line in text.splitlines() if line.startswith(f"| {row} |")]
        assert re.search(r"\d+(\.\d+)? ms", line) and "skipped" not in line, line


def test_paths_the_docs_name_exist():
    named = set()
    for page in [*PAGES, ROOT / "README.md"]:
        named |= set(re.findall(r"`((?:tests|docs|examples|benchmarks|symgrad)/[\w./-]+)`",
                                page.read_text(encoding="utf-8")))
    assert named and not sorted(path for path in named if not (ROOT / path).exists())


def test_docstrings_use_fields_the_api_reference_parses():
    """mkdocstrings reads the docstrings in Sphinx style (mkdocs.yml): a parameter list must
    be ``:param name: text`` fields. A NumPy-like list (a line of names, the text indented
    below it) renders as one run-on paragraph."""
    definition_list = re.compile(r"^\w+(?:, \w+)*\n {2,}\S", re.MULTILINE)
    found = []
    for path in sorted((ROOT / "symgrad").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node) or ""
                if definition_list.search(docstring):
                    found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'name', '')}")
    assert not found


def layout_checker():
    """docs/scripts/check_layout.py as a module; skips the test when no Chromium is installed
    (CI installs with pip, which cannot install a browser)."""
    sys.path.insert(0, str(DOCS / "scripts"))
    try:
        import check_layout
    finally:
        sys.path.pop(0)
    if check_layout.find_browser() is None:
        pytest.skip("no Chromium installed (Debian: apt-get install -y chromium)")
    return check_layout


@pytest.mark.slow
def test_pages_fit_a_1280px_screen(site):
    """In headless Chromium at 1280 x 900 px nothing is cut off, hidden behind a scroll bar,
    broken mid-word, covered or drawn too small on any page (see check_layout.py), and the
    program graphs are drawn at their natural size."""
    check_layout = layout_checker()
    report = check_layout.measure_site(site, width=1280, height=900)
    assert "/index.html" in report and "/grad/index.html" in report
    assert {page: problems for page, found in report.items()
            if (problems := check_layout.problems(site, found))} == {}
    graphs = [image for found in report.values() for image in found["images"]
              if image["src"].endswith(("mlp_forward_backward.svg", "rnn_scan.svg"))]
    assert len(graphs) == 3 and all(image["shown"] == image["natural"] for image in graphs)


BAD_PAGE = """<!doctype html><html><head><style>
  body { margin: 0; font: 16px sans-serif; }
  .md-content { width: 600px; margin-left: 100px; }
  table { width: 200px; table-layout: fixed; } td { word-break: break-all; }
  .sticky { position: absolute; top: 0; left: 0; width: 300px; height: 30px; background: #eee; }
</style></head><body><div class="md-content"><div class="md-content__inner">
  <div style="position: relative"><p>Text under the box drawn over it.</p>
    <div class="sticky"></div></div>
  <pre style="overflow-x: auto"><code>a line of code far longer than the column it sits in, __________________________________________________</code></pre>
  <div style="overflow-x: auto"><table style="width: 900px"><tr><td>a</td><td>hidden</td></tr></table></div>
  <table><tr><td>grad_outputs_and_more</td><td>retain_graph_of_it</td></tr></table>
  <img src="wide.svg">
  <img src="small.svg" style="width: 100px">
  <img src="tall.svg">
</div></div></body></html>"""


def svg_picture(width, height, font_size) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><text x="5" y="20" font-size="{font_size}">'
            f"label</text></svg>")


@pytest.mark.slow
def test_layout_check_fails_a_page_wider_than_its_column(tmp_path):
    """The check finds each kind of problem on a page made to have them all."""
    check_layout = layout_checker()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "index.html").write_text(BAD_PAGE)
    for name, size in {"wide": (900, 100, 14), "small": (400, 100, 14),
                       "tall": (300, 1200, 14)}.items():
        (tmp_path / "bad" / f"{name}.svg").write_text(svg_picture(*size))
    found = check_layout.measure_site(tmp_path, width=1280, height=900)["/bad/index.html"]
    problems = check_layout.problems(tmp_path, found)
    expected = {
        "cut off": r'img ends at \d+px, past 700px',
        "code scrolled": r'^pre "a line of code .* shows 600px of its \d+px \(behind a scroll bar\)',
        "table scrolled": r'^div "ahidden" shows 600px of its 900px',
        "identifier broken": r'^"grad_outputs_and_more" is broken across lines',
        "text covered": r'^p "Text under the box.*" lies under div\.sticky',
        "text too small": r"^small\.svg draws its smallest text 3\.5px high",
        "picture too tall": r"^tall\.svg is shown 1200px tall, taller than the 900px screen",
    }
    missing = {kind: pattern for kind, pattern in expected.items()
               if not any(re.search(pattern, problem) for problem in problems)}
    assert not missing, (missing, problems)
