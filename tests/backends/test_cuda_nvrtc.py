"""Every generated kernel compiles with NVRTC, the compiler CuPy's RawModule uses at run time
(from the nvidia-cuda-nvrtc wheel of the ``nvrtc`` extra, through ctypes; no GPU needed).

NVRTC rejects code that nvcc and g++ accept (``std::tanh`` in device code, ``tanh`` of an
integer), so passing nvcc or the CPU emulation does not mean a program loads under CuPy.
Every distinct kernel of the op samples and of the launch-path programs goes through NVRTC's
front end (type checks, template instantiation, inline-asm operands) in a few batches after
the prelude; whole programs, exactly as the backend hands them to CuPy, compile to PTX.
"""
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

import symgrad as sg
from symgrad.backends.cuda_backend import kernels as kernel_lowering
from tests.backends.cuda_emulation import nvrtc
from tests.backends.cuda_emulation.cases import distinct_kernels, layout_cases, sample_cases
from tests.backends.test_cuda_codegen import bias_program, multiply_add_source, w2_program

try:
    nvrtc.load()
    NVRTC_ERROR = None
except OSError as exc:
    NVRTC_ERROR = str(exc)
pytestmark = pytest.mark.skipif(NVRTC_ERROR is not None, reason=f"no NVRTC: {NVRTC_ERROR}")
BATCHES = 4


def _front_end(source):
    return nvrtc.compile_like_cupy(source, extra=("-fdevice-syntax-only",))


def test_every_kernel_passes_the_nvrtc_front_end():
    compiled = [case.compiled for case in sample_cases() + layout_cases()]
    kernels = distinct_kernels(compiled)
    assert len(kernels) > 300
    prelude = kernel_lowering.render("prelude.cuh.j2")
    sources = [prelude + "\n".join(kernels[i::BATCHES]) for i in range(BATCHES)]
    with ThreadPoolExecutor(2) as pool:
        for ok, log in pool.map(_front_end, sources):
            assert ok, log[-4000:]


def test_whole_programs_compile_to_ptx_as_cupy_does():
    programs = [case.compiled for case in layout_cases()]
    programs += [sg.compile(*w2_program(), backend="cuda"),
                 sg.compile(*bias_program(), backend="cuda")]
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(nvrtc.compile_like_cupy,
                           [p._executable.cuda_source for p in programs])
        for program, (ok, log) in zip(programs, results):
            assert ok, f"{list(program.kernels)}:\n{log[-4000:]}"


def test_nvrtc_rejects_device_code_that_nvcc_accepts(tmp_path):
    source = 'extern "C" __global__ void k(float* a) { a[0] = std::tanh(a[0]); }\n'
    ok, log = nvrtc.compile_like_cupy(source)
    assert not ok and 'namespace "std" has no member "tanh"' in log
    if shutil.which("nvcc"):
        path = tmp_path / "k.cu"
        path.write_text("#include <cmath>\n" + source)
        done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-o", str(tmp_path / "k.ptx"),
                               str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_product_and_a_sum_round_apart_as_numpy_does(dtype):
    """No fma contraction: ``a * b + c`` with ``a * b`` past the largest float is inf in
    NumPy, and one fma would give a finite number. (CuPy's ``-ftz=true`` makes float32's
    ``mul.rn.ftz.f32``: subnormals flushed to zero, see docs/guarantees.md.)"""
    ptx = nvrtc.ptx_like_cupy(multiply_add_source(dtype))
    assert "mul.rn." in ptx and "add.rn." in ptx and "fma." not in ptx
