"""Artifacts that cannot run foreign code (issues #12 and #24): symgrad.load runs only what
symgrad generates from program.json, the whole manifest is cross-checked and no field of it
switches a check off, unlisted files are refused (cached bytecode only when it is the
compilation of a verified module), signed artifacts are authenticated, sizes are bounded
before reading, and saves are atomic even when killed."""
import importlib.util
import io
import itertools
import json
import os
import py_compile
import runpy
import shutil
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import symgrad as sg
from symgrad.cli import main
from symgrad.runtime import artifact, standalone
from tests.runtime.test_artifact import _rewrite_manifest, manifest_of, replace_file

KEY = b"a key only the owner has"
# executed by a module of the artifact, it proves that foreign code ran
MARKER_CODE = "open(__import__('os').environ['SYMGRAD_TEST_MARKER'], 'w').close()\n"


def build():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.parameter("w", [4, 3], "float32", init=np.arange(12, dtype="float32").reshape(4, 3))
        b = sg.parameter("b", [3], "float32", init=np.array([1, -1, 2], "float32"))
        y = sg.tanh(x @ w * 0.1) + b
    return prog, [y]


@pytest.fixture(scope="module")
def compiled():
    prog, fetches = build()
    return sg.compile(prog, fetches)


@pytest.fixture(scope="module")
def templates(compiled, tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    return {"plain": compiled.save(str(folder / "plain")),
            "signed": compiled.save(str(folder / "signed"), key=KEY)}


@pytest.fixture
def saved(templates, tmp_path):
    return shutil.copytree(templates["plain"], str(tmp_path / "model"))


@pytest.fixture
def signed(templates, tmp_path):
    return shutil.copytree(templates["signed"], str(tmp_path / "model"))


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "foreign-code-ran"
    monkeypatch.setenv("SYMGRAD_TEST_MARKER", str(path))
    return path


X = np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4)


def _expected(compiled):
    return compiled(X)[0]


