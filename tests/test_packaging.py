"""`pip install .` (not editable) must ship the Jinja templates: build a wheel and look inside."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_package_and_templates(tmp_path):
    # Build from a copy of the sources, so a stale in-tree build/ directory cannot leak
    # files that the sources no longer have into the wheel.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", ".venv*", ".git", "__pycache__", ".pytest_cache",
        ".hypothesis", "site", "gpu_logs"))
    wheels = tmp_path / "wheels"
    result = subprocess.run(  # an isolated build, exactly as `pip install .` does it
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    wheel, = wheels.glob("symgrad-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "symgrad/__init__.py" in names
    assert "symgrad/ir/program.py" in names
    templates = [n for n in names if n.startswith("codegen_templates/") and n.endswith(".j2")]
    expected = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "codegen_templates").rglob("*.j2"))
    assert expected, "no templates in the source tree"
    assert sorted(templates) == expected
