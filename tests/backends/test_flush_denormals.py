"""The ``flush_denormals`` option: compiled C reads subnormal floats as 0 and writes 0 for a
subnormal result, on the calling thread, on the pool's threads and in the GEMM's blocks, and
gives the caller its floating-point mode back; without it, the C backend keeps NumPy's
subnormals. An exported library flushes in its run; the CUDA compilers get ``-ftz=true``.
The NumPy backend and the interpreter accept the option and keep NumPy's arithmetic."""
import ctypes
import json
import os
import platform
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import cuda_backend
from symgrad.backends.c_backend import compiler

from .c_library.library_ctypes import Library

TINY = {"float32": 1e-20, "float64": 1e-160}       # squared: a subnormal
SUBNORMAL = {"float32": 1e-40, "float64": 1e-310}


def _product_program(dtype, shape=(None,)):
    """``[x * y, x + 0]``: a subnormal product, and a subnormal operand read as it is."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", list(shape), dtype)
        y = sg.data("y", list(shape), dtype)
        fetches = [x * y, x + 0.0]
    return prog, fetches


def _compiled(program, backend="c", **options):
    return sg.compile(*program, backend=backend, options=sg.CompileOptions(**options))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_c_flushes_subnormal_results_and_operands_only_when_asked(dtype):
    program = _product_program(dtype)
    tiny = np.full(9, TINY[dtype], dtype)
    subnormal = np.full(9, SUBNORMAL[dtype], dtype)
    want = sg.compile(*program, backend="interpreter")(x=tiny, y=tiny)[0]
    assert np.all(want > 0) and np.all(want < np.finfo(dtype).tiny)
    keeping = _compiled(program)
    np.testing.assert_array_equal(keeping(x=tiny, y=tiny)[0], want)
    np.testing.assert_array_equal(keeping(x=subnormal, y=tiny)[1], subnormal)
    flushing = _compiled(program, flush_denormals=True)
    product, _ = flushing(x=tiny, y=tiny)
    _, operand = flushing(x=subnormal, y=tiny)
    assert not np.any(product) and not np.any(operand)
    normal = np.linspace(1.0, 2.0, 9).astype(dtype)
    np.testing.assert_array_equal(flushing(x=normal, y=normal)[0], normal * normal)


def test_the_callers_mode_is_restored_after_the_call():
    """NumPy on the thread that called a flushing program still computes subnormals."""
    flushing = _compiled(_product_program("float32"), flush_denormals=True)
    flushing(x=np.ones(4, np.float32), y=np.ones(4, np.float32))
    tiny = np.full(4, 1e-20, np.float32)
    assert np.all(tiny * tiny > 0)


@pytest.fixture(scope="module")
def caller_mode(tmp_path_factory):
    """``set(flush)``: the calling thread's x86 FTZ/DAZ bits on or off (a helper built with
    the C backend's compiler; skips elsewhere)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the helper sets x86's MXCSR")
    folder = tmp_path_factory.mktemp("mode")
    source, library = folder / "mode.c", folder / "libmode.so"
    source.write_text("void set_flush(int on) { unsigned m = __builtin_ia32_stmxcsr();\n"
                      "  __builtin_ia32_ldmxcsr(on ? m | 0x8040u : m & ~0x8040u); }\n")
    subprocess.run([compiler.toolchain().compiler, "-shared", "-fPIC", "-o", str(library),
                    str(source)], check=True)
    return ctypes.CDLL(str(library)).set_flush


def test_the_pools_threads_take_the_mode_of_the_loops_caller(caller_mode):
    """A program without the option follows its caller's mode on every thread of its pool,
    whichever mode its workers started in: chunked loops and a large GEMM (blocks on the
    pool) on two threads, called with flushing on, flush in every chunk, then keep subnormals
    again."""
    n = 1 << 20
    tiny = np.full(n, 1e-20, np.float32)
    loop = _compiled(_product_program("float32", (n,)), threads=2, chunk_size=1 << 14)
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [256, 128], "float32")
        b = sg.data("b", [128, 256], "float32")
        fetches = [sg.matmul(a, b)]
    gemm = _compiled((prog, fetches), threads=2)
    left = np.full((256, 128), 1e-20, np.float32)
    right = np.full((128, 256), 1e-20, np.float32)
    for flush in (False, True, False, True, False):
        caller_mode(flush)
        try:
            products = [loop(x=tiny, y=tiny)[0], gemm(a=left, b=right)[0]]
        finally:
            caller_mode(False)
        for got in products:
            assert not np.any(got) if flush else np.all(got > 0)
    np.testing.assert_allclose(products[1], left @ right, rtol=1e-5)


def test_a_flushing_program_flushes_on_every_thread_of_its_pool():
    n = 1 << 20
    tiny = np.full(n, 1e-20, np.float32)
    flushing = _compiled(_product_program("float32", (n,)), flush_denormals=True, threads=2,
                         chunk_size=1 << 14)
    for _ in range(3):
        assert not np.any(flushing(x=tiny, y=tiny)[0])

    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [256, 128], "float32")
        b = sg.data("b", [128, 256], "float32")
        fetches = [sg.matmul(a, b)]
    left = np.full((256, 128), 1e-20, np.float32)
    right = np.full((128, 256), 1e-20, np.float32)
    flushed = _compiled((prog, fetches), flush_denormals=True, threads=2)(a=left, b=right)[0]
    assert not np.any(flushed)
    kept = _compiled((prog, fetches), threads=2)(a=left, b=right)[0]
    np.testing.assert_allclose(kept, left @ right, rtol=1e-5)
    assert np.all(kept > 0)


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_numpys_backends_accept_the_option_and_keep_numpys_arithmetic(backend):
    tiny = np.full(4, 1e-20, np.float32)
    got = _compiled(_product_program("float32"), backend, flush_denormals=True)(x=tiny, y=tiny)
    np.testing.assert_array_equal(got[0], tiny * tiny)


def test_an_exported_library_flushes_in_its_run(tmp_path):
    pytest.importorskip("ctypes")
    fn = _compiled(_product_program("float32", (8,)), flush_denormals=True)
    folder = fn.export_c(str(tmp_path / "flush"), name="flush", blas="numpy")
    with open(os.path.join(folder, "manifest.json")) as handle:
        library = Library(folder, json.load(handle))
    assert library.load(os.path.join(folder, "flush.params")) == 0, library.error()
    tiny = np.full(8, 1e-20, np.float32)
    code, (product, _) = library.run({"x": tiny, "y": tiny}, [(8,), (8,)])
    assert code == 0, library.error()
    assert not np.any(product)
    assert np.all(tiny * tiny > 0)   # the caller's mode is back


def test_cuda_compilers_get_ftz_only_with_the_option(monkeypatch):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [8], "float32")
        fetches = [sg.exp(x) * x]
    calls = []

    def fake_nvcc(nvcc, source, arch, flush=False):
        calls.append(cuda_backend.compiler_options(cuda_backend.NVCC_OPTIONS, flush))
        return b""
    monkeypatch.setattr(cuda_backend, "_nvcc_cubin", fake_nvcc)
    monkeypatch.setattr(cuda_backend.shutil, "which", lambda name: "/usr/bin/nvcc")
    for flush in (False, True):
        fn = _compiled((prog, fetches), "cuda", flush_denormals=flush)
        fn._executable.cubins(["sm_80"])
    assert [cuda_backend.FLUSH_OPTION in options for options in calls] == [False, True]
    assert cuda_backend.compiler_options(cuda_backend.NVRTC_OPTIONS, True)[-1] == "-ftz=true"
