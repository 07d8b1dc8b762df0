"""The CUDA backend's kernels run on the CPU, against the interpreter, without a GPU.

The kernels' C++ is compiled by the host C++ compiler with a small emulation of the CUDA
execution model (one std::thread per CUDA thread, blocks in turn, ``__syncthreads`` and warp
shuffles on barriers), and the generated host module runs with NumPy standing in for CuPy.
This checks what the generated code computes (indexing, broadcasting by strides, split
reductions, epilogues, float16 storage) on every op sample; the GPU tests
(``test_cuda_gpu.py``) check the same on a device.
"""
import ctypes
import re
import shutil
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from tests.backends.test_cuda_codegen import _signatures
from tests.ops.samples import ALL_SAMPLES

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

TOLERANCE = {"float64": 1e-6, "float32": 1e-4, "float16": 2e-2}
UNITS = 2   # C++ translation units
VARIANTS = [("float64", True, True), ("float32", True, False), ("float16", False, True)]

EMULATION = r"""
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
using namespace std;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
struct dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static thread_local unsigned sg_lane, sg_warp;
static std::barrier<>* sg_block;
struct sg_warp_state { std::unique_ptr<std::barrier<>> barrier; unsigned long long slot[32]; };
static sg_warp_state sg_warps[32];

static inline void __syncthreads() { sg_block->arrive_and_wait(); }
template <typename T> static T __shfl_down_sync(unsigned, T value, int offset) {
  sg_warp_state& w = sg_warps[sg_warp];
  std::memcpy(&w.slot[sg_lane], &value, sizeof(T));
  w.barrier->arrive_and_wait();
  T result = value;
  if (sg_lane + offset < 32) std::memcpy(&result, &w.slot[sg_lane + offset], sizeof(T));
  w.barrier->arrive_and_wait();
  return result;
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }

struct sg_half { unsigned short bits; };
static inline float sg_h2f(sg_half h) { _Float16 f; std::memcpy(&f, &h.bits, 2); return (float)f; }
static inline sg_half sg_f2h(float x) { _Float16 f = (_Float16)x; sg_half h; std::memcpy(&h.bits, &f, 2); return h; }
template <typename T, typename Combine> static T sg_warp_reduce(T value, Combine combine) {
  for (int offset = 16; offset > 0; offset >>= 1) value = combine(value, __shfl_down_sync(0xffffffffu, value, offset));
  return value;
}

static void sg_run(unsigned gx, unsigned gy, unsigned bx, unsigned by, const std::function<void()>& body) {
  gridDim = {gx, gy, 1};
  blockDim = {bx, by, 1};
  unsigned n = bx * by;
  std::barrier<> block(n);
  sg_block = &block;
  for (unsigned w = 0; w < n / 32; ++w) sg_warps[w].barrier = std::make_unique<std::barrier<>>(32);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      threadIdx = {t % bx, t / bx, 0};
      sg_lane = t % 32;
      sg_warp = t / 32;
      for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x) {
          blockIdx = {x, y, 0};
          body();
          block.arrive_and_wait();
        }
    });
  }
  for (auto& thread : threads) thread.join();
}
"""

_ENTRY = re.compile(r"extern \"C\" __global__ void __launch_bounds__\(\d+\) (\w+)\((.*)\) \{")


def _launcher(name, params):
    casts = []
    for i, param in enumerate(params.split(", ")):
        ctype = param.rpartition(" ")[0].replace("__restrict__", "").strip()
        casts.append(f"*({ctype}*)a[{i}]")
    return (f'extern "C" void launch_{name}(unsigned gx, unsigned gy, unsigned bx, unsigned by, '
            f"void** a) {{ sg_run(gx, gy, bx, by, [&] {{ {name}({', '.join(casts)}); }}); }}")


