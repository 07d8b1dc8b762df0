"""Random numbers on the CUDA backend: the device code's Philox against the known answers, the
generated program run on the CPU (tests/backends/cuda_emulation) gives the interpreter's numbers
bit for bit, its PTX holds no fused multiply-add, and on a GPU the numbers are the same too."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.random import CUDA_RANDOM
from tests.ops.test_random import KNOWN_ANSWERS

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

CPU_DEVICE = """
#include <cmath>
using namespace std;
#define __device__
#define __forceinline__ inline
"""
WRAPPER = """
extern "C" void philox(unsigned long long block, long long stream, long long step,
                       long long counter, unsigned long long seed, unsigned int* out) {
  sg_philox(block, stream, step, counter, seed, out);
}
"""


@needs_gxx
def test_device_philox_matches_the_known_answers(tmp_path):
    source = tmp_path / "philox.cpp"
    source.write_text(CPU_DEVICE + CUDA_RANDOM + WRAPPER)
    library = tmp_path / "philox.so"
    done = subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    philox = ctypes.CDLL(str(library)).philox
    philox.argtypes = [ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_longlong,
                       ctypes.c_longlong, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_uint)]
    for counter, key, expected in KNOWN_ANSWERS:
        out = (ctypes.c_uint * 4)()
        philox(*counter, key[0] | key[1] << 32, out)
        assert list(out) == expected


def random_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 5], "float32")
        outs = [sg.random.uniform(x, seed=3), sg.random.normal(x, dtype="float64", seed=2 ** 63),
                sg.random.normal([4, 3], 1.0, 0.5, dtype="float16"),
                sg.random.uniform([9], -1.0, 1.0, dtype="float64"),
                sg.nn.dropout(x * 2.0, 0.25, seed=4)]
    return prog, outs


@needs_gxx
def test_emulated_kernels_give_the_interpreters_numbers_bit_for_bit(tmp_path):
    from tests.backends.cuda_emulation.device import SCHEDULES, EmulatedDevice
    from tests.backends.cuda_emulation.library import Library

    prog, outs = random_program()
    compiled = sg.compile(prog, outs, backend="cuda")
    assert sum(name.split("_", 1)[1].startswith("random") for name in compiled.kernels) == 5
    library = Library([compiled._executable.cuda_source], cache_dir=tmp_path)
    interpreted = sg.compile(prog, outs, backend="interpreter")
    x = np.random.default_rng(0).standard_normal((70, 5)).astype(np.float32)
    for step, schedule in zip((0, 7, 2 ** 32 + 1), SCHEDULES):
        got = EmulatedDevice(library, schedule).run(compiled, {"x": x, "rng_step": step})
        for want, have in zip(interpreted(x, rng_step=step), got):
            assert have.dtype == want.dtype
            np.testing.assert_array_equal(have, want)


@needs_nvcc
def test_random_kernels_compile_without_fused_multiply_adds(tmp_path):
    prog, outs = random_program()
    path = tmp_path / "random.cu"
    path.write_text(sg.compile(prog, outs, backend="cuda")._executable.cuda_source)
    ptx = tmp_path / "random.ptx"
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-std=c++17", "-o", str(ptx),
                           str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    text = ptx.read_text()
    assert "mul.wide.u32" in text or "mul.hi.u32" in text     # Philox's products
    assert "fma.rn.f64" not in text and "fma.rn.f32" not in text


@pytest.mark.cuda
def test_gpu_numbers_are_bit_identical():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except Exception:   # CuPy raises its own error without a driver
        pytest.skip("no CUDA device")
    prog, outs = random_program()
    x = np.random.default_rng(0).standard_normal((70, 5)).astype(np.float32)
    compiled = sg.compile(prog, outs, backend="cuda", return_numpy=True)
    interpreted = sg.compile(prog, outs, backend="interpreter")
    for step in (0, 7):
        for want, have in zip(interpreted(x, rng_step=step), compiled(x, rng_step=step)):
            np.testing.assert_array_equal(have, want)
