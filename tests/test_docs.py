"""The documentation builds, and its runnable code blocks run.

A Python code block preceded by the line ``<!-- runnable -->`` is runnable. The runnable blocks
of one page run in order as one script (a page reads like one session), in a fresh Python
process (so a page's custom ops and VJP changes stay there) and a temporary working directory,
with ``backend="numpy"`` as written. Unmarked blocks are only checked by the mkdocs build.
"""
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


def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "grad" / "index.html").exists()
