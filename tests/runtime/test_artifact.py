"""AOT artifacts: save/load round trips, the standalone runner, integrity checks, atomic save."""
import importlib
import json
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ArtifactError, FeedError
from symgrad.runtime import artifact, standalone
from symgrad.runtime.compiled import CompiledProgram


def numpy_backend_available():
    try:
        module = importlib.import_module("symgrad.backends.numpy_backend")
    except ImportError:
        return False
    return hasattr(module, "build")


needs_numpy_backend = pytest.mark.skipif(not numpy_backend_available(),
                                         reason="the NumPy code generator is not built yet")

# --- a hand-written module of the NumPy backend's contract -------------------------------------
# run(**feeds) -> list; CONSTANTS filled by the loader; numpy + stdlib only. It touches the file
# named by $SYMGRAD_TEST_MARKER when imported, to prove rejected artifacts execute nothing.
CONTRACT_SOURCE = '''\
import os

import numpy as np

CONSTANTS = {}
if os.environ.get("SYMGRAD_TEST_MARKER"):
    open(os.environ["SYMGRAD_TEST_MARKER"], "w").close()


def run(x, w=None):
    if w is None:
        w = CONSTANTS["w"]
    h = np.tanh(np.matmul(x, w))
    return [np.add(h, CONSTANTS["bias"]), np.sum(h)]
'''


class ContractExecutable:
    """An executable of the NumPy backend's contract built from a hand-written module."""

    backend = "numpy"
    kernels = {}
    stats = {"ops": 4}

    def __init__(self, source, constants):
        self.source = source
        self.constants = constants
        self.module = types.ModuleType("contract_module")
        exec(compile(source, "<contract>", "exec"), self.module.__dict__)
        self.module.CONSTANTS.update(constants)

    def run(self, feeds):
        return self.module.run(**feeds)


W_INIT = (np.arange(12, dtype="float32").reshape(4, 3) - 5) / 7
BIAS = np.array([0.5, -1.0, 2.0], dtype="float32")


