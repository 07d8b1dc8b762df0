"""AOT artifacts: save/load round trips, what the manifest holds, the standalone runner,
integrity checks, signing, CUDA artifacts and atomic saves. (The attacks of issue #12 are in
``tests/adversarial/test_artifacts.py``.)"""
import json
import os
import platform
import runpy
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ArtifactError, FeedError
from symgrad.runtime import artifact, standalone
from symgrad.runtime.artifact import ArtifactFallbackWarning

W_INIT = (np.arange(12, dtype="float32").reshape(4, 3) - 5) / 7
BIAS = np.array([0.5, -1.0, 2.0], dtype="float32")


def contract_program():
    """``(program, fetches)``: a small program with a data input, a parameter, a constant,
    an unused input and a named output."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        sg.data("unused", [2], "float32")
        w = sg.parameter("w", [4, 3], "float32", init=W_INIT)
        h = sg.tanh(x @ w)
        y = h + sg.constant(BIAS)
        y.name = "y"
        total = sg.sum(h)
    return prog, [y, total]


def grad_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.parameter("w", [4, 3], "float32", init=W_INIT)
        loss = sg.mean(sg.tanh(x @ w) ** 2)
        gx, gw = sg.ir_backward.grad(loss, [x, w])
    return prog, [loss, gx, gw]


def feeds():
    return np.random.default_rng(0).standard_normal((5, 4)).astype("float32")


@pytest.fixture(scope="module")
def compiled():
    prog, fetches = contract_program()
    return sg.compile(prog, fetches, backend="numpy")


@pytest.fixture(scope="module")
def template(compiled, tmp_path_factory):
    return compiled.save(str(tmp_path_factory.mktemp("template") / "model"))


@pytest.fixture
def saved(template, tmp_path):
    """A fresh copy of a saved artifact, to tamper with."""
    return shutil.copytree(template, str(tmp_path / "model"))


def manifest_of(path):
    with open(os.path.join(path, "manifest.json")) as handle:
        return json.load(handle)


# --- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["model", "model.zip"])
def test_round_trip_is_bit_for_bit(tmp_path, compiled, name):
    path = compiled.save(str(tmp_path / name))
    assert path == str(tmp_path / name)
    loaded = sg.load(path)
    x = feeds()
    expected = compiled(x)
    for result in (loaded(x), loaded(x=x), loaded(x=x, w=W_INIT), loaded(x, unused=[1, 2])):
        assert isinstance(result, list) and len(result) == 2
        for e, g in zip(expected, result):
            assert e.dtype == g.dtype and e.shape == g.shape and e.tobytes() == g.tobytes()
    w2 = np.ones((4, 3), "float32")
    np.testing.assert_array_equal(loaded(x, w=w2)[0], compiled(x, w=w2)[0])


def test_loaded_program_runs_what_symgrad_generates(saved, compiled):
    loaded = sg.load(saved)
    assert loaded.backend == "numpy" and loaded.checked_files
    with open(os.path.join(saved, "numpy", "program.py"), encoding="utf-8") as handle:
        assert loaded.source == handle.read()
    assert loaded.signature == compiled.signature and loaded.outputs == compiled.outputs
    loaded.program.verify()
    assert [v.id for v in loaded.fetches] == [v.id for v in compiled.fetches]
    assert loaded.manifest["standalone"] == {"module": "numpy/standalone.py", "function": "run"}
    assert loaded.manifest["entry_points"]["standalone"] == loaded.manifest["standalone"]
    assert loaded.input_names == ["x", "unused"]
    again = sg.compile(loaded.program, loaded.fetches, backend="interpreter")
    np.testing.assert_allclose(again(feeds())[0], compiled(feeds())[0], rtol=1e-6)


def test_manifest_contents(saved):
    manifest = manifest_of(saved)
    assert manifest["format"] == "symgrad-artifact" and manifest["format_version"] == 4
    assert manifest["versions"]["numpy"] == np.__version__
    assert manifest["versions"]["symgrad"] == sg.__version__
    assert manifest["generator"] == artifact.library_fingerprint()
    assert manifest["backend"] == "numpy"
    assert manifest["options"]["cache_dir"] is None
    assert manifest["inputs"][0] == {"name": "x", "shape": [None, 4], "dtype": "float32",
                                     "kind": "data", "required": True, "dims": ["?0", 4]}
    assert manifest["inputs"][1]["required"] is False
    assert manifest["outputs"][0] == {"name": "y", "shape": [None, 3], "dtype": "float32",
                                      "dims": ["?0", 3]}
    assert manifest["stats"]["ops_before"] == 7
    on_disk = {os.path.relpath(os.path.join(d, f), saved).replace(os.sep, "/")
               for d, _, names in os.walk(saved) for f in names} - {"manifest.json"}
    assert set(manifest["files"]) == set(manifest["sizes"]) == on_disk
    assert {"program.json", "numpy/program.py", "numpy/standalone.py", "numpy/row_pool.py"} \
        <= on_disk
    assert manifest["entry_points"]["numpy"]["imports"] == {"row_pool": "numpy/row_pool.py"}
    for rel, digest in manifest["files"].items():
        with open(os.path.join(saved, rel), "rb") as handle:
            data = handle.read()
        assert standalone.sha256_hex(data) == digest and len(data) == manifest["sizes"][rel]
    # arrays are numbered .npy files, loadable without pickle
    assert manifest["constants"]["w"] == "constants/0.npy"
    w = np.load(os.path.join(saved, manifest["constants"]["w"]), allow_pickle=False)
    np.testing.assert_array_equal(w, W_INIT)


def test_equal_arrays_are_stored_once(saved):
    # w and the bias appear both as module CONSTANTS and as program attrs: one file each
    assert sorted(os.listdir(os.path.join(saved, "constants"))) == ["0.npy", "1.npy"]


def test_feeds_are_checked(saved):
    loaded = sg.load(saved)
    with pytest.raises(FeedError, match="unknown input 'nope'"):
        loaded(x=feeds(), nope=1)
    with pytest.raises(FeedError, match="missing feed"):
        loaded()
    with pytest.raises(FeedError, match="dim 1 must be 4"):
        loaded(np.ones((2, 5), "float32"))


@pytest.mark.parametrize("backend", ["numpy", "interpreter"])
def test_round_trip_of_a_grad_program(tmp_path, backend):
    prog, fetches = grad_program()
    loaded = sg.load(sg.compile(prog, fetches, backend=backend).save(str(tmp_path / "m")))
    x = feeds()
    expected = sg.compile(prog, fetches, backend="numpy")(x=x)
    for e, g in zip(expected, loaded(x=x)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    reference = sg.load(str(tmp_path / "m"), backend="interpreter")
    assert reference.backend == "interpreter"
    for e, g in zip(expected, reference(x=x)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_loaded_grad_program_differentiates_again(tmp_path):
    prog, (loss, gx, gw) = grad_program()
    loaded = sg.load(sg.compile(prog, [loss], backend="interpreter").save(str(tmp_path / "m")))
    new_loss, = loaded.fetches
    g2, = sg.ir_backward.grad(new_loss, [loaded.program.find("w")])
    x = feeds()
    got = sg.compile(loaded.program, [g2], backend="interpreter")(x=x)[0]
    expected = sg.compile(prog, [gw], backend="interpreter")(x=x)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_long_parameter_names_do_not_reach_file_names(tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x" * 300, [3], "float32")
        w = sg.parameter("w/../" + "é" * 300, [3], "float32", init=np.ones(3, "float32"))
        y = x * w
    loaded = sg.load(sg.compile(prog, [y]).save(str(tmp_path / "m")))
    np.testing.assert_array_equal(loaded(np.arange(3, dtype="float32"))[0], [0, 1, 2])
    assert all(len(name) < 20 for name in os.listdir(tmp_path / "m" / "constants"))


# --- the standalone runner -----------------------------------------------------------------------
# The start of a script run where symgrad must not be importable (NumPy only).
NUMPY_ONLY = r'''
import runpy, sys
import numpy as np
try:
    import symgrad
except ImportError:
    pass
else:
    raise SystemExit("symgrad is importable")
'''
# Runs argv[1] (a copy of the runner); argv[2] is the artifact, argv[3] the key (or ""),
# argv[4] an .npy input, argv[5] where outputs go.
STANDALONE_SCRIPT = NUMPY_ONLY + r'''
runner = runpy.run_path(sys.argv[1])
model = runner["load"](sys.argv[2], key=sys.argv[3] or None)
x = np.load(sys.argv[4], allow_pickle=False)
outputs = model(x=x)
assert [o.tobytes() for o in model(x)] == [o.tobytes() for o in outputs]
np.savez(sys.argv[5], *outputs)
print("ok")
'''


def run_standalone(tmp_path, runner, path, key=""):
    x = feeds()
    np.save(tmp_path / "x.npy", x)
    numpy_parent = os.path.dirname(os.path.dirname(np.__file__))
    script = f"import sys; sys.path.insert(0, {numpy_parent!r})\n" + STANDALONE_SCRIPT
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, runner, path, key,
                           str(tmp_path / "x.npy"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                          cwd=tmp_path, timeout=60)
    return proc, x


@pytest.mark.parametrize("runner", ["artifact's copy", "trusted copy"])
def test_standalone_runner_with_only_numpy(tmp_path, runner):
    prog, fetches = grad_program()
    fn = sg.compile(prog, fetches, chunk_size=4)
    assert "from .row_pool import RowPool" in fn.source   # the shipped helper runs too
    path = fn.save(str(tmp_path / "m"), key="secret")
    copy = os.path.join(path, "numpy", "standalone.py") if runner == "artifact's copy" \
        else standalone.__file__
    proc, x = run_standalone(tmp_path, copy, path, key="secret")
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        for i, expected in enumerate(fn(x)):
            assert out[f"arr_{i}"].tobytes() == expected.tobytes()
    assert not os.path.exists(os.path.join(path, "numpy", "__pycache__"))
    sg.load(path, key="secret")   # running it standalone left nothing unlisted behind


def test_standalone_runner_refuses_a_wrong_key(tmp_path, saved):
    proc, _ = run_standalone(tmp_path, standalone.__file__, saved, key="guess")
    assert proc.returncode != 0 and "not signed" in proc.stderr


def test_artifact_run_function_uses_the_key_in_the_environment(saved, monkeypatch):
    module = runpy.run_path(os.path.join(saved, "numpy", "standalone.py"))
    outputs = module["run"](feeds())
    assert len(outputs) == 2
    monkeypatch.setenv(standalone.KEY_VARIABLE, "secret")
    with pytest.raises(ValueError, match="not signed"):   # the runner's own error class
        runpy.run_path(os.path.join(saved, "numpy", "standalone.py"))["run"](feeds())


X = feeds()
# bad calls of contract_program (inputs x [?, 4], unused [2] and the parameter w [4, 3])
BAD_FEEDS = {
    "unknown input": ((), {"x": X, "nope": 1}),
    "missing feed": ((), {"unused": np.ones(2, "float32")}),
    "wrong rank": ((np.ones(4, "float32"),), {}),
    "wrong dim": ((np.ones((2, 5), "float32"),), {}),
    "wrong dtype kind": ((np.ones((2, 4), "int32"),), {}),
    "bool array for floats": ((np.ones((2, 4), bool),), {}),
    "not numeric": ((np.array([["a"] * 4]),), {}),
    "not an array": (({"a": 1},), {}),
    "too many positional": ((X, np.ones(2, "float32"), X), {}),
    "by position and by name": ((X,), {"x": X}),
    "parameter of another shape": ((X,), {"w": np.ones((3, 3), "float32")}),
}


@pytest.fixture(scope="module")
def every_runner(compiled, template):
    """The compiled program and its artifact as sg.load, symgrad's standalone runner and
    the artifact's own runner (a copy of the file, with error classes of its own) run it."""
    own = runpy.run_path(os.path.join(template, "numpy", "standalone.py"))
    return {"compiled": compiled, "sg.load": sg.load(template),
            "symgrad's runner": standalone.load(template),
            "artifact's runner": own["load"](template)}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_a_bad_feed_raises_the_same_error_everywhere(every_runner, case):
    """Issue #24 item 16: one feed check, so one error type (by name and builtin base) and
    one message, however the program runs."""
    args, kwargs = BAD_FEEDS[case]
    errors = {}
    for name, runner in every_runner.items():
        with pytest.raises((ValueError, TypeError)) as info:
            runner(*args, **kwargs)
        errors[name] = info.value
    want = errors["sg.load"]
    builtin = ValueError if isinstance(want, ValueError) else TypeError
    for name, error in errors.items():
        assert (type(error).__name__, str(error)) == (type(want).__name__, str(want)), name
        assert isinstance(error, builtin) and not isinstance(error, ArtifactError), name
    if type(want).__name__.startswith("Feed"):
        assert isinstance(want, sg.SymgradError)