class Emulator:
    """One shared library holding every distinct kernel of the given compiled programs."""

    def __init__(self, compiled_list, folder):
        self.uid = {}
        for compiled in compiled_list:
            for text in compiled.kernels.values():
                self.uid.setdefault(self._key(text), len(self.uid))
        units = [[EMULATION] for _ in range(UNITS)]   # compiled in parallel, then linked
        for key, uid in self.uid.items():
            text = re.sub(r"\bK_", f"u{uid}_", key)
            units[uid % UNITS] += [text] + [_launcher(n, p) for n, p in _ENTRY.findall(text)]
        objects = []
        for index, unit in enumerate(units):
            (folder / f"unit{index}.cpp").write_text("\n".join(unit))
            objects.append(folder / f"unit{index}.o")
        with ThreadPoolExecutor(UNITS) as pool:
            results = list(pool.map(lambda i: subprocess.run(
                ["g++", "-std=c++20", "-O1", "-w", "-fPIC", "-pthread", "-c", "-o",
                 str(objects[i]), str(folder / f"unit{i}.cpp")], capture_output=True,
                text=True), range(UNITS)))
        library = folder / "kernels.so"
        results.append(subprocess.run(["g++", "-shared", "-pthread", "-o", str(library)]
                                      + [str(o) for o in objects], capture_output=True, text=True))
        for done in results:
            assert done.returncode == 0, done.stderr[-4000:]
        self.library = ctypes.CDLL(str(library))
        self.signatures = _signatures("\n".join("\n".join(u) for u in units))
        self.launches = []     # (entry, grid, block) of every launch

    @staticmethod
    def _key(text):
        return re.sub(r"\bk\d+_", "K_", text)

    def kernel(self, program_name, text):
        uid = self.uid[self._key(text)]
        name = re.sub(r"^k\d+_", f"u{uid}_", program_name)
        function = getattr(self.library, f"launch_{name}")
        signature = self.signatures[name]

        def launch(grid, block, args):
            grid, block = tuple(grid) + (1,), tuple(block) + (1,)
            assert len(args) == len(signature)
            holders = []
            for arg, (kind, dtype) in zip(args, signature):
                if kind == "int":
                    assert type(arg) is np.dtype(dtype).type
                    holders.append((ctypes.c_int32 if dtype == "int32" else ctypes.c_int64)(arg))
                elif isinstance(arg, np.uint64):
                    holders.append(ctypes.c_void_p(0))
                else:
                    assert arg.dtype == dtype, (name, arg.dtype, dtype)
                    holders.append(ctypes.c_void_p(arg.ctypes.data))
            pointers = (ctypes.c_void_p * len(holders))(
                *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
            self.launches.append((name, grid[:2], block[:2]))
            function(grid[0], grid[1], block[0], block[1], pointers)
        return launch


def numpy_cupy():
    """A module standing in for CuPy, made of NumPy (kernels are set by the test)."""
    fake = types.ModuleType("cupy")
    fake.__dict__.update({k: v for k, v in np.__dict__.items() if not k.startswith("__")})

    class RawModule:
        def __init__(self, code=None, options=(), path=None):
            pass

        def get_function(self, name):
            return None

    fake.RawModule = RawModule
    fake.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Device=lambda: types.SimpleNamespace(attributes={"MultiProcessorCount": 1}))
    return fake


def run_emulated(compiled, emulator, feeds):
    executable = compiled._executable
    module = executable.load()
    for name, text in compiled.kernels.items():
        for entry in executable.entries:
            if entry == name or entry.startswith(name + "_"):
                module.KERNELS[entry] = emulator.kernel(entry, text)
    return compiled(**feeds)


@pytest.fixture(scope="module")
def programs():
    out = []
    for sample in ALL_SAMPLES:
        for dtype, with_grad, fusion in VARIANTS:
            prog, fetches = sample.program(dtype, with_grad and sample.grad)
            out.append((sample, dtype, prog, fetches,
                        sg.compile(prog, fetches, backend="cuda", fusion=fusion)))
    return out


@pytest.fixture(scope="module")
def emulator(programs, tmp_path_factory):
    return Emulator([p[-1] for p in programs], tmp_path_factory.mktemp("emulated"))


def _compare(expected, got, dtype, sample):
    rtol = TOLERANCE[dtype]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                   atol=rtol * max(sample.atol, 1e-6) * 100)


