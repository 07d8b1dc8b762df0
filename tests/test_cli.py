"""The ``symgrad`` command line, run as ``python -m symgrad`` in a subprocess."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import symgrad as sg
from tests.runtime.test_artifact import contract_program
from symgrad.cli import main

BUILDER = textwrap.dedent('''
    import numpy as np
    import symgrad as sg


    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 3], "float32")
            w = sg.parameter("w", [3], "float32", init=np.array([1.0, 2.0, 3.0], "float32"))
            y = sg.tanh(x * w) + 1.0
        return prog, [y]


    def other():
        prog, fetches = build()
        return prog, fetches


    def broken():
        return 42


    def crashes():
        raise RuntimeError("builder exploded")
''')


def symgrad(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "symgrad", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def model_py(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(BUILDER)
    return path


@pytest.fixture
def artifact_dir(tmp_path):
    """An artifact saved in-process, and the compiled program it was saved from."""
    prog, fetches = contract_program()
    compiled = sg.compile(prog, fetches)
    return compiled.save(str(tmp_path / "artifact")), compiled


# --- usage errors: exit status 2 --------------------------------------------------------------
def test_usage_error_exits_2():
    proc = symgrad("frobnicate")
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("args", [(), ("dump",), ("compile", "m.py"),
                                  ("dump", "m.py", "--backend", "tpu"),
                                  ("run", "a", "--input", "x")])
def test_usage_errors_in_process(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "usage:" in captured.err and captured.out == ""


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"symgrad {sg.__version__} (NumPy ")


@pytest.mark.parametrize("args", [("--help",), ("dump", "--help"), ("compile", "--help")])
def test_help_describes_the_builder_contract(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "FILE.py[:builder]" in out and "(default: build)" in out
    assert "takes no arguments and returns (program, fetch_list)" in out
    assert "def build():" in out and "return prog, [y]" in out


# --- ops ----------------------------------------------------------------------------------------
def test_ops_lists_the_registry():
    proc = symgrad("ops")
    assert proc.returncode == 0, proc.stderr
    for name in ("add", "tanh", "matmul", "data"):
        assert name in proc.stdout


# --- run / inspect ------------------------------------------------------------------------------
def test_run_prints_a_summary(artifact_dir, tmp_path):
    path, compiled = artifact_dir
    x = np.random.default_rng(1).standard_normal((2, 4)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("y: float32[2, 3]  min=")
    assert any(line.startswith("output_1: float32[]") for line in lines)
    assert lines[-1] == "dims: ?0=2"    # how the feeds bound the symbolic dims


def test_run_writes_outputs(artifact_dir, tmp_path):
    path, compiled = artifact_dir
    x = np.random.default_rng(2).standard_normal((3, 4)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output", out)
    assert proc.returncode == 0, proc.stderr
    expected = compiled(x)
    with np.load(out, allow_pickle=False) as saved:
        assert list(saved) == ["y", "output_1"]
        assert saved["y"].tobytes() == expected[0].tobytes()
        assert saved["output_1"].tobytes() == expected[1].tobytes()


def test_run_failures_exit_1(artifact_dir, tmp_path):
    path, _ = artifact_dir
    np.save(tmp_path / "bad.npy", np.ones((2, 5), "float32"))
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'bad.npy'}")
    assert proc.returncode == 1 and "dim 1 must be 4" in proc.stderr
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'missing.npy'}")
    assert proc.returncode == 1 and "cannot read input 'x'" in proc.stderr
    proc = symgrad("run", tmp_path / "nowhere")
    assert proc.returncode == 1 and "no artifact" in proc.stderr
    with open(os.path.join(path, "numpy", "program.py"), "a") as handle:
        handle.write("\nraise SystemExit(0)\n")
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float32"))
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}")
    assert proc.returncode == 1 and "modified" in proc.stderr


def test_run_names_its_outputs(artifact_dir, tmp_path, capsys):
    path, compiled = artifact_dir
    x = np.random.default_rng(3).standard_normal((2, 4)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "named.npz"
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--names", "pred, total",
                 "--output", str(out)]) == 0
    expected = compiled(x)
    with np.load(out, allow_pickle=False) as saved:
        assert list(saved) == ["pred", "total"]
        assert saved["total"].tobytes() == expected[1].tobytes()
    capsys.readouterr()
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--names", "a,b"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("a: float32[2, 3]") and printed[-3].startswith("b: float32[]")
    assert printed[-1] == "dims: ?0=2"


@pytest.mark.parametrize("names, message", [
    ("only_one", "gives 1 name(s) (only_one) for 2 output(s)"),
    ("a,2b", "'2b' is not a valid name"),
    ("a,a", "'a' given more than once"),
])
def test_run_names_must_fit_the_outputs(artifact_dir, tmp_path, capsys, names, message):
    path, _ = artifact_dir
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float32"))
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--names", names]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"0.5, 1.0, 2.0, 3.0\n1, 2, 3, 4\n", "it is a text file, not a NumPy .npy array"),
    (b"PK\x03\x04" + bytes(40), "it is a zip archive (an .npz?)"),
    (bytes(range(256)), "it is not a NumPy .npy array"),
])
def test_run_says_when_an_input_is_not_npy(artifact_dir, tmp_path, capsys, content, message):
    path, _ = artifact_dir
    (tmp_path / "x.npy").write_bytes(content)
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot read input 'x' from {tmp_path / 'x.npy'}: {message}" in err
    assert "numpy.save('x.npy', array)" in err and "pickled" not in err


def test_inspect(artifact_dir):
    path, _ = artifact_dir
    proc = symgrad("inspect", path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "format 4" in out and "backend numpy" in out
    assert "x: float32[?0, 4]  (data)" in out and "w: float32[4, 3]  (parameter)" in out
    assert "0. y: float32[?0, 3]" in out
    assert "standalone entry: numpy/standalone.py:run" in out
    assert "ops_before: 7" in out
    assert "numpy/program.py" in out and "program.json" in out


def _rewrite_manifest(path, change):
    manifest_path = os.path.join(path, "manifest.json")
    with open(manifest_path) as handle:
        manifest = json.load(handle)
    change(manifest)
    with open(manifest_path, "w") as handle:
        json.dump(manifest, handle)


def test_inspect_escapes_control_characters(artifact_dir):
    path, _ = artifact_dir
    _rewrite_manifest(path, lambda m: (m["stats"].update({"\x1b[2Jevil": "\x1b]0;title\x07"}),
                                       m["versions"].update(symgrad="1\r\n\x1b[31m")))
    proc = symgrad("inspect", path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b[2Jevil" in proc.stdout


def test_run_output_member_names_are_never_raw(tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float32")
        outputs = [x + 1.0, x + 2.0, x + 3.0, x + 4.0]
        for value, name in zip(outputs, ["../../evil", "ok_name", "\x1b[31m", "ok_name2"]):
            value.name = name
    path = sg.compile(prog, outputs).save(str(tmp_path / "a"))
    np.save(tmp_path / "x.npy", np.ones(2, "float32"))
    out = tmp_path / "out.npz"
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as saved:
        assert list(saved) == ["output_0", "ok_name", "output_2", "ok_name2"]


def test_run_says_when_a_cuda_artifact_runs_on_numpy(tmp_path):
    prog, fetches = contract_program()
    path = sg.compile(prog, fetches, backend="cuda").save(str(tmp_path / "a"), cubin_archs=[])
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float32"))
    proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}")
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert proc.returncode == 0, proc.stderr
        assert "symgrad: warning:" in proc.stderr and "runs on its NumPy module" in proc.stderr
        proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--backend", "numpy")
        assert proc.returncode == 0 and proc.stderr == ""
        proc = symgrad("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--backend", "cuda")
        assert proc.returncode == 1 and "CuPy" in proc.stderr


def test_run_and_inspect_say_what_happens_to_the_state(tmp_path, capsys):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float32")
        w = sg.parameter("w", [2], "float32", init=1.0)
        y = x * w
        sg.assign(w + 1.0, w)
    path = sg.compile(prog, [y]).save(str(tmp_path / "a"))
    np.save(tmp_path / "x.npy", np.ones(2, "float32"))
    for _ in range(2):   # the artifact is not changed by a run
        assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}"]) == 0
        out, err = capsys.readouterr()
        assert "[1., 1.]" in out
        assert "updates its state (w)" in err and "did not write the updated values back" in err
    assert main(["inspect", path]) == 0
    assert "state (parameters each call updates): w" in capsys.readouterr().out


def test_signing_from_the_command_line(model_py, tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"s3cret\n")
    artifact = tmp_path / "art"
    proc = symgrad("compile", f"{model_py}:build", "-o", artifact, "--key-file", key)
    assert proc.returncode == 0, proc.stderr
    proc = symgrad("inspect", artifact, "--key-file", key)
    assert proc.returncode == 0 and "signature verified" in proc.stdout, proc.stderr
    sg.load(str(artifact), key=b"s3cret")
    key.write_bytes(b"other")
    proc = symgrad("inspect", artifact, "--key-file", key)
    assert proc.returncode == 1 and "does not match the key" in proc.stderr


def test_inspect_refuses_newer_format(artifact_dir):
    path, _ = artifact_dir
    manifest_path = os.path.join(path, "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["format_version"] = 99
    json.dump(manifest, open(manifest_path, "w"))
    proc = symgrad("inspect", path)
    assert proc.returncode == 1 and "newer" in proc.stderr


# --- dump / compile -----------------------------------------------------------------------------
@pytest.mark.parametrize("target, message", [
    ("missing.py", "no such file"),
    ("model.py:nothing", "defines no function 'nothing'"),
    ("model.py:broken", "must return (program, fetch_list)"),
    ("model.py:crashes", "builder exploded"),
])
def test_dump_builder_errors_exit_1(model_py, target, message):
    proc = symgrad("dump", target, cwd=model_py.parent)
    assert proc.returncode == 1
    assert message in proc.stderr


def test_dump_cuda_renders_or_says_unavailable(model_py):
    proc = symgrad("dump", "model.py", "--backend", "cuda", cwd=model_py.parent)
    if proc.returncode == 1:
        assert "cuda backend is not available" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert "__global__" in proc.stdout


def test_dump_prints_the_generated_module(model_py):
    proc = symgrad("dump", "model.py", cwd=model_py.parent)
    assert proc.returncode == 0, proc.stderr
    assert "def run(" in proc.stdout and "CONSTANTS" in proc.stdout
    compile(proc.stdout, "dumped", "exec")
    proc = symgrad("dump", "model.py:other", "--ir", cwd=model_py.parent)
    assert proc.returncode == 0, proc.stderr
    assert "tanh" in proc.stdout and "def run(" not in proc.stdout


def test_dump_out_writes_files(model_py, tmp_path):
    out = tmp_path / "dumped"
    proc = symgrad("dump", model_py, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(out) == ["build_numpy.py"]
    assert "def run(" in (out / "build_numpy.py").read_text()


def test_compile_then_run(model_py, tmp_path):
    artifact = tmp_path / "art"
    proc = symgrad("compile", f"{model_py}:build", "-o", artifact)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(artifact)
    x = np.ones((2, 3), "float32")
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    proc = symgrad("run", artifact, "--input", f"x={tmp_path / 'x.npy'}", "--output", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["output_0"], np.tanh(x * [1, 2, 3]) + 1, rtol=1e-6)


@pytest.mark.skipif(shutil.which("symgrad") is None, reason="console script not installed")
def test_console_script():
    proc = subprocess.run(["symgrad", "ops"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "tanh" in proc.stdout
