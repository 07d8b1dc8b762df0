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


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    env = dict(os.environ, SYMGRAD_EXAMPLE_QUICK="1", MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{script.name} printed nothing"
    claimed = documented_op_counts().get(script.name)
    if claimed is not None:   # the docs quote the count the script prints
        assert f"{claimed} ops" in result.stdout, (claimed, result.stdout[:300])


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