def test_every_sample_matches_the_interpreter(programs, emulator, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", numpy_cupy())
    failures = []
    for sample, dtype, prog, fetches, compiled in programs:
        feeds = sample.feeds(dtype)
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
        try:
            _compare(expected, run_emulated(compiled, emulator, feeds), dtype, sample)
        except AssertionError as exc:
            failures.append(f"{sample.id} {dtype}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)


def _reductions():
    """Programs that reach every reduction layout and launch shape: whole-block teams, split
    reductions with their merge kernel, column and general layouts, epilogues reading
    broadcast captures, every reduce kind."""
    rng = np.random.default_rng(0)
    cases = []

    def case(name, shapes, build, dtype="float64", dynamic=False):
        prog = sg.Program()
        with sg.program_guard(prog):
            xs = [sg.data(f"x{i}", [None] + list(s[1:]) if dynamic else list(s), dtype)
                  for i, s in enumerate(shapes)]
            outs = build(*xs)
        feeds = {f"x{i}": rng.uniform(0.5, 1.5, s).astype(dtype) for i, s in enumerate(shapes)}
        cases.append((name, prog, list(outs), feeds))

    case("full-sum-split", [(20000,)], lambda x: [sg.sum(sg.tanh(x * 1.5) + x), x * 2.0],
         "float32", dynamic=True)
    case("row-team-block", [(3, 5000)], lambda x: [sg.max(sg.exp(x), axis=1) * 2.0])
    case("col-split", [(3000, 40), (40,)],
         lambda x, b: [sg.sum(x * b, axis=0) + b, sg.mean(x, axis=0, keepdims=True)])
    case("col-general", [(5, 300, 7), (5, 1, 7)],
         lambda x, c: [sg.min(x - c, axis=1, keepdims=True) * c, sg.prod(x, axis=(0, 1))])
    case("row-general", [(6, 5, 40)],
         lambda x: [sg.sum(x, axis=(0, 2)), sg.max(x, axis=(0, 2), keepdims=True) - 1.0])
    case("broadcast-views", [(64, 1), (1, 48)],
         lambda a, b: [sg.sum(sg.broadcast_to(a, (64, 48)) * b, axis=1) / sg.sum(b)])
    # map ops after the reduction that read only map values: map outputs of reduce kernels
    case("col-late-map", [(3000, 40), (40,)],
         lambda x, b: [sg.sum(x * b, axis=0), sg.exp(x * b) - x])
    case("loss-and-gradient", [(700, 9)],
         lambda x: [sg.sum(sg.tanh(x) * x), *ir_backward.grad(sg.sum(sg.tanh(x) * x), [x])],
         "float32", dynamic=True)
    return cases


def test_reduction_layouts_and_splits_match_the_interpreter(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", numpy_cupy())
    cases = _reductions()
    compiled = [sg.compile(prog, outs, backend="cuda") for _, prog, outs, _ in cases]
    emulator = Emulator(compiled, tmp_path)
    styles = set()
    for (name, prog, outs, feeds), program in zip(cases, compiled):
        expected = sg.compile(prog, outs, backend="interpreter")(**feeds)
        got = run_emulated(program, emulator, feeds)
        dtype = feeds["x0"].dtype.name
        for e, g in zip(expected, got):
            assert g.shape == e.shape and g.dtype == e.dtype, name
            np.testing.assert_allclose(g, e, rtol=TOLERANCE[dtype], err_msg=name)
        styles.update(re.findall(r"_reduce\('\w+', '(\w+)'", program.source))
    assert styles == {"row", "col"}
    merged = {name for name, _, _ in emulator.launches if "_merge" in name}
    assert len(merged) >= 2                                             # split reductions
    assert any(grid[1] > 1 for _, grid, _ in emulator.launches)


def test_new_batch_size_reuses_the_compiled_kernels(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", numpy_cupy())
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        b = sg.parameter("b", [3], "float32", init=np.arange(3, dtype="float32"))
        y = sg.sum(sg.tanh(x + b), axis=1)
    compiled = sg.compile(prog, [y], backend="cuda")
    emulator = Emulator([compiled], tmp_path)
    reference = sg.compile(prog, [y], backend="interpreter")
    module = None
    for batch in (2, 37, 300):
        x_value = np.linspace(-1, 1, batch * 3, dtype="float32").reshape(batch, 3)
        got, = run_emulated(compiled, emulator, {"x": x_value}) if module is None \
            else compiled(x=x_value)
        module = module or compiled._executable.module
        assert compiled._executable.module is module      # same kernels, no recompilation
        np.testing.assert_allclose(got, reference(x=x_value)[0], rtol=1e-5)


def test_group_with_an_op_lacking_a_cuda_emitter_runs_on_the_host(tmp_path, monkeypatch):
    from symgrad.ops.core import get_op

    monkeypatch.setitem(sys.modules, "cupy", numpy_cupy())
    monkeypatch.delitem(get_op("sin").emitters, "cuda")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.sum(sg.sin(x) * 2.0 + x, axis=1)
    compiled = sg.compile(prog, [y], backend="cuda")
    assert not compiled.kernels and "on the host" in compiled.source
    x_value = np.linspace(0, 1, 12).reshape(3, 4)
    got, = run_emulated(compiled, Emulator([compiled], tmp_path), {"x": x_value})
    np.testing.assert_allclose(got, (np.sin(x_value) * 2 + x_value).sum(axis=1))
