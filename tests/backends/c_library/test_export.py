"""fn.export_c: the exported library, called with ctypes, computes what the program computes
in Python (the C backend) on the same inputs, refuses what it cannot compute in C, checks its
dims and parameter file, and keeps the state unchanged when a call fails."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .conftest import one_blas_thread
from .library_ctypes import Library

pytestmark = pytest.mark.slow   # each test builds a library with the C compiler: seconds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def small_mlp(dtype="float32", adam=False, sizes=(12, 16, 16, 3), seed=0):
    """The W1 MLP's structure at small sizes: ``(program, fetches)``: the loss and every
    gradient, or (``adam``) the loss of one Adam step."""
    rng = np.random.default_rng(seed)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", sizes[0]], dtype)
        labels = sg.data("labels", ["batch"], "int64")
        params, h = [], x
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            w = sg.parameter(f"w{i}", [a, b], dtype,
                             init=(rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype))
            bias = sg.parameter(f"b{i}", [b], dtype, init=rng.standard_normal(b).astype(dtype))
            params += [w, bias]
            h = sg.nn.linear(h, w, bias)
            if i < len(sizes) - 2:
                h = sg.tanh(h)
        loss = sg.nn.softmax_cross_entropy(h, labels)
        if adam:
            sg.optimizer.Adam(learning_rate=1e-2).minimize(loss)
            return prog, [loss]
        grads = ir_backward.grad(loss, params)
    return prog, [loss] + list(grads)


def batch(n, dtype="float32", features=12, classes=3, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, features)).astype(dtype),
            "labels": rng.integers(0, classes, n)}


def export(tmp_path, program, name, **options):
    """Compile and export with NumPy's OpenBLAS (the C backend's GEMM: see conftest), built
    for this machine's CPU as the C backend builds (the same code, so the same numbers)."""
    fn = sg.compile(*program, backend="c")
    options.setdefault("blas", "numpy")
    options.setdefault("native", True)
    folder = fn.export_c(str(tmp_path / name), name=name, **options)
    with open(os.path.join(folder, "manifest.json")) as handle:
        manifest = json.load(handle)
    return fn, folder, manifest


@pytest.fixture(scope="module")
def gradients(tmp_path_factory, cblas):
    fn, folder, manifest = export(tmp_path_factory.mktemp("grad"), small_mlp(), "mlp")
    library = Library(folder, manifest)
    assert library.load(os.path.join(folder, "mlp.params")) == 0, library.error()
    yield fn, folder, manifest, library
    library.close()


@pytest.fixture(scope="module")
def adam(tmp_path_factory, cblas):
    fn, folder, manifest = export(tmp_path_factory.mktemp("adam"), small_mlp(adam=True),
                                  "step")
    library = Library(folder, manifest)
    assert library.load(os.path.join(folder, "step.params")) == 0, library.error()
    yield fn, folder, manifest, library
    library.close()


def test_the_folder_holds_what_the_issue_lists(gradients):
    _, folder, manifest, _ = gradients
    for name in ("libmlp.so", "libmlp.a", "mlp.h", "mlp.c", "mlp.params", "Makefile",
                 "CMakeLists.txt", "README.md", "manifest.json"):
        assert os.path.isfile(os.path.join(folder, name)), name
    assert set(manifest["files"]) == set(os.listdir(folder)) - {"manifest.json"}
    header = open(os.path.join(folder, "mlp.h")).read()
    assert "int mlp_run(mlp_state *state, const float *x, int64_t x_dim0, const int64_t " \
           "*labels, int64_t labels_dim0, float *out0" in header
    readme = open(os.path.join(folder, "README.md")).read()
    assert manifest["library"]["blas"] in readme
    # nothing of Python in the library
    symbols = subprocess.run(["nm", "-D", "--undefined-only", os.path.join(folder, "libmlp.so")],
                             capture_output=True, text=True).stdout
    assert "Py" not in symbols


def _assert_library_matches(fn, library, feeds, rtol, atol):
    """The library's results for ``feeds`` are the compiled program's, to ``rtol``/``atol``."""
    with one_blas_thread():
        want = fn(**feeds)
        code, got = library.run(feeds, [a.shape for a in want])
    assert code == 0, library.error()
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


def test_gradients_equal_the_c_backend(gradients):
    fn, _, _, library = gradients
    feeds = batch(7)
    _assert_library_matches(fn, library, feeds, rtol=1e-6, atol=1e-7)


