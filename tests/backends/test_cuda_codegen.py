"""CUDA backend without a GPU: every generated kernel compiles with nvcc, golden sources,
host modules render, dynamic dims are kernel arguments, and running without CuPy fails
clearly. (test_cuda_emulated.py runs the kernels; test_cuda_nvrtc.py compiles them as CuPy.)"""
import functools
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.cuda_backend import CudaUnavailableError
from symgrad.backends.cuda_backend import kernels as kernel_lowering
from tests.backends.cuda_emulation.cases import distinct_kernels, sample_cases
from tests.backends.test_numpy_functions import _chain

GOLDEN = Path(__file__).parent / "golden_cuda"
UPDATE = os.environ.get("SYMGRAD_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def compiled_samples():
    return [(case.name, case.compiled) for case in sample_cases()]


def w2_program(shape=(None,), fetch_loss=True):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", list(shape), "float32")
        y = sg.sum(sg.tanh(x * 1.5 + 0.5) * sg.sin(x) + sg.exp(-x * x) * 0.3 + sg.log1p(x * x))
        gx, = ir_backward.grad(y, [x])
    return prog, [y, gx] if fetch_loss else [gx]


def bias_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float32")
        b = sg.parameter("b", [16], "float32", init=np.zeros(16, "float32"))
        loss = sg.mean(sg.tanh(x + b) ** 2)
        gb, = ir_backward.grad(loss, [b])
    return prog, [gb]


# --- nvcc ------------------------------------------------------------------------------------
def _nvcc(path, optimize=True):
    """nvcc's PTX of the ``.cu`` file ``path`` (``optimize=False``: every check of the front
    end and of NVVM's code generation, without its optimizer, about 3x faster on the thousand
    kernels of the samples; whole programs and the fma test below compile optimized)."""
    return subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-std=c++17", "-diag-suppress=177",
                           *(() if optimize else ("-Xcicc", "-O0")), "-o", os.devnull,
                           str(path)], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.slow
def test_every_sample_kernel_compiles_with_nvcc(compiled_samples, tmp_path):
    extra = [sg.compile(*w2_program(), backend="cuda"), sg.compile(*bias_program(), backend="cuda")]
    kernels = distinct_kernels([c for _, c in compiled_samples] + extra)
    assert len(kernels) > 100
    prelude = kernel_lowering.render("prelude.cuh.j2")
    batches = 2
    paths = []
    for index in range(batches):
        path = tmp_path / f"batch{index}.cu"
        path.write_text(prelude + "\n".join(kernels[index::batches]))
        paths.append(path)
    with ThreadPoolExecutor(batches) as pool:
        results = list(pool.map(functools.partial(_nvcc, optimize=False), paths))
    for result in results:
        assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_whole_program_source_compiles(tmp_path):
    compiled = sg.compile(*w2_program(), backend="cuda")
    path = tmp_path / "w2.cu"
    path.write_text(compiled._executable.cuda_source)
    result = _nvcc(path)
    assert result.returncode == 0, result.stderr


DUMPED_BUILDER = """
import symgrad as sg
from symgrad import ir_backward


def build():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float32")
        b = sg.parameter("b", [16], "float32")
        loss = sg.mean(sg.tanh(x + b) ** 2) + sg.max(sg.exp(x))
        gx, gb = ir_backward.grad(loss, [x, b])
    return prog, [loss, gx, gb]
"""


