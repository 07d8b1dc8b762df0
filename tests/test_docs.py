"""The documentation builds, and its runnable code blocks run.

A Python code block preceded by the line ``<!-- runnable -->`` is runnable. The runnable blocks
of one page run in order as one script (a page reads like one session), in a fresh Python
process (so a page's custom ops and VJP changes stay there) and a temporary working directory,
with ``backend="numpy"`` as written. Unmarked blocks are only checked by the mkdocs build.
"""
import fcntl
import html
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


def test_docs_say_how_to_build_and_serve_them(site):
    for text in ((DOCS / "development.md").read_text(), (ROOT / "README.md").read_text()):
        assert "mkdocs serve" in text and "mkdocs build --strict" in text
        assert 'pip install -e ".[docs]"' in text
    assert (site / "development" / "index.html").exists()


def test_performance_page_has_the_framework_rows():
    text = (DOCS / "performance.md").read_text()
    for row in ("W2 JAX jit(grad)", "W2 PyTorch torch.compile"):
        line, = [line for line in text.splitlines() if line.startswith(row)]
        assert re.search(r"\d+(\.\d+)? ms", line) and "skipped" not in line, line


@pytest.mark.slow
def test_pages_fit_a_1280px_screen(site):
    """In headless Chromium at 1280 px: nothing is cut off, tables fit without a scroll bar,
    and the front page's program graph is drawn at half its size or more, with a link to the
    full-size picture (skips when no Chromium is installed)."""
    sys.path.insert(0, str(DOCS / "scripts"))
    try:
        import check_layout
    finally:
        sys.path.pop(0)
    if check_layout.find_browser() is None:
        pytest.skip("no Chromium installed (Debian: apt-get install -y chromium)")
    report = check_layout.measure_site(site, width=1280)
    assert "/index.html" in report and "/grad/index.html" in report
    for page, found in report.items():
        assert not found["cut"], (page, found["cut"])
        assert not check_layout.scrolled_tables(found), page
    graph, = [image for image in report["/index.html"]["images"]
              if image["src"].endswith("mlp_forward_backward.svg")]
    assert graph["shown"] >= 0.5 * graph["natural"] and graph["full_size_link"], graph