def _as_other_symgrad(path):
    """Make the manifest say that another symgrad build wrote the artifact."""
    manifest = manifest_of(path)
    manifest["generator"] = "0" * 64
    with open(os.path.join(path, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)


# --- symgrad.load runs only code symgrad generates ------------------------------------------------
def _module_with_marker(path):
    source = open(os.path.join(path, "numpy", "program.py"), "rb").read()
    replace_file(path, "numpy/program.py",
                 source.replace(b"np.tanh", b"np.sinh") + b"\n" + MARKER_CODE.encode())


def test_a_rewritten_module_with_its_hash_is_refused(saved, marker):
    _module_with_marker(saved)
    with pytest.raises(sg.ArtifactError, match="numpy/program.py is not what symgrad generates"):
        sg.load(saved)
    assert not marker.exists()


def test_a_rewritten_module_never_runs_even_from_another_symgrad(saved, marker, compiled):
    _module_with_marker(saved)
    _as_other_symgrad(saved)
    with pytest.raises(sg.ArtifactError, match="numpy/program.py is not what symgrad generates"
                                               ".*another symgrad build.*check_generated=False"):
        sg.load(saved)
    loaded = sg.load(saved, check_generated=False)   # the caller's choice, never the manifest's
    assert not loaded.checked_files
    np.testing.assert_array_equal(loaded(X)[0], _expected(compiled))   # tanh, not sinh
    assert not marker.exists()


def _standalone_with_marker(path):
    source = open(os.path.join(path, "numpy", "standalone.py"), "rb").read()
    replace_file(path, "numpy/standalone.py", MARKER_CODE.encode() + source)


def test_a_zero_generator_switches_no_comparison_off(saved, marker):
    """Issue #24 item 5: a manifest whose generator is zeros made sg.load skip comparing the
    generated files, so an edited numpy/standalone.py (hash rewritten) was accepted, to run
    later standalone or on map_reduce's workers."""
    _standalone_with_marker(saved)
    _as_other_symgrad(saved)
    with pytest.raises(sg.ArtifactError, match="numpy/standalone.py is not what symgrad "
                                               "generates"):
        sg.load(saved)
    assert not marker.exists()


@pytest.mark.parametrize("generator", ["0" * 64, None, "missing"])
def test_no_generator_value_switches_the_comparison_off(saved, generator):
    source = open(os.path.join(saved, "numpy", "program.py"), "rb").read()
    replace_file(saved, "numpy/program.py", source + b"\nx = 1\n")
    _rewrite_manifest(saved, lambda m: m.pop("generator") if generator == "missing"
                      else m.update(generator=generator))
    with pytest.raises(sg.ArtifactError, match="numpy/program.py is not what symgrad generates"):
        sg.load(saved)


def test_format_version_1_cannot_switch_the_size_checks_off(saved):
    """Format 1 had no sizes: a manifest saying format 1 turned off the size checks made
    before a file is read (a zip bomb's defence)."""
    _rewrite_manifest(saved, lambda m: (m.update(format_version=1), m.pop("sizes")))
    with pytest.raises(sg.ArtifactError, match="format version 1 is no longer read"):
        sg.load(saved)
    with pytest.raises(standalone.ArtifactIntegrityError, match="format version 1"):
        standalone.load(saved)


def test_swapped_constants_in_the_manifest(saved, compiled):
    def swap(manifest):
        table = manifest["constants"]
        table["w"], table["b"] = table["b"], table["w"]
    manifest = manifest_of(saved)
    swap(manifest)
    with open(os.path.join(saved, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    with pytest.raises(sg.ArtifactError, match="constants table does not match"):
        sg.load(saved)
    _as_other_symgrad(saved)   # saying so switches no check off
    with pytest.raises(sg.ArtifactError, match="constants table does not match"):
        sg.load(saved)
    # the caller may load it without the comparison: the table is then not used at all
    np.testing.assert_array_equal(sg.load(saved, check_generated=False)(X)[0],
                                  _expected(compiled))


@pytest.mark.parametrize("field, change, error", [
    ("inputs", lambda m: m["inputs"][0].update(dtype="int32"), "describes input 'x'"),
    ("inputs", lambda m: m["inputs"].pop(1), "does not list the input"),
    ("outputs", lambda m: m["outputs"][0].update(shape=[None, 4], dims=["?0", 4]),
     "outputs differ"),
    ("entry_points", lambda m: m["entry_points"]["numpy"].update(function="evil"),
     "entry points"),
    ("standalone", lambda m: m["standalone"].update(module="constants/0.npy"), "entry points"),
    ("options", lambda m: m["options"].update(passes=["prune", "os.system"]), "passes"),
    ("files", lambda m: (m["files"].update({"extra.py": m["files"]["program.json"]}),
                         m["sizes"].update({"extra.py": m["sizes"]["program.json"]})),
     "extra.py"),
])
def test_manifest_fields_are_cross_checked(saved, field, change, error):
    manifest = manifest_of(saved)
    change(manifest)
    with open(os.path.join(saved, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    if field == "files":
        shutil.copy(os.path.join(saved, "program.json"), os.path.join(saved, "extra.py"))
    with pytest.raises(sg.ArtifactError, match=error):
        sg.load(saved)


# --- unlisted files, cached bytecode ----------------------------------------------------------------
def _planted_bytecode(path):
    """A __pycache__ .pyc for numpy/standalone.py, as Python's import system would use it."""
    source = os.path.join(path, "numpy", "standalone.py")
    evil = os.path.join(path, "evil.py")
    with open(evil, "w") as handle:
        handle.write(MARKER_CODE)
    stat = os.stat(source)
    os.utime(evil, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    pyc = os.path.join(path, "numpy", "__pycache__",
                       f"standalone.{sys.implementation.cache_tag}.pyc")
    py_compile.compile(evil, cfile=pyc)
    os.remove(evil)
    return pyc


def test_unlisted_cached_bytecode_is_refused_and_never_run(saved, marker):
    _planted_bytecode(saved)
    refused = "__pycache__.*is not the compilation of the verified 'numpy/standalone.py'"
    with pytest.raises(sg.ArtifactError, match=refused):
        sg.load(saved)
    with pytest.raises(standalone.ArtifactIntegrityError, match=refused):
        standalone.load(saved)
    # the documented recipe compiles the verified source, never the cached bytecode
    with pytest.raises(ValueError, match=refused):
        runpy.run_path(os.path.join(saved, "numpy", "standalone.py"))["run"](X)
    assert not marker.exists()


# Imports the artifact's runner (argv[1]) with Python's import system, as argv[2] says, and
# runs it on X; the import writes numpy/__pycache__/standalone.<tag>[.opt-1].pyc.
IMPORT_SCRIPT = """
import importlib.util, os, sys
import numpy as np
folder = os.path.join(sys.argv[1], "numpy")
if sys.argv[2] == "importlib":
    spec = importlib.util.spec_from_file_location("runner", os.path.join(folder, "standalone.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
else:
    sys.path.insert(0, folder)
    import standalone as module
x = np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4)
print(module.run(x)[0].tobytes().hex())
"""


def _import_and_run(path, how):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    options = ["-O"] if how == "import -O" else []
    proc = subprocess.run([sys.executable, *options, "-c", IMPORT_SCRIPT, path, how],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return bytes.fromhex(proc.stdout.strip())


@pytest.mark.parametrize("how", ["import", "importlib", "import -O"])
def test_importing_the_runner_is_supported(saved, compiled, how):
    """Issue #24 item 7: importing numpy/standalone.py writes its cached bytecode into the
    artifact, which made the runner refuse its own artifact on the first call. Bytecode that
    is the compilation of the verified source is accepted, by every check, every time."""
    assert _import_and_run(saved, how) == _expected(compiled).tobytes()
    cached = os.listdir(os.path.join(saved, "numpy", "__pycache__"))
    assert len(cached) == 1 and cached[0].startswith("standalone.")
    assert _import_and_run(saved, how) == _expected(compiled).tobytes()   # from the .pyc
    np.testing.assert_array_equal(sg.load(saved)(X)[0], _expected(compiled))
    np.testing.assert_array_equal(standalone.load(saved)(X)[0], _expected(compiled))
    artifact.inspect(saved)


@pytest.mark.parametrize("change", ["last byte", "header", "other python", "other module"])
def test_cached_bytecode_that_is_not_the_verified_source_is_refused(saved, change):
    source = os.path.join(saved, "numpy", "standalone.py")
    pyc = py_compile.compile(source, cfile=importlib.util.cache_from_source(source),
                             doraise=True)   # as an import writes it: accepted
    standalone.load(saved)
    data = open(pyc, "rb").read()
    renamed = {"other python": pyc.replace(sys.implementation.cache_tag, "cpython-27"),
               "other module": pyc.replace("standalone.", "program.")}   # its bytes unchanged
    if change in renamed:
        os.rename(pyc, renamed[change])
    else:
        with open(pyc, "wb") as handle:   # a constant, name or instruction; the magic number
            handle.write(data[:-1] + bytes([data[-1] ^ 1]) if change == "last byte"
                         else b"\0\0\0\0" + data[4:])
    with pytest.raises(sg.ArtifactError, match="__pycache__"):
        sg.load(saved)
    with pytest.raises(standalone.ArtifactIntegrityError, match="__pycache__"):
        standalone.load(saved)


def test_any_unlisted_file_is_refused(saved):
    with open(os.path.join(saved, "constants", "extra.npy"), "wb") as handle:
        np.save(handle, np.zeros(2))
    with pytest.raises(sg.ArtifactError, match="'constants/extra.npy' is in the artifact but not"):
        sg.load(saved)


# --- signing ----------------------------------------------------------------------------------------
def test_a_signed_artifact_is_verified_before_any_import(signed, marker):
    _module_with_marker(signed)   # hash and size rewritten; the HMAC cannot be
    runner = runpy.run_path(standalone.__file__)   # the owner's trusted copy
    with pytest.raises(ValueError, match="signature of manifest.json does not match"):
        runner["load"](signed, key=KEY)
    with pytest.raises(sg.ArtifactError, match="signature of manifest.json does not match"):
        sg.load(signed, key=KEY)
    assert not marker.exists()


def test_an_attacker_cannot_strip_the_signature(signed):
    os.remove(os.path.join(signed, "manifest.hmac"))
    with pytest.raises(sg.ArtifactError, match="not signed"):
        sg.load(signed, key=KEY)


# --- errors that used to escape as other types ----------------------------------------------------
def test_a_deeply_nested_manifest(saved):
    with open(os.path.join(saved, "manifest.json"), "w") as handle:
        handle.write('{"a": ' * 100000 + "1" + "}" * 100000)
    with pytest.raises(sg.ArtifactError, match="nested too deeply"):
        sg.load(saved)


def test_a_deeply_nested_program(saved):
    replace_file(saved, "program.json", ("[" * 100000 + "]" * 100000).encode())
    with pytest.raises(sg.ArtifactError, match="program.json is malformed"):
        sg.load(saved)


@pytest.mark.parametrize("module", [b"\xff\xfe\x00 not UTF-8", b"def run(:\n",
                                    b"CONSTANTS = None\ndef run(**feeds):\n    return []\n"])
def test_broken_modules_are_artifact_errors(saved, module):
    replace_file(saved, "numpy/program.py", module)
    with pytest.raises(sg.ArtifactError, match="not what symgrad generates"):
        sg.load(saved)
    with pytest.raises(standalone.ArtifactIntegrityError,
                       match="not valid Python source|CONSTANTS dict"):
        standalone.load(saved)


# --- sizes before reading --------------------------------------------------------------------------
def test_a_zip_bomb_is_refused_before_it_inflates(compiled, tmp_path):
    path = compiled.save(str(tmp_path / "model.zip"))
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["constants/0.npy"] = bytes(4 << 20)   # 4 MiB of zeros, a few KiB compressed
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert os.path.getsize(path) < 64 << 10
    reads = []
    real_read = standalone.read_bounded
    artifact_read = artifact.standalone.read_bounded

    def spy(stream, limit, what):
        reads.append((what, limit))
        return real_read(stream, limit, what)
    artifact.standalone.read_bounded = spy
    try:
        with pytest.raises(sg.ArtifactError, match="4194304 bytes, the manifest declares"):
            sg.load(path)
    finally:
        artifact.standalone.read_bounded = artifact_read
    assert all(what != "'constants/0.npy'" for what, _ in reads)


def test_reads_stop_past_the_declared_size():
    with pytest.raises(standalone.ArtifactIntegrityError, match="larger than the 10 bytes"):
        standalone.read_bounded(io.BytesIO(bytes(1 << 30 >> 10)), 10, "'x'")


def test_a_300_character_parameter_name_saves(tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float32")
        w = sg.parameter("w" * 300, [3], "float32", init=np.ones(3, "float32"))
        y = x * w
    path = sg.compile(prog, [y]).save(str(tmp_path / "m"))
    np.testing.assert_array_equal(sg.load(path)(np.arange(3, dtype="float32"))[0], [0, 1, 2])


# --- killed saves ------------------------------------------------------------------------------------
KILLED_SAVE = textwrap.dedent("""
    import os, sys
    import numpy as np
    import symgrad as sg
    from symgrad.runtime import artifact
    from tests.adversarial.test_artifacts import build

    target, where = sys.argv[1], sys.argv[2]
    prog, fetches = build()
    fn = sg.compile(prog, fetches)
    if where == "after exchange":     # the new artifact is in place, the old one not yet removed
        artifact.shutil.rmtree = lambda *a, **k: os._exit(9)
    elif where == "between renames":  # no renameat2: killed after moving the old one aside
        artifact._exchange = lambda a, b: False
        rename = os.rename
        def first_then_die(a, b):
            rename(a, b)
            os._exit(9)
        artifact.os.rename = first_then_die
    elif where == "writing the zip":
        artifact.os.replace = lambda a, b: os._exit(9)
    fn.save(target)
""")


def _killed_save(target, where):
    proc = subprocess.run([sys.executable, "-c", KILLED_SAVE, target, where], timeout=120,
                          capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 9, proc.stderr


@pytest.mark.parametrize("where", ["after exchange", "between renames", "writing the zip"])
def test_a_killed_save_leaves_an_artifact_and_the_next_save_cleans_up(compiled, tmp_path,
                                                                        where):
    name = "model.zip" if where == "writing the zip" else "model"
    target = compiled.save(str(tmp_path / name))
    _killed_save(target, where)
    leftovers = sorted(os.listdir(tmp_path))
    assert len(leftovers) > 1   # what the killed save left behind
    if where != "between renames":   # the old or the new artifact is at the path
        sg.load(target)
    compiled.save(target)           # the next save repairs and cleans
    assert sorted(os.listdir(tmp_path)) == [name]
    np.testing.assert_array_equal(sg.load(target)(X)[0], _expected(compiled))


# --- the command line ----------------------------------------------------------------------------------
def test_inspect_prints_no_control_characters(saved, capsys):
    manifest = manifest_of(saved)
    manifest["inputs"][0]["name"] = "x\x1b]0;owned\x07"   # refused by load, shown by inspect
    manifest["stats"]["\x1b[2J"] = "\r\x1b[1A"
    with open(os.path.join(saved, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    assert main(["inspect", saved]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r")
    assert "x\\x1b]0;owned\\x07" in out


def test_run_output_never_writes_raw_member_names(tmp_path, capsys):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float32")
        y = x + 1.0
        y.name = "../../../tmp/evil\x1b"
    path = sg.compile(prog, [y]).save(str(tmp_path / "m"))
    np.save(tmp_path / "x.npy", np.ones(2, "float32"))
    assert main(["run", path, "--input", f"x={tmp_path / 'x.npy'}",
                 "--output", str(tmp_path / "out.npz")]) == 0
    with zipfile.ZipFile(tmp_path / "out.npz") as archive:
        assert archive.namelist() == ["output_0.npy"]


# --- a hostile program.json: attrs never become code -------------------------------------------------
_OPEN = "__import__('builtins').open(__import__('os').environ['SYMGRAD_TEST_MARKER'], 'w')"
PAYLOADS = [_OPEN,                                          # where an expression is pasted
            f"0(*args):\n    return 0\n{_OPEN}\ndef _g"]    # where a name is


def _attr_rich_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        a, b = sg.split(x, 2, axis=1)
        c = sg.concatenate([b, a], axis=1)
        d = sg.transpose(sg.reshape(c, [-1, 2, 2]), [0, 2, 1])
        e = sg.squeeze(sg.expand_dims(sg.sum(d, axis=2), 0), 0)
        f = sg.pad(e[:, ::2], [(0, 0), (1, 1)], constant_values=2.0)
        loss = sg.mean(f * f) + sg.max(x, axis=1).sum()
        grads = sg.ir_backward.grad(loss, [x])
    return prog, [loss] + grads


def _int_leaves(obj, path=()):
    """Paths to the int leaves of a JSON attr value."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, int):
        yield path
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _int_leaves(item, path + (i,))
    elif isinstance(obj, dict):
        for key, item in obj.items():
            if not key.startswith("$") or key in ("$tuple", "$slice"):
                yield from _int_leaves(item, path + (key,))


def _mutations(document):
    """One ``(op record, attr name, path to an int leaf)`` per attr of each op kind."""
    seen = set()
    stack = [document["ops"]]
    while stack:
        for record in stack.pop():
            for name, value in record["attrs"].items():
                leaves = list(_int_leaves(value))
                if leaves and (record["op"], name) not in seen:
                    seen.add((record["op"], name))
                    yield record, name, leaves[0]
            stack.extend(block["ops"] for block in record.get("blocks", []))


def test_string_attrs_in_program_json_never_run(tmp_path, marker):
    """Every attr that holds an int (an axis, a bound, a group number...) set to code: the
    artifact is refused or runs without that code ever running."""
    prog, fetches = _attr_rich_program()
    path = sg.compile(prog, fetches).save(str(tmp_path / "m"))
    _as_other_symgrad(path)
    document = json.load(open(os.path.join(path, "program.json")))
    tried = set()
    for (record, name, leaf), payload in itertools.product(list(_mutations(document)), PAYLOADS):
        target = record["attrs"]
        keys = (name,) + leaf
        for key in keys[:-1]:
            target = target[key]
        original, target[keys[-1]] = target[keys[-1]], payload
        replace_file(path, "program.json", json.dumps(document).encode())
        target[keys[-1]] = original
        try:
            sg.load(path)(np.ones((3, 4), "float32"))
        except (sg.SymgradError, ValueError, TypeError):
            pass
        assert not marker.exists(), f"{record['op']}.{name}{list(leaf)} ran as code"
        tried.add(record["op"])
    assert {"fusion", "concatenate", "split", "slice", "slice_scatter", "size", "pad",
            "reshape", "transpose"} <= tried