def _rewrite_manifest(path, change):
    manifest = manifest_of(path)
    change(manifest)
    with open(os.path.join(path, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)


def replace_file(path, rel, data: bytes):
    """Overwrite ``rel`` and record its new hash and size, as a careful attacker would."""
    os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
    with open(os.path.join(path, rel), "wb") as handle:
        handle.write(data)

    def change(manifest):
        manifest["files"][rel] = standalone.sha256_hex(data)
        manifest["sizes"][rel] = len(data)
    _rewrite_manifest(path, change)


def test_standalone_runner_refuses_a_module_without_constants(saved):
    source = open(os.path.join(saved, "numpy", "program.py"), "rb").read()
    replace_file(saved, "numpy/program.py", source.replace(b"CONSTANTS = {}", b"CONSTANTS = None"))
    with pytest.raises(standalone.ArtifactIntegrityError, match="CONSTANTS dict"):
        standalone.load(saved)
    replace_file(saved, "numpy/program.py", b"\xff\xfe not utf-8")
    with pytest.raises(standalone.ArtifactIntegrityError, match="not valid Python source"):
        standalone.load(saved)


# --- integrity checks: each fails before any artifact code could run ------------------------------
def _append(path, rel, text):
    with open(os.path.join(path, rel), "a") as handle:
        handle.write(text)


def _outside_link(path):
    target = os.path.join(os.path.dirname(path), "outside.npy")
    shutil.copy(os.path.join(path, "constants", "0.npy"), target)
    os.remove(os.path.join(path, "constants", "0.npy"))
    os.symlink(target, os.path.join(path, "constants", "0.npy"))


def _program_json_with(path, change):
    with open(os.path.join(path, "program.json")) as handle:
        document = json.load(handle)
    change(document)
    replace_file(path, "program.json", json.dumps(document).encode())


TAMPERING = {
    "modified module": (lambda p: _append(p, "numpy/program.py", "\nx = 1\n"), "modified"),
    "modified constant": (lambda p: _append(p, "constants/0.npy", "\0"), "modified"),
    "modified runtime helper": (lambda p: _append(p, "numpy/row_pool.py", "\nx = 1\n"),
                                "modified"),
    "modified program.json": (lambda p: _append(p, "program.json", " "), "modified"),
    "missing file": (lambda p: os.remove(os.path.join(p, "constants", "1.npy")), "missing"),
    "missing manifest": (lambda p: os.remove(os.path.join(p, "manifest.json")),
                         "manifest.json is missing"),
    "newer format": (lambda p: _rewrite_manifest(
        p, lambda m: m.update(format_version=standalone.FORMAT_VERSION + 1)),
        f"format version {standalone.FORMAT_VERSION + 1} is newer"),
    "dotdot path": (lambda p: _rewrite_manifest(
        p, lambda m: m["files"].__setitem__("../model.py", "0" * 64)), "malformed|leaves"),
    "absolute path": (lambda p: _rewrite_manifest(p, lambda m: (
        m["files"].__setitem__("/etc/hostname", "0" * 64),
        m["sizes"].__setitem__("/etc/hostname", 1))), "leaves the artifact"),
    "dotdot entry module": (lambda p: _rewrite_manifest(
        p, lambda m: m["entry_points"]["numpy"].__setitem__("module", "numpy/../../x.py")),
        "entry points"),
    "symlink escaping": (_outside_link, "leads outside the artifact"),
    "corrupted program.json": (lambda p: replace_file(p, "program.json", b"{not json"),
                               "program.json is malformed"),
    "unknown op in program.json": (lambda p: _program_json_with(
        p, lambda d: d["ops"][3].update(op="evil_op")), "evil_op"),
    "ill-typed program.json": (lambda p: _program_json_with(
        p, lambda d: d["ops"][3]["results"][0].update(shape=[7])), "does not verify"),
    "garbage manifest": (lambda p: open(os.path.join(p, "manifest.json"), "w").write("[1, 2"),
                         "not valid JSON"),
    "manifest without entry": (lambda p: _rewrite_manifest(p, lambda m: m.pop("entry_points")),
                               "malformed"),
    "manifest without sizes": (lambda p: _rewrite_manifest(p, lambda m: m.pop("sizes")),
                               "sizes"),
    "unknown backend": (lambda p: _rewrite_manifest(p, lambda m: m.update(backend="evil")),
                        "unknown backend"),
    "hostile option": (lambda p: _rewrite_manifest(
        p, lambda m: m["options"].update(chunk_size="import os")), "chunk_size"),
    "signature differs from program.json": (lambda p: _rewrite_manifest(
        p, lambda m: m["inputs"][0].update(shape=[None, 5], dims=["?0", 5])), "differently"),
    "symbolic signature differs from program.json": (lambda p: _rewrite_manifest(
        p, lambda m: m["inputs"][0].update(dims=["batch", 4])), "differently"),
    "outputs differ from program.json": (lambda p: _rewrite_manifest(
        p, lambda m: m["outputs"][0].update(name="z")), "outputs differ"),
    "extra required input": (lambda p: _rewrite_manifest(p, lambda m: m["inputs"].append(
        {"name": "z", "shape": [1], "dtype": "float32", "kind": "data", "required": True})),
        "does not have"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampered_artifact_is_refused(saved, case):
    tamper, match = TAMPERING[case]
    tamper(saved)
    with pytest.raises(ArtifactError, match=match):
        sg.load(saved)


def test_an_artifact_never_chooses_where_code_is_cached(saved, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    _rewrite_manifest(saved, lambda m: m["options"].update(cache_dir=str(elsewhere)))
    sg.load(saved)
    assert not elsewhere.exists()


def test_pickled_constant_is_refused(saved):
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"pickled": True}], dtype=object), allow_pickle=True)
    replace_file(saved, "constants/1.npy", buffer.getvalue())
    with pytest.raises(ArtifactError, match="not a plain .npy"):
        sg.load(saved)