def contract_program():
    """``(program, fetches)`` computing what CONTRACT_SOURCE computes."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.parameter("w", [4, 3], "float32", init=W_INIT)
        h = sg.tanh(x @ w)
        y = h + sg.constant(BIAS)
        y.name = "y"
        total = sg.sum(h)
    return prog, [y, total]


@pytest.fixture
def contract_compiled():
    prog, fetches = contract_program()
    ref = sg.compile(prog, fetches, backend="interpreter")
    executable = ContractExecutable(CONTRACT_SOURCE, {"w": W_INIT, "bias": BIAS})
    return CompiledProgram(executable, ref.signature, ref.outputs, ref.program, ref.options,
                           stats={"ops_before": 6}, fetches=ref.fetches)


@pytest.fixture
def saved(tmp_path, contract_compiled):
    return contract_compiled.save(str(tmp_path / "model"))


def feeds():
    return np.random.default_rng(0).standard_normal((5, 4)).astype("float32")


# --- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["model", "model.zip"])
def test_round_trip_is_bit_for_bit(tmp_path, contract_compiled, name):
    path = contract_compiled.save(str(tmp_path / name))
    assert path == str(tmp_path / name)
    loaded = sg.load(path)
    x = feeds()
    expected = contract_compiled(x)
    for result in (loaded(x), loaded(x=x), loaded(x=x, w=W_INIT)):
        assert isinstance(result, list) and len(result) == 2
        for e, g in zip(expected, result):
            assert e.dtype == g.dtype and e.shape == g.shape
            assert e.tobytes() == g.tobytes()
    w2 = np.ones((4, 3), "float32")
    np.testing.assert_array_equal(loaded(x, w=w2)[0], contract_compiled(x, w=w2)[0])


def test_loaded_program_exposes_program_signature_source_manifest(saved, contract_compiled):
    loaded = sg.load(saved)
    assert loaded.source == CONTRACT_SOURCE
    assert loaded.signature == contract_compiled.signature
    assert loaded.outputs == contract_compiled.outputs
    loaded.program.verify()
    assert str(loaded.program).split("\n", 1)[1] == str(contract_compiled.program).split("\n", 1)[1]
    assert [v.id for v in loaded.fetches] == [v.id for v in contract_compiled.fetches]
    assert loaded.manifest["standalone"] == {"module": "numpy/standalone.py", "function": "run"}
    assert loaded.manifest["entry_points"]["standalone"] == loaded.manifest["standalone"]
    assert loaded.input_names == ["x"]
    # the loaded program is a real Program: it compiles again with another backend
    again = sg.compile(loaded.program, loaded.fetches, backend="interpreter")
    np.testing.assert_array_equal(again(feeds())[0], contract_compiled(feeds())[0])


def test_manifest_contents(saved):
    with open(os.path.join(saved, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["format"] == "symgrad-artifact" and manifest["format_version"] == 1
    assert manifest["versions"]["numpy"] == np.__version__
    assert manifest["versions"]["symgrad"] == sg.__version__
    assert manifest["backend"] == "numpy"
    assert manifest["inputs"][0] == {"name": "x", "shape": [None, 4], "dtype": "float32",
                                     "kind": "data", "required": True}
    assert manifest["outputs"][0] == {"name": "y", "shape": [None, 3], "dtype": "float32"}
    assert manifest["stats"]["ops_before"] == 6
    listed = set(manifest["files"])
    on_disk = {os.path.relpath(os.path.join(d, f), saved).replace(os.sep, "/")
               for d, _, names in os.walk(saved) for f in names} - {"manifest.json"}
    assert listed == on_disk
    assert {"program.json", "numpy/program.py", "numpy/standalone.py", "numpy/row_pool.py"} \
        <= listed
    assert manifest["entry_points"]["numpy"]["imports"] == {"row_pool": "numpy/row_pool.py"}
    for rel, digest in manifest["files"].items():
        with open(os.path.join(saved, rel), "rb") as handle:
            assert standalone.sha256_hex(handle.read()) == digest
    assert manifest["constants"]["w"].startswith("constants/")
    # arrays are plain .npy files, loadable without pickle
    w = np.load(os.path.join(saved, manifest["constants"]["w"]), allow_pickle=False)
    np.testing.assert_array_equal(w, W_INIT)


def test_equal_arrays_are_stored_once(saved):
    names = os.listdir(os.path.join(saved, "constants"))
    # w and bias appear both as module CONSTANTS and as program attrs: one file each
    assert sorted(names) == ["bias.npy", "w.npy"]


def test_feeds_are_checked(saved):
    loaded = sg.load(saved)
    with pytest.raises(FeedError, match="unknown input 'nope'"):
        loaded(x=feeds(), nope=1)
    with pytest.raises(FeedError, match="missing feed"):
        loaded()
    with pytest.raises(FeedError, match="dim 1 must be 4"):
        loaded(np.ones((2, 5), "float32"))


# --- the standalone runner -----------------------------------------------------------------------
# Loads the artifact's standalone module (argv[1]) where symgrad must not be importable.
LOAD_STANDALONE = r'''
import importlib.util, sys
import numpy as np
try:
    import symgrad
except ImportError:
    pass
else:
    raise SystemExit("symgrad is importable")
spec = importlib.util.spec_from_file_location("model", sys.argv[1])
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
'''
STANDALONE_SCRIPT = LOAD_STANDALONE + r'''
x = np.load(sys.argv[2], allow_pickle=False)
y, total = model.run(x=x)
y2, _ = model.run(x)
assert y.tobytes() == y2.tobytes()
try:
    model.run(x=x.astype("int32"))
except TypeError as exc:
    assert "expected float32" in str(exc), exc
else:
    raise SystemExit("an int feed was accepted")
np.save(sys.argv[3], y)
print("ok", float(total))
'''


def test_standalone_module_runs_with_only_numpy(saved, contract_compiled, tmp_path):
    manifest = sg.load(saved).manifest
    module_path = os.path.join(saved, manifest["standalone"]["module"])
    x = feeds()
    np.save(tmp_path / "x.npy", x)
    numpy_parent = os.path.dirname(os.path.dirname(np.__file__))
    env = {"PATH": os.environ.get("PATH", "")}
    script = f"import sys; sys.path.insert(0, {numpy_parent!r})\n" + STANDALONE_SCRIPT
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, module_path,
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.startswith("ok")
    expected = contract_compiled(x)[0]
    assert np.load(tmp_path / "y.npy").tobytes() == expected.tobytes()


def test_standalone_runner_refuses_tampered_artifact(saved):
    with open(os.path.join(saved, "numpy", "program.py"), "a") as handle:
        handle.write("\nraise SystemExit('executed')\n")
    with pytest.raises(standalone.ArtifactIntegrityError, match="modified"):
        standalone.Runner(saved)


# --- integrity checks: each fails before any artifact code runs ----------------------------------
def _rewrite_manifest(path, change):
    manifest_path = os.path.join(path, "manifest.json")
    with open(manifest_path) as handle:
        manifest = json.load(handle)
    change(manifest)
    with open(manifest_path, "w") as handle:
        json.dump(manifest, handle)


def _replace_file(path, rel, data):
    """Overwrite ``rel`` and record its new hash, as a careful attacker would."""
    with open(os.path.join(path, rel), "wb") as handle:
        handle.write(data)
    _rewrite_manifest(path, lambda m: m["files"].__setitem__(rel, standalone.sha256_hex(data)))


def _append(path, rel, text):
    with open(os.path.join(path, rel), "a") as handle:
        handle.write(text)


def _outside_link(path):
    target = os.path.join(os.path.dirname(path), "outside.npy")
    shutil.copy(os.path.join(path, "constants", "w.npy"), target)
    os.remove(os.path.join(path, "constants", "w.npy"))
    os.symlink(target, os.path.join(path, "constants", "w.npy"))


def _program_json_with(path, change):
    with open(os.path.join(path, "program.json")) as handle:
        document = json.load(handle)
    change(document)
    _replace_file(path, "program.json", json.dumps(document).encode())


TAMPERING = {
    "modified module": (lambda p: _append(p, "numpy/program.py", "\nx = 1\n"), "modified"),
    "modified constant": (lambda p: _append(p, "constants/w.npy", "\0"), "modified"),
    "modified runtime helper": (lambda p: _append(p, "numpy/row_pool.py", "\nx = 1\n"),
                                "modified"),
    "unlisted runtime helper": (lambda p: _rewrite_manifest(
        p, lambda m: m["entry_points"]["numpy"]["imports"].__setitem__("evil", "numpy/evil.py")),
        "not among the artifact's hashed files"),
    "runtime helper with a dotted name": (lambda p: _rewrite_manifest(
        p, lambda m: m["entry_points"]["numpy"]["imports"].__setitem__("os.path",
                                                                        "numpy/row_pool.py")),
        "bad entry_points.numpy.imports"),
    "modified program.json": (lambda p: _append(p, "program.json", " "), "modified"),
    "missing file": (lambda p: os.remove(os.path.join(p, "constants", "bias.npy")), "missing"),
    "missing manifest": (lambda p: os.remove(os.path.join(p, "manifest.json")),
                         "manifest.json is missing"),
    "newer format": (lambda p: _rewrite_manifest(p, lambda m: m.update(format_version=2)),
                     "format version 2 is newer"),
    "dotdot path": (lambda p: _rewrite_manifest(
        p, lambda m: m["files"].__setitem__("../model.py", "0" * 64)), "leaves the artifact"),
    "absolute path": (lambda p: _rewrite_manifest(
        p, lambda m: m["files"].__setitem__("/etc/hostname", "0" * 64)), "leaves the artifact"),
    "dotdot entry module": (lambda p: _rewrite_manifest(
        p, lambda m: m["entry_points"]["numpy"].__setitem__("module", "numpy/../../x.py")),
        "leaves the artifact"),
    "unlisted entry module": (lambda p: _rewrite_manifest(
        p, lambda m: m["entry_points"]["numpy"].__setitem__("module", "numpy/other.py")),
        "not among the artifact's hashed files"),
    "symlink escaping": (_outside_link, "leads outside the artifact"),
    "corrupted program.json": (lambda p: _replace_file(p, "program.json", b"{not json"),
                               "program.json is malformed"),
    "unknown op in program.json": (lambda p: _program_json_with(
        p, lambda d: d["ops"][2].update(op="evil_op")), "evil_op"),
    "ill-typed program.json": (lambda p: _program_json_with(
        p, lambda d: d["ops"][2]["results"][0].update(shape=[7])), "does not verify"),
    "garbage manifest": (lambda p: open(os.path.join(p, "manifest.json"), "w").write("[1, 2"),
                         "not valid JSON"),
    "manifest without entry": (lambda p: _rewrite_manifest(p, lambda m: m.pop("entry_points")),
                               "malformed"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampered_artifact_is_refused_before_running_code(saved, tmp_path, monkeypatch, case):
    tamper, match = TAMPERING[case]
    marker = tmp_path / "imported"
    monkeypatch.setenv("SYMGRAD_TEST_MARKER", str(marker))
    tamper(saved)
    with pytest.raises(ArtifactError, match=match):
        sg.load(saved)
    assert not marker.exists(), "artifact code ran before the checks failed"


def test_marker_module_does_run_when_the_artifact_is_intact(saved, tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    monkeypatch.setenv("SYMGRAD_TEST_MARKER", str(marker))
    sg.load(saved)
    assert marker.exists()


def test_pickled_constant_is_refused(saved):
    data = json.dumps({"pickled": True}).encode()
    import io
    buffer = io.BytesIO()
    np.save(buffer, np.array([data], dtype=object), allow_pickle=True)
    _replace_file(saved, "constants/bias.npy", buffer.getvalue())
    with pytest.raises(ArtifactError, match="not a plain .npy"):
        sg.load(saved)


def test_zip_with_modified_entry_is_refused(tmp_path, contract_compiled):
    import zipfile

    path = contract_compiled.save(str(tmp_path / "model.zip"))
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
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        sg.load(str(tmp_path))


# --- atomic save ---------------------------------------------------------------------------------
def _entries(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("name", ["model", "model.zip"])
def test_failed_save_leaves_nothing_under_the_final_name(tmp_path, contract_compiled,
                                                         monkeypatch, name):
    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(artifact, "program_to_json", crash)  # after constants were written
    with pytest.raises(RuntimeError, match="disk on fire"):
        contract_compiled.save(str(tmp_path / name))
    assert _entries(tmp_path) == []


def test_failed_save_keeps_the_previous_artifact(saved, contract_compiled, monkeypatch):
    before = {rel: open(os.path.join(saved, rel), "rb").read()
              for rel in json.load(open(os.path.join(saved, "manifest.json")))["files"]}

    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(artifact, "program_to_json", crash)
    with pytest.raises(RuntimeError):
        contract_compiled.save(saved)
    assert _entries(os.path.dirname(saved)) == ["model"]
    for rel, data in before.items():
        assert open(os.path.join(saved, rel), "rb").read() == data
    sg.load(saved)


def test_save_replaces_a_previous_artifact(saved, contract_compiled):
    _append(saved, "numpy/program.py", "# stale\n")
    assert contract_compiled.save(saved) == saved
    assert sg.load(saved).source == CONTRACT_SOURCE
    assert _entries(os.path.dirname(saved)) == ["model"]


def test_save_refuses_to_overwrite_other_things(tmp_path, contract_compiled):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a symgrad artifact"):
        contract_compiled.save(str(tmp_path / "docs"))
    (tmp_path / "plain").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a directory"):
        contract_compiled.save(str(tmp_path / "plain"))
    assert (tmp_path / "docs" / "notes.txt").read_text() == "keep me"


# --- with the real NumPy code generator ----------------------------------------------------------
def grad_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.parameter("w", [4, 3], "float32", init=W_INIT)
        loss = sg.mean(sg.tanh(x @ w) ** 2)
        gx, gw = sg.ir_backward.grad(loss, [x, w])
    return prog, [loss, gx, gw]


def program_builders():
    return {"contract": contract_program, "grad": grad_program}


@needs_numpy_backend
@pytest.mark.parametrize("backend", ["numpy", "interpreter"])
@pytest.mark.parametrize("which", sorted(program_builders()))
def test_round_trip_with_generated_module(tmp_path, backend, which):
    prog, fetches = program_builders()[which]()
    compiled = sg.compile(prog, fetches, backend=backend)
    loaded = sg.load(compiled.save(str(tmp_path / "model")))
    x = feeds()
    expected = sg.compile(prog, fetches, backend="numpy")(x=x)
    got = loaded(x=x)
    for e, g in zip(expected, got):
        assert e.tobytes() == g.tobytes() and e.dtype == g.dtype
    reference = sg.compile(prog, fetches, backend="interpreter")(x=x)
    for r, g in zip(reference, got):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


@needs_numpy_backend
def test_loaded_grad_program_differentiates_again(tmp_path):
    prog, (loss, gx, gw) = grad_program()
    compiled = sg.compile(prog, [loss], backend="interpreter")
    loaded = sg.load(compiled.save(str(tmp_path / "model")))
    new_loss, = loaded.fetches
    w = loaded.program.find("w")
    g2, = sg.ir_backward.grad(new_loss, [w])
    x = feeds()
    got = sg.compile(loaded.program, [g2], backend="interpreter")(x=x)[0]
    expected = sg.compile(prog, [gw], backend="interpreter")(x=x)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@needs_numpy_backend
def test_standalone_runs_a_generated_grad_module(tmp_path):
    prog, fetches = grad_program()
    compiled = sg.compile(prog, fetches, backend="numpy", chunk_size=4)
    assert "from .row_pool import RowPool" in compiled.source   # the shipped helper is used
    path = compiled.save(str(tmp_path / "model"))
    x = feeds()
    np.save(tmp_path / "x.npy", x)
    script = LOAD_STANDALONE + "np.savez(sys.argv[3], *model.run(x=np.load(sys.argv[2])))\n"
    numpy_parent = os.path.dirname(os.path.dirname(np.__file__))
    script = f"import sys; sys.path.insert(0, {numpy_parent!r})\n" + script
    module_path = os.path.join(path, sg.load(path).manifest["standalone"]["module"])
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, module_path,
                           str(tmp_path / "x.npy"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        got = [out[f"arr_{i}"] for i in range(3)]
    for e, g in zip(compiled(x), got):
        assert e.tobytes() == g.tobytes()


class CudaLikeExecutable(ContractExecutable):
    """What the CUDA backend hands over: host source plus kernels by name."""

    backend = "cuda"
    kernels = {"fused_0": "extern \"C\" __global__ void fused_0(float* y) { y[0] = 1.0f; }\n"}


@needs_numpy_backend
def test_cuda_program_saves_kernels_and_a_numpy_module(tmp_path):
    prog, fetches = contract_program()
    ref = sg.compile(prog, fetches, backend="interpreter")
    executable = CudaLikeExecutable("# host module\n" + CONTRACT_SOURCE,
                                    {"w": W_INIT, "bias": BIAS})
    compiled = CompiledProgram(executable, ref.signature, ref.outputs, ref.program, ref.options,
                               fetches=ref.fetches)
    loaded = sg.load(compiled.save(str(tmp_path / "model")))
    cuda = loaded.manifest["entry_points"]["cuda"]
    assert cuda == {"host": "cuda/host.py", "kernels": {"fused_0": "cuda/fused_0.cu"}}
    assert loaded.kernels == CudaLikeExecutable.kernels
    assert loaded.manifest["backend"] == "cuda"
    x = feeds()
    for r, g in zip(ref(x), loaded(x)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


@needs_numpy_backend
def test_real_cuda_program_saves_its_source_and_cubins(tmp_path):
    """Rendering CUDA needs no GPU; cubins are built with nvcc where it exists."""
    import shutil

    prog, fetches = contract_program()
    compiled = sg.compile(prog, fetches, backend="cuda")
    archs = ["sm_90"] if shutil.which("nvcc") else []
    loaded = sg.load(compiled.save(str(tmp_path / "model"), cubin_archs=archs))
    cuda = loaded.manifest["entry_points"]["cuda"]
    assert cuda["source"] == "cuda/program.cu"
    with open(tmp_path / "model" / "cuda" / "program.cu", encoding="utf-8") as handle:
        assert handle.read() == compiled._executable.cuda_source
    assert sorted(cuda["cubins"]) == archs
    for rel in cuda["cubins"].values():
        assert (tmp_path / "model" / rel).stat().st_size > 0
        assert rel in loaded.manifest["files"]
    ref = sg.compile(prog, fetches, backend="interpreter")
    x = feeds()
    for r, g in zip(ref(x), loaded(x)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
