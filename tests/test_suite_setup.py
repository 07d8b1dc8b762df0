"""The README's test command: it runs the suite on every core (pytest-xdist), the `slow`
marker names the tests that take seconds, and a run that collects nothing still fails."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")   # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The shell line after the ``<!-- test-command -->`` marker (what .ci/run executes)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    marker = lines.index("<!-- test-command -->")
    return lines[marker + 2]


def slow_tests() -> list[str]:
    """``file::function`` of every test function decorated with ``pytest.mark.slow``."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "pytest.mark.slow" for d in node.decorator_list):
                found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def test_readme_runs_the_suite_on_every_core():
    command = readme_test_command()
    assert re.search(r"python -m pytest -q -n (auto|\d+) --dist worksteal$", command), command
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(req.startswith("pytest-xdist") for req in extras["test"])


def test_slow_marker_is_declared_used_and_documented():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(marker.startswith("slow:") for marker in config["markers"])
    marked = slow_tests()
    for scale_test in ("tests/ir/test_scale.py::test_build_100k_op_chain",
                       "tests/autodiff/test_long_chain.py::test_hundred_thousand_op_chain",
                       "tests/passes/test_pipeline.py::test_full_pipeline_on_a_100000_op_chain"):
        assert scale_test in marked
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert '-m "not slow"' in readme
    assert re.search(r"takes about \d+(\.\d+)? minutes? on a 2-core machine", readme)


@pytest.mark.slow
def test_a_run_that_collects_nothing_exits_5(tmp_path):
    """CI fails on any non-zero status: with xdist, collecting no test is still status 5."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "xdist",
                             str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 5, result.stdout[-2000:] + result.stderr[-2000:]