def test_zip_with_modified_entry_is_refused(tmp_path, compiled):
    import zipfile

    path = compiled.save(str(tmp_path / "model.zip"))
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["numpy/program.py"] += b"\nx = 1\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(ArtifactError, match="modified"):
        sg.load(path)


def test_missing_and_non_artifact_paths(tmp_path):
    with pytest.raises(ArtifactError, match="no artifact"):
        sg.load(str(tmp_path / "nothing"))
    (tmp_path / "file.zip").write_bytes(b"not a zip")
    with pytest.raises(ArtifactError, match="not a readable zip"):
        sg.load(str(tmp_path / "file.zip"))
    (tmp_path / "file.py").write_text("import symgrad\n")   # issue #27 item 6
    with pytest.raises(ArtifactError, match=r"'.*file.py' is not a symgrad artifact: an artifact "
                                            r"is the directory"):
        sg.load(str(tmp_path / "file.py"))
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        sg.load(str(tmp_path))
    with pytest.raises(ValueError, match="backend must be"):
        sg.load(str(tmp_path), backend="tpu")


def test_inspect_checks_without_loading(saved):
    manifest, sizes = artifact.inspect(saved)
    assert sizes == manifest["sizes"]
    _append(saved, "numpy/program.py", "#")
    with pytest.raises(ArtifactError, match="modified"):
        artifact.inspect(saved)