def test_float64_results_equal_the_c_backend_exactly(tmp_path, cblas):
    """Bit for bit in float64, gradients and Adam's steps: the library calls the C backend's
    GEMMs with the same arguments, runs its group functions, and its row ops' loops are the
    C backend's function compiled from the same text with the same flags (c/row_math.c.j2)."""
    for program, name in ((small_mlp("float64"), "mlp64"),
                          (small_mlp("float64", adam=True), "step64")):
        fn, folder, manifest = export(tmp_path, program, name)
        library = Library(folder, manifest)
        assert library.load(os.path.join(folder, f"{name}.params")) == 0
        with one_blas_thread():
            for step in range(3):
                feeds = batch(9, "float64", seed=step)
                want = fn(**feeds)
                code, got = library.run(feeds, [a.shape for a in want])
                assert code == 0, library.error()
                for a, b in zip(want, got):
                    np.testing.assert_array_equal(b, a, err_msg=f"{name}, call {step}")
        for parameter in manifest["library"]["state"]:
            ref = np.asarray(fn.state[parameter])
            np.testing.assert_array_equal(library.parameter(parameter, ref.dtype, ref.shape),
                                          ref, err_msg=parameter)
        library.close()


def test_adam_steps_update_the_state_as_in_python(adam):
    fn, _, _, library = adam
    with one_blas_thread():
        for step in range(4):
            feeds = batch(5, seed=step)
            want = fn(**feeds)
            code, got = library.run(feeds, [a.shape for a in want])
            assert code == 0, library.error()
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for name in ("w0", "b2", "w1@adam_v", "w0@adam_t"):
        ref = np.asarray(fn.state[name])
        np.testing.assert_allclose(library.parameter(name, ref.dtype, ref.shape), ref,
                                   rtol=1e-6, atol=1e-7)


def test_a_failed_call_leaves_the_state_unchanged(adam):
    _, _, _, library = adam
    feeds = batch(5)
    before = {name: library.parameter(name, "float32", shape)
              for name, shape in (("w0", (12, 16)), ("w0@adam_m", (12, 16)))}
    feeds["labels"][3] = 7   # outside [0, 3): found after the forward ran
    code, _ = library.run(feeds, [()])
    assert code == 2
    assert "class index 7 of labels is outside [0, 3)" in library.error()
    for name, array in before.items():
        assert np.array_equal(library.parameter(name, "float32", array.shape), array)


def test_dims_are_checked_at_the_entry_point(gradients):
    fn, _, _, library = gradients
    feeds = batch(6)
    shapes = [a.shape for a in fn(**feeds)]
    feeds["labels"] = feeds["labels"][:4]
    code, _ = library.run(feeds, shapes)
    assert code == 1
    assert library.error() == "dim 'batch' is 4 in labels but 6 in x"
    code, _ = library.run(batch(6), shapes, dims={"x_dim0": -1})
    assert code == 1 and "x: dim 0 is -1" in library.error()


def test_the_parameter_file_is_checked(gradients, tmp_path):
    _, folder, _, library = gradients
    data = bytearray(open(os.path.join(folder, "mlp.params"), "rb").read())
    data[100] ^= 1
    damaged = tmp_path / "damaged.params"
    damaged.write_bytes(bytes(data))
    assert library.load(str(damaged)) == 5
    assert "checksum does not match" in library.error()
    assert library.load(str(tmp_path / "missing.params")) == 5
    assert "cannot open" in library.error()


def test_the_blas_found_on_this_machine(tmp_path):
    """Without blas=: a system CBLAS when one links (pkg-config, -lopenblas, -lcblas), else
    NumPy's; the README says which."""
    try:
        fn, folder, manifest = export(tmp_path, small_mlp(), "found", blas=None)
    except sg.errors.SymgradError as exc:
        pytest.skip(f"no CBLAS: {exc}")
    assert manifest["library"]["blas"] in open(os.path.join(folder, "README.md")).read()
    library = Library(folder, manifest)
    assert library.load(os.path.join(folder, "found.params")) == 0
    feeds = batch(7)
    want = fn(**feeds)
    code, got = library.run(feeds, [a.shape for a in want])
    assert code == 0, library.error()
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    library.close()


def test_a_default_export_builds_for_any_cpu(tmp_path, cblas):
    """Without native=True, the library and the folder's Makefile and CMakeLists.txt build
    without -march=native (NATIVE=1 / -DNATIVE=ON adds it), and the manifest says so; the
    results agree with the C backend's to float32's precision (float32 tanh is libm's there)."""
    fn, folder, manifest = export(tmp_path, small_mlp(), "anycpu", native=False)
    entry = manifest["library"]
    assert entry["native"] is False and "-march=native" not in entry["cflags"]
    makefile = open(os.path.join(folder, "Makefile")).read()
    assert "NATIVE ?= 0" in makefile and "ARCH_FLAGS ?= -march=native" in makefile
    assert 'option(NATIVE "build for this machine\'s CPU (-march=native)" OFF)' in \
        open(os.path.join(folder, "CMakeLists.txt")).read()
    assert "any CPU of the architecture" in open(os.path.join(folder, "README.md")).read()
    if shutil.which("make"):
        def commands(*arguments):
            return subprocess.run(["make", "-n", "-B", "-C", folder, *arguments],
                                  capture_output=True, text=True, check=True).stdout
        assert "-march=native" not in commands()
        assert "-march=native" in commands("NATIVE=1")
    library = Library(folder, manifest)
    assert library.load(os.path.join(folder, "anycpu.params")) == 0
    feeds = batch(7)
    _assert_library_matches(fn, library, feeds, rtol=1e-5, atol=1e-6)
    library.close()


