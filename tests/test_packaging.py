"""`pip install .` (not editable) must ship the Jinja templates: build a wheel and look inside."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_package_and_templates(tmp_path):
    result = subprocess.run(  # an isolated build, exactly as `pip install .` does it
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    wheel, = tmp_path.glob("symgrad-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "symgrad/__init__.py" in names
    assert "symgrad/ir/program.py" in names
    templates = [n for n in names if n.startswith("codegen_templates/") and n.endswith(".j2")]
    expected = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "codegen_templates").rglob("*.j2"))
    assert expected, "no templates in the source tree"
    assert sorted(templates) == expected