# --- signing -------------------------------------------------------------------------------------
def test_signed_artifact(tmp_path, compiled):
    path = compiled.save(str(tmp_path / "m"), key=b"secret")
    assert os.path.isfile(os.path.join(path, "manifest.hmac"))
    sg.load(path, key=b"secret")
    sg.load(path, key="secret")      # a str key is its UTF-8 bytes
    sg.load(path)                    # no key asked for: the signature is not checked
    with pytest.raises(ArtifactError, match="does not match the key"):
        sg.load(path, key=b"guess")
    _rewrite_manifest(path, lambda m: m["stats"].update(ops_before=1))
    with pytest.raises(ArtifactError, match="does not match the key"):
        sg.load(path, key=b"secret")
    os.remove(os.path.join(path, "manifest.hmac"))
    with pytest.raises(ArtifactError, match="not signed"):
        sg.load(path, key=b"secret")
    with pytest.raises(TypeError, match="signing key"):
        compiled.save(str(tmp_path / "n"), key=b"")


# --- CUDA artifacts ------------------------------------------------------------------------------
def test_cuda_artifact_falls_back_to_numpy_explicitly(tmp_path, monkeypatch):
    """Rendering CUDA needs no GPU: the artifact holds the .cu source, the host module and
    the kernels; where CuPy or a device is missing, loading says it runs on NumPy."""
    from symgrad.backends import cuda_backend

    prog, fetches = contract_program()
    fn = sg.compile(prog, fetches, backend="cuda")
    archs = ["sm_90"] if shutil.which("nvcc") else []
    path = fn.save(str(tmp_path / "m"), cubin_archs=archs)
    manifest = manifest_of(path)
    cuda = manifest["entry_points"]["cuda"]
    assert cuda["source"] == "cuda/program.cu" and sorted(cuda["cubins"]) == archs
    with open(os.path.join(path, "cuda", "program.cu"), encoding="utf-8") as handle:
        assert handle.read() == fn._executable.cuda_source

    def no_cuda():
        raise cuda_backend.CudaUnavailableError("no CUDA device (test)")
    monkeypatch.setattr(cuda_backend, "device_arch", no_cuda)
    with pytest.warns(ArtifactFallbackWarning, match="compiled for CUDA.*NumPy"):
        loaded = sg.load(path)
    assert loaded.backend == "numpy" and loaded.kernels == fn.kernels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sg.load(path, backend="numpy").backend == "numpy"
    with pytest.raises(cuda_backend.CudaUnavailableError):
        sg.load(path, backend="cuda")
    ref = sg.compile(prog, fetches, backend="interpreter")
    for r, g in zip(ref(feeds()), loaded(feeds())):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(cuda_backend, "device_arch", lambda: "sm_90")
    assert sg.load(path).backend == "cuda"   # with a device, the CUDA code runs