def test_a_native_export_says_so(gradients):
    _, folder, manifest, _ = gradients
    assert manifest["library"]["native"] is True and "-march=native" in \
        manifest["library"]["cflags"]
    assert "NATIVE ?= 1" in open(os.path.join(folder, "Makefile")).read()
    assert "this machine's CPU" in open(os.path.join(folder, "README.md")).read()


def test_reshapes_read_the_same_buffer(tmp_path, cblas):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 6], "float32")
        w = sg.parameter("w", [2, 2], "float32", init=np.eye(2, dtype="float32") * 3.0)
        y = sg.tanh(sg.reshape(x * 2.0, [-1, 3, 2])) + 1.0
        z = sg.reshape(sg.matmul(sg.reshape(y, [-1, 2]), w), [-1, 6])
        loss = sg.sum(z * z)
        gx, gw = ir_backward.grad(loss, [x, w])
    fn, folder, manifest = export(tmp_path, (prog, [loss, z, gx, gw]), "views")
    library = Library(folder, manifest)
    assert library.load(os.path.join(folder, "views.params")) == 0
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 6)).astype("float32")}
    _assert_library_matches(fn, library, feeds, rtol=1e-6, atol=1e-7)
    library.close()


def test_an_op_without_c_is_refused_by_name(tmp_path, cblas):
    """A matmul of stacks whose batch dims broadcast: the C backend runs it on NumPy."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 4], "float32")
        w = sg.parameter("w", [1, 4, 5], "float32", init=np.ones((1, 4, 5), "float32"))
        y = sg.matmul(x, w) * 2.0
    fn = sg.compile(prog, [y], backend="c")
    with pytest.raises(sg.errors.SymgradError, match=r"op 'matmul' \(.*matmul\(%x, %w\).*\) "
                                                     r"is not computed in C"):
        fn.export_c(str(tmp_path / "refused"), name="refused")


def test_numpy_programs_are_refused(tmp_path):
    prog, fetches = small_mlp()
    fn = sg.compile(prog, fetches, backend="numpy")
    with pytest.raises(sg.errors.SymgradError, match="backend=\"c\""):
        fn.export_c(str(tmp_path / "x"))


def test_parameters_compiled_in(tmp_path, cblas):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 3], "float32")
        w = sg.parameter("w", [3, 2], "float32", init=np.arange(6, dtype="float32").reshape(3, 2))
        y = sg.tanh(sg.matmul(x, w))
    fn, folder, manifest = export(tmp_path, (prog, [y]), "embedded", embed_parameters=True)
    assert "embedded_state.c" in manifest["files"]
    library = Library(folder, manifest)   # no state_load: state_new starts from them
    feeds = {"x": np.ones((2, 3), "float32")}
    code, got = library.run(feeds, [(2, 2)])
    assert code == 0, library.error()
    np.testing.assert_allclose(got[0], fn(**feeds)[0], rtol=1e-6)
    library.close()


def test_cli_export_and_inspect(tmp_path, cblas):
    model = tmp_path / "model.py"
    model.write_text("import symgrad as sg\n\ndef build():\n    prog = sg.Program()\n"
                     "    with sg.program_guard(prog):\n"
                     "        x = sg.data('x', ['n', 3], 'float32')\n"
                     "        y = sg.sum(sg.exp(x) * 2.0)\n    return prog, [y]\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = tmp_path / "lib"
    done = subprocess.run([sys.executable, "-m", "symgrad", "export", str(model), "--target",
                           "c-library", "-o", str(out), "--name", "tiny"], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run([sys.executable, "-m", "symgrad", "inspect", str(out)],
                           capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "int tiny_run(tiny_state *state, const float *x, int64_t x_dim0, float *out0)" \
        in shown.stdout
    assert "BLAS: no BLAS" in shown.stdout
    assert "built for: any CPU of its architecture" in shown.stdout
    with open(out / "tiny.c", "a") as handle:
        handle.write("/* changed */\n")
    shown = subprocess.run([sys.executable, "-m", "symgrad", "inspect", str(out)],
                           capture_output=True, text=True, env=env)
    assert shown.returncode == 1 and "'tiny.c' was modified" in shown.stderr
