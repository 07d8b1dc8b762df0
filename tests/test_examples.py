"""Every script in examples/ runs to completion (examples assert what they claim).

Examples read SYMGRAD_EXAMPLE_QUICK=1 to shorten long runs (fewer epochs/steps).
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
CORE_IMPORTS = {"numpy", "symgrad"}                 # what `pip install -e .` provides
EXTRA_DISTRIBUTIONS = {"sklearn": "scikit-learn"}   # import name -> what pip installs


def documented_op_counts() -> dict:
    """``{script: ops}`` for the rows of docs/examples.md that state an op count."""
    counts = {}
    for line in (ROOT / "docs" / "examples.md").read_text().splitlines():
        script = re.match(r"\| `(\w+\.py)` \|", line)
        count = re.search(r"(\d[\d,]*) ops", line)
        if script and count:
            counts[script.group(1)] = int(count.group(1).replace(",", ""))
    return counts


def third_party_imports(script: Path) -> set:
    tree = ast.parse(script.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) - CORE_IMPORTS


def run_example(script: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run an example in quick mode, its output piped (as into a file or a CI log); stdout
    and stderr decoded as written (carriage returns kept, not read as line ends)."""
    env = dict(os.environ, SYMGRAD_EXAMPLE_QUICK="1", MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env,
                            capture_output=True, timeout=600)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    result = run_example(script, tmp_path)
    assert result.stdout.strip(), f"{script.name} printed nothing"
    # Progress bars redraw themselves on a terminal only: piped, no carriage returns or
    # terminal escape sequences.
    assert not re.search(r"[\r\x1b]", result.stdout), (script.name, result.stdout[:300])
    claimed = documented_op_counts().get(script.name)
    if claimed is not None:   # the docs quote the count the script prints
        assert f"{claimed} ops" in result.stdout, (claimed, result.stdout[:300])


def test_quickstart_prints_the_program_its_source_comments_quote(tmp_path):
    """The generated source's comments quote the optimized program (``%9 = size(%3)``), not
    the program as built (``%9 = size(%6)``): the quickstart prints both, each under a
    heading saying which it is, and every op the source quotes is in the optimized one."""
    out = run_example(ROOT / "examples" / "quickstart.py", tmp_path).stdout
    sections = dict(re.findall(r"^== (.+?) ==\n(.*?)(?=^== |\Z)", out, re.MULTILINE | re.DOTALL))
    built = sections["the program as built (forward and backward)"]
    optimized = sections["the optimized program the source is generated from (fn.ir)"]
    source = sections["generated NumPy source (its comments quote the optimized program)"]
    quoted = re.findall(r"# (%\w+(?:, %\w+)* = \w+\([^)]*\))", source)
    assert len(quoted) > 5
    assert [op for op in quoted if op not in optimized] == []
    assert [op for op in quoted if op not in built]   # the passes did change some


def test_the_examples_page_names_the_examples_that_need_the_extra():
    """docs/examples.md's sentence about the `examples` extra names exactly the scripts that
    import more than `pip install -e .` gives."""
    text = (ROOT / "docs" / "examples.md").read_text()
    paragraph, = [p for p in text.split("\n\n") if 'pip install -e ".[examples]"' in p]
    assert set(re.findall(r"`(\w+\.py)`", paragraph)) == {
        script.name for script in EXAMPLES if third_party_imports(script)}


def test_the_docs_quote_op_counts():
    assert documented_op_counts() == {"mass_spring.py": 5190}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_the_readme_names_the_extra_an_example_needs(script):
    """An example importing more than `pip install -e .` gives is named in the README with
    the `examples` extra, and that extra installs what it imports."""
    needed = third_party_imports(script)
    if not needed:
        return
    readme = (ROOT / "README.md").read_text()
    assert script.name in readme and 'pip install -e ".[examples]"' in readme
    extra = re.search(r"^examples = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(),
                      re.MULTILINE).group(1)
    for name in needed:
        assert EXTRA_DISTRIBUTIONS.get(name, name) in extra, name