def test_numpy_artifact_has_no_cuda_code(saved):
    with pytest.raises(ArtifactError, match="no CUDA code"):
        sg.load(saved, backend="cuda")


# --- atomic save ---------------------------------------------------------------------------------
def _entries(folder):
    return sorted(os.listdir(folder))


def _crash(*args, **kwargs):
    raise RuntimeError("disk on fire")


@pytest.mark.parametrize("name", ["model", "model.zip"])
def test_failed_save_leaves_nothing_under_the_final_name(tmp_path, compiled, monkeypatch,
                                                         name):
    monkeypatch.setattr(artifact, "_generate", _crash)  # after program.json was written
    with pytest.raises(RuntimeError, match="disk on fire"):
        compiled.save(str(tmp_path / name))
    assert _entries(tmp_path) == []


def test_failed_save_keeps_the_previous_artifact(saved, compiled, monkeypatch):
    before = {rel: open(os.path.join(saved, rel), "rb").read() for rel in manifest_of(saved)["files"]}
    monkeypatch.setattr(artifact, "_generate", _crash)
    with pytest.raises(RuntimeError):
        compiled.save(saved)
    assert _entries(os.path.dirname(saved)) == ["model"]
    for rel, data in before.items():
        assert open(os.path.join(saved, rel), "rb").read() == data