def test_cli_dump_writes_a_cu_file_that_compiles_as_written(tmp_path, capsys):
    from symgrad.cli import main
    from tests.backends.cuda_emulation import nvrtc

    (tmp_path / "model.py").write_text(DUMPED_BUILDER)
    out = tmp_path / "generated"
    assert main(["dump", str(tmp_path / "model.py"), "--backend", "cuda", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["build.cu", "build_cuda.py"]
    cu = (out / "build.cu").read_text()
    assert "sg_warp_reduce" in cu.split("// kernel ")[0]        # the prelude comes first
    assert cu.count('extern "C" __global__') >= 4
    compile((out / "build_cuda.py").read_text(), "build_cuda.py", "exec")
    if shutil.which("nvcc"):
        result = _nvcc(out / "build.cu")
        assert result.returncode == 0, result.stderr
    try:
        ok, log = nvrtc.compile_like_cupy(cu, "build.cu")
    except OSError:   # no NVRTC wheel: test_cuda_nvrtc.py says so
        return
    assert ok, log


def test_dump_and_log_show_the_host_module_and_the_cuda_source(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SYMGRAD_DUMP", str(tmp_path))
    monkeypatch.setenv("SYMGRAD_LOG", "output_code")
    compiled = sg.compile(*w2_program(), backend="cuda")
    dumped = sorted(os.listdir(tmp_path))
    assert [name.rsplit(".", 1)[1] for name in dumped] == ["cu", "py"]
    assert (tmp_path / dumped[0]).read_text() == compiled._executable.cuda_source
    assert (tmp_path / dumped[1]).read_text() == compiled.source
    err = capsys.readouterr().err
    assert compiled.source in err and compiled._executable.cuda_source in err


def multiply_add_source(dtype="float32") -> str:
    """The CUDA source of ``a * b + c``."""
    prog = sg.Program()
    with sg.program_guard(prog):
        a, b, c = (sg.data(name, [4], dtype) for name in "abc")
        out = a * b + c
    return sg.compile(prog, [out], backend="cuda")._executable.cuda_source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_round_a_product_and_a_sum_apart(tmp_path):
    """The cubins' nvcc flags contract no ``a * b + c`` into one fma (whose product never
    overflows to inf, as NumPy's does)."""
    from symgrad.backends.cuda_backend import NVCC_OPTIONS

    path = tmp_path / "multiply_add.cu"
    path.write_text(multiply_add_source())
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", *NVCC_OPTIONS, "-o",
                           str(tmp_path / "out.ptx"), str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "out.ptx").read_text()
    assert "mul.rn." in ptx and "add.rn." in ptx and "fma." not in ptx


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cubins_per_architecture():
    compiled = sg.compile(*w2_program(), backend="cuda")
    cubins = compiled._executable.cubins(["sm_80", "sm_90"])
    assert set(cubins) == {"sm_80", "sm_90"}
    assert all(blob[:4] == b"\x7fELF" for blob in cubins.values())


# --- golden sources --------------------------------------------------------------------------
def _check_golden(name, text):
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists() and text == path.read_text(), (
        f"{name} differs from the golden copy; rerun with SYMGRAD_UPDATE_GOLDEN=1 if intended")


def test_golden_w2_kernels():
    # loss and gradient: one kernel sums the loss and writes the gradient (a map output)
    compiled = sg.compile(*w2_program(), backend="cuda")
    assert list(compiled.kernels) == ["k0_sum"]
    _check_golden("w2_forward_row_reduction.cu", compiled.kernels["k0_sum"])
    gradient_only = sg.compile(*w2_program(fetch_loss=False), backend="cuda")
    assert list(gradient_only.kernels) == ["k0_fused"]
    _check_golden("w2_backward_elementwise.cu", gradient_only.kernels["k0_fused"])


def test_golden_column_reduction():
    compiled = sg.compile(*bias_program(), backend="cuda")
    col = [name for name, text in compiled.kernels.items() if "Column reduction" in text]
    assert col
    _check_golden("bias_grad_column_reduction.cu", compiled.kernels[col[0]])


# --- host modules ----------------------------------------------------------------------------
def test_host_module_renders_for_every_sample(compiled_samples):
    for case_name, compiled in compiled_samples:
        source = compiled.source
        compile(source, f"<{case_name}>", "exec")   # valid Python
        assert "def run(_dims=None, _buffers=None, /, **feeds)" in source
        for name, text in compiled.kernels.items():
            assert text.startswith(f"// kernel {name}:")   # provenance first
            assert f"'{name}'" in source                     # launched by the host


def test_fusion_gives_one_kernel_per_group():
    compiled = sg.compile(*w2_program(), backend="cuda")
    assert compiled.stats["kernels"] == 1 == compiled.stats["fused_groups"]
    assert "backward of %5 = tanh(%4)" in compiled.kernels["k0_sum"]
    bias = sg.compile(*bias_program(), backend="cuda")
    assert bias.stats["kernels"] == bias.stats["fused_groups"] + bias.stats["single_op_groups"]


def test_groups_of_the_same_structure_share_one_kernel():
    # a 1,000-op repetitive chain (3,000 ops with its gradient): 47 groups, 4 kernels
    compiled = sg.compile(*_chain(1000), backend="cuda")
    assert compiled.stats["fused_groups"] > 40
    assert compiled.stats["kernels"] == len(compiled.kernels) <= 8
    launched = re.findall(r"_(?:map|reduce)\('(\w+)'", compiled.source)
    assert len(launched) == compiled.stats["fused_groups"] > len(set(launched))
    assert set(launched) == set(compiled.kernels)
    shared = max(compiled.kernels, key=launched.count)
    assert f"runs kernel {shared}, shared (map)" in compiled.source
    assert re.search(r"^//   also run by fused groups \d+-\d+ \(the same code on their own "
                     r"values\)$", compiled.kernels[shared], re.M)
    # the .cu holds each shared kernel once
    assert compiled._executable.cuda_source.count(f"void __launch_bounds__(256) {shared}(") == 1


def test_groups_with_other_constants_get_their_own_kernels():
    compiled = sg.compile(*_chain(64, scale=lambda i: 1.0 + i / 1000), backend="cuda",
                          max_group_size=8)
    assert "shared" not in compiled.source
    assert compiled.stats["kernels"] == compiled.stats["fused_groups"] \
        + compiled.stats["single_op_groups"]


def test_dynamic_batch_dims_are_kernel_arguments():
    compiled = sg.compile(*bias_program(), backend="cuda")
    dynamic = [t for t in compiled.kernels.values() if "iteration shape (?" in t]
    assert len(dynamic) == 1        # forward and backward of the bias in one column reduction
    for text in dynamic:
        assert re.search(r"\bint n0\b", text) and "long long n0" in text   # 32/64-bit entries
    assert "x.shape[0]" not in compiled.source and "_d0 = _dims['?0']" in compiled.source
    static = sg.compile(*w2_program((1000,), fetch_loss=False), backend="cuda")
    assert "k0_fused_i64" not in static._executable.cuda_source     # small static: 32-bit only
    assert "int N, int n0" in static.kernels["k0_fused"]


def test_float16_storage_float32_math():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [8], "float16")
        y = sg.sum(sg.exp(x) * 2.0)
    compiled = sg.compile(prog, [y], backend="cuda")
    text = compiled._executable.cuda_source
    assert "const sg_half* __restrict__ in0" in text and "sg_h2f(in0[s])" in text
    assert "const float v" in text


def test_run_without_cupy_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    compiled = sg.compile(*w2_program(), backend="cuda")
    assert compiled.kernels and compiled.source
    with pytest.raises(CudaUnavailableError, match=r"install symgrad\[cuda\]"):
        compiled(x=np.ones(4, "float32"))
