"""examples/c_embed: the exported W1 MLP training step, run from a C program (100 Adam
steps) and from a C++ program, gives the losses and gradients the same program gives run from
Python; the C program is clean under AddressSanitizer; the export's Makefile and
CMakeLists.txt rebuild the library."""
import importlib.util
import os
import shutil
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .conftest import one_blas_thread

pytestmark = pytest.mark.slow   # builds a library and C programs: seconds each

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "c_embed")
FEATURES = 784
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")   # one GEMM rounding, as in one_blas_thread


def model():
    spec = importlib.util.spec_from_file_location("c_embed_model",
                                                  os.path.join(EXAMPLE, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(command, cwd=None, env=ENV):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def make(folder, target) -> str:
    """What the export's Makefile prints for ``target`` (``libs``, ``blas-cflags``...)."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    return run(["make", "-s", "--no-print-directory", "-C", folder, target]).strip()


def link_flags(folder) -> list:
    """What a program linking the static library needs (the Makefile's ``libs`` target)."""
    return make(folder, "libs").split()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, cblas):
    program = model().build()
    fn = sg.compile(*program, backend="c")
    folder = str(tmp_path_factory.mktemp("export") / "mlp_step")
    fn.export_c(folder, name="mlp_step", blas="numpy", native=True)   # the C backend's GEMM and flags
    return program, folder


def read_batches(path, batch, steps):
    data = np.fromfile(path, np.uint8)
    size = FEATURES * 4 + 8
    assert data.size == steps * batch * size
    for step in range(steps):
        chunk = data[step * batch * size:(step + 1) * batch * size]
        x = chunk[:batch * FEATURES * 4].view(np.float32).reshape(batch, FEATURES)
        labels = chunk[batch * FEATURES * 4:].view(np.int64)
        yield x, labels


def losses_of(output) -> np.ndarray:
    return np.array([float(line.split()[-1]) for line in output.splitlines()], np.float32)


def test_the_c_example_trains_as_python_does(exported, tmp_path):
    program, folder = exported
    binary, data = str(tmp_path / "train"), str(tmp_path / "batches.bin")
    run(["cc", "-std=gnu11", "-O2", f"-I{folder}", os.path.join(EXAMPLE, "train.c"),
         os.path.join(folder, "libmlp_step.a"), *link_flags(folder), "-o", binary])
    batch, steps = 16, 100
    got = losses_of(run([binary, os.path.join(folder, "mlp_step.params"), str(batch),
                         str(steps), data]))
    assert got.shape == (steps,) and got[-10:].mean() < got[:10].mean()   # it learns
    fn = sg.compile(*program, backend="c")   # a fresh state: the inits
    with one_blas_thread():
        want = np.array([fn(x=x, labels=labels)[0] for x, labels in
                         read_batches(data, batch, steps)], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_c_example_under_address_sanitizer(exported, tmp_path):
    _, folder = exported
    binary = str(tmp_path / "train_asan")
    flags = ["-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined",
             "-fno-omit-frame-pointer", f"-I{folder}"]
    blas = link_flags(folder)
    blas_cflags = make(folder, "blas-cflags").split()
    done = subprocess.run(["cc", *flags, *blas_cflags, os.path.join(EXAMPLE, "train.c"),
                           os.path.join(folder, "mlp_step.c"), *blas, "-o", binary],
                          capture_output=True, text=True)
    if done.returncode != 0 and "asan" in done.stderr.lower():
        pytest.skip(f"no AddressSanitizer runtime: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    env = dict(ENV, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    done = subprocess.run([binary, os.path.join(folder, "mlp_step.params"), "4", "3"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ERROR: AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr
    assert len(done.stdout.splitlines()) == 3


CPP_CALLER = r"""
#include <cstdio>
#include <fstream>
#include <vector>
#include "grads.h"

// Runs the exported W1 gradient program once on the batch in argv[2] (x float32 then labels
// int64) and writes every output, in order, to argv[3].
int main(int, char **argv)
{
    const std::int64_t batch = 8;
    std::vector<float> x(batch * 784);
    std::vector<std::int64_t> labels(batch);
    std::ifstream in(argv[2], std::ios::binary);
    in.read(reinterpret_cast<char *>(x.data()), x.size() * sizeof(float));
    in.read(reinterpret_cast<char *>(labels.data()), labels.size() * sizeof(std::int64_t));
    grads_state *state = grads_state_new();
    if (state == nullptr || grads_state_load(state, argv[1]) != GRADS_OK) {
        std::fprintf(stderr, "%s\n", grads_last_error());
        return 1;
    }
    std::vector<std::vector<float>> out = {std::vector<float>(1),
        std::vector<float>(784 * 512), std::vector<float>(512), std::vector<float>(512 * 512),
        std::vector<float>(512), std::vector<float>(512 * 10), std::vector<float>(10)};
    int code = grads_run(state, x.data(), batch, labels.data(), batch, out[0].data(),
                         out[1].data(), out[2].data(), out[3].data(), out[4].data(),
                         out[5].data(), out[6].data());
    if (code != GRADS_OK) {
        std::fprintf(stderr, "%s\n", grads_last_error());
        return 1;
    }
    code = grads_run(state, x.data(), batch, labels.data(), batch - 1, out[0].data(),
                     out[1].data(), out[2].data(), out[3].data(), out[4].data(),
                     out[5].data(), out[6].data());
    std::printf("%d %s\n", code, grads_last_error());
    std::ofstream file(argv[3], std::ios::binary);
    for (auto &array : out)
        file.write(reinterpret_cast<const char *>(array.data()), array.size() * sizeof(float));
    grads_state_free(state);
    return 0;
}
"""


def test_a_cpp_caller_gets_the_python_gradients(tmp_path, cblas):
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    spec = model()
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):   # the W1 gradient program: the model without Adam
        x = sg.data("x", ["batch", FEATURES], "float32")
        labels = sg.data("labels", ["batch"], "int64")
        params, h = [], x
        for i, (a, b) in enumerate(zip(spec.SIZES, spec.SIZES[1:])):
            w = sg.parameter(f"w{i}", [a, b], "float32",
                             init=(rng.standard_normal((a, b)) / np.sqrt(a)).astype("float32"))
            bias = sg.parameter(f"b{i}", [b], "float32", init=np.zeros(b, "float32"))
            params += [w, bias]
            h = sg.nn.linear(h, w, bias)
            if i < len(spec.SIZES) - 2:
                h = sg.tanh(h)
        loss = sg.nn.softmax_cross_entropy(h, labels)
        grads = ir_backward.grad(loss, params)
    fn = sg.compile(prog, [loss] + list(grads), backend="c")
    folder = fn.export_c(str(tmp_path / "grads"), name="grads", blas="numpy", native=True)
    source, binary = tmp_path / "caller.cpp", str(tmp_path / "caller")
    source.write_text(CPP_CALLER)
    run(["c++", "-std=c++17", "-O2", f"-I{folder}", str(source),
         os.path.join(folder, "libgrads.a"), *link_flags(folder), "-o", binary])
    feeds = {"x": rng.standard_normal((8, FEATURES)).astype("float32"),
             "labels": rng.integers(0, 10, 8)}
    batch_file, out_file = tmp_path / "batch.bin", tmp_path / "out.bin"
    batch_file.write_bytes(feeds["x"].tobytes() + feeds["labels"].tobytes())
    printed = run([binary, os.path.join(folder, "grads.params"), str(batch_file),
                   str(out_file)])
    assert printed.strip() == "1 dim 'batch' is 7 in labels but 8 in x"
    got = np.fromfile(out_file, np.float32)
    with one_blas_thread():
        want = fn(**feeds)
    at = 0
    for array in want:
        np.testing.assert_allclose(got[at:at + array.size].reshape(array.shape), array,
                                   rtol=1e-6, atol=1e-7)
        at += array.size


def test_the_makefile_and_cmake_rebuild_the_library(exported, tmp_path):
    _, folder = exported
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for name in ("libmlp_step.so", "libmlp_step.a"):
        os.unlink(copy / name)
    if shutil.which("make"):
        run(["make", "-s", "-C", str(copy)])
        assert (copy / "libmlp_step.so").is_file() and (copy / "libmlp_step.a").is_file()
    if shutil.which("cmake"):
        build = tmp_path / "build"
        run(["cmake", "-S", str(copy), "-B", str(build),
             f"-DBLAS_LIBS={make(folder, 'blas-libs')}",
             f"-DBLAS_CFLAGS={make(folder, 'blas-cflags')}"], env=os.environ)
        run(["cmake", "--build", str(build)], env=os.environ)
        assert (build / "libmlp_step.so").is_file() and (build / "libmlp_step.a").is_file()


def test_the_library_needs_no_python(exported):
    _, folder = exported
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    needed = [line for line in run(["readelf", "-d", os.path.join(folder, "libmlp_step.so")])
              .splitlines() if "(NEEDED)" in line]
    assert needed and not any("python" in line.lower() for line in needed)


def test_the_stripped_library_is_under_a_megabyte(exported, tmp_path):
    """The issue's target: the W1 training step's library, stripped, under 1 MB (the
    parameters, with Adam's moments 8 MB here, come on top)."""
    _, folder = exported
    if shutil.which("strip") is None:
        pytest.skip("no strip")
    stripped = tmp_path / "libmlp_step.so"
    run(["strip", "-o", str(stripped), os.path.join(folder, "libmlp_step.so")])
    assert stripped.stat().st_size < 1 << 20