@pytest.mark.parametrize("exchange", [True, False])
def test_save_replaces_a_previous_artifact(saved, compiled, monkeypatch, exchange):
    if not exchange:   # where renameat2 is missing: two renames
        monkeypatch.setattr(artifact, "_exchange", lambda a, b: False)
    _append(saved, "numpy/program.py", "# stale\n")
    assert compiled.save(saved) == saved
    sg.load(saved)
    assert _entries(os.path.dirname(saved)) == ["model"]


def test_save_refuses_to_overwrite_other_things(tmp_path, compiled):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a symgrad artifact"):
        compiled.save(str(tmp_path / "docs"))
    (tmp_path / "plain").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a directory"):
        compiled.save(str(tmp_path / "plain"))
    assert (tmp_path / "docs" / "notes.txt").read_text() == "keep me"


# --- C artifacts ---------------------------------------------------------------------------------
def test_c_artifact_carries_its_library_and_runs_it_standalone(tmp_path):
    """A C program's artifact holds its C source, host module and compiled library; sg.load
    regenerates and compiles the C program; the standalone runner (NumPy only, no compiler)
    runs the artifact's host module on the artifact's library through ctypes."""
    prog, fetches = grad_program()
    fn = sg.compile(prog, fetches, backend="c", chunk_size=4)
    path = fn.save(str(tmp_path / "m"))
    entry = manifest_of(path)["entry_points"]["c"]
    assert entry["library"] == "c/program.so" and entry["module"] == "c/host.py"
    with open(os.path.join(path, "c", "program.c"), encoding="utf-8") as handle:
        assert handle.read() == fn.source
    loaded = sg.load(path)
    assert loaded.backend == "c" and loaded.checked_files
    x = feeds()
    for want, got in zip(fn(x), loaded(x)):
        assert got.tobytes() == want.tobytes()
    runner = standalone.load(path)
    assert runner.module.LIBRARY is not None and runner.module.__file__.endswith("host.py")
    proc, x = run_standalone(tmp_path, os.path.join(path, "numpy", "standalone.py"), path)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        for i, expected in enumerate(fn(x)):
            assert out[f"arr_{i}"].tobytes() == expected.tobytes()


def test_c_artifact_runs_its_numpy_module_where_its_library_or_a_compiler_is_missing(
        tmp_path, monkeypatch):
    prog, fetches = grad_program()
    path = sg.compile(prog, fetches, backend="c").save(str(tmp_path / "m"))
    replace_file(path, "c/program.so", b"not a shared library")
    assert standalone.load(path).module.__file__.endswith(os.path.join("numpy", "program.py"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.warns(ArtifactFallbackWarning, match="compiled for C, but .*no-such-cc"):
        loaded = sg.load(path)
    assert loaded.backend == "numpy"
    for r, g in zip(sg.compile(prog, fetches)(feeds()), loaded(feeds())):
        np.testing.assert_allclose(g, r, rtol=1e-6)


def test_c_artifact_built_for_another_cpu_runs_its_numpy_module_standalone(tmp_path):
    """A library built with -march=native on a CPU with features this one lacks would load
    and then die on its first call: the standalone runner checks the machine type and CPU
    features the artifact records and runs the NumPy module instead; sg.load compiles the
    C program for this machine."""
    prog, fetches = grad_program()
    fn = sg.compile(prog, fetches, backend="c")
    path = fn.save(str(tmp_path / "m"))
    entry = manifest_of(path)["entry_points"]["c"]
    assert entry["machine"] == platform.machine()
    if entry["cpu_features"] is not None:
        assert standalone.built_for_this_machine(entry)
    # a machine left out is no machine type: it switches the check off no more (issue #24)
    for facts in ({"cpu_features": ["avx2048_imaginary"]}, {"machine": "pdp11"},
                  {"machine": None, "cpu_features": None}):
        _rewrite_manifest(path, lambda manifest: manifest["entry_points"]["c"].update(facts))
        assert not standalone.built_for_this_machine(manifest_of(path)["entry_points"]["c"])
        runner = standalone.load(path)
        assert runner.module.__file__.endswith(os.path.join("numpy", "program.py"))
        loaded = sg.load(path)
        assert loaded.backend == "c"
        for want, got in zip(fn(feeds()), loaded(feeds())):
            assert got.tobytes() == want.tobytes()
