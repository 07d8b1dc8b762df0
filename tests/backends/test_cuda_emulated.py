"""The CUDA backend's generated code runs on the CPU, against the interpreter, without a GPU.

Each program's whole ``.cu`` (prelude included, as the backend hands it to CuPy) is compiled
with the fiber shim of ``tests/backends/cuda_emulation`` and its real host module drives the
launches through a NumPy stand-in for CuPy (outputs poisoned with NaN bytes). Every op sample
runs under every deterministic schedule; programs sized to reach every launch path run under
every schedule with 1 and 3 SMs. The shim's own fault reports (deadlock, divergent barrier,
bad shuffle mask, endless loop, fault, unwritten shared memory) are checked on small
hand-written kernels.
"""
import numpy as np
import pytest

import symgrad as sg
from tests.backends.cuda_emulation import library as emulation
from tests.backends.cuda_emulation.cases import layout_cases, sample_cases
from tests.backends.cuda_emulation.device import SCHEDULES, EmulatedDevice, KernelFault
from tests.backends.cuda_emulation.translate import TranslationError, entry_points, translate
from tests.backends.test_numpy_regions import FEEDS, nested

pytestmark = pytest.mark.skipif(emulation.compiler() is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return emulation.session_cache_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def samples():
    return sample_cases()


@pytest.fixture(scope="module")
def layouts():
    return layout_cases()


@pytest.fixture(scope="module")
def library(samples, layouts, cache_dir):
    return emulation.Library([c.source for c in samples + layouts], cache_dir=cache_dir)


def _run_all(cases, device):
    failures = []
    for case in cases:
        try:
            case.check(device.run(case.compiled, case.feeds))
        except AssertionError as exc:
            failures.append(f"{case.name}: {str(exc)[:400]}")
    return failures


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_op_samples_match_the_interpreter(samples, library, schedule):
    failures = _run_all(samples, EmulatedDevice(library, schedule, sms=1))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("sms", [1, 3])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_launch_paths_match_the_interpreter(layouts, library, schedule, sms):
    failures = _run_all(layouts, EmulatedDevice(library, schedule, sms))
    assert not failures, "\n".join(failures)


def test_layout_cases_reach_every_launch_path(layouts, library):
    """The sizes of :func:`layout_cases` exercise what the op samples miss (checked on the
    launches the host module makes)."""
    launches = {}
    for sms in (1, 3):
        device = EmulatedDevice(library, "forward", sms)
        _run_all(layouts, device)
        launches[sms] = device.launches
    for sms, made in launches.items():
        reductions = [x for x in made if "K" in x.scalars and not x.entry.endswith("_merge")]
        rows = [x for x in reductions if x.block == (256, 1, 1)]
        cols = [x for x in reductions if x.block == (32, 8, 1)]
        maps = [x for x in made if "N" in x.scalars]
        # grid-stride loops: more elements than threads, more outputs than teams
        assert any(x.scalars["N"] > x.grid[0] * 256 for x in maps), sms
        for team in (32, 256):
            assert any(x.scalars["T"] == team and x.scalars["M"] > x.grid[0] * 256 // team
                       for x in rows), (sms, team)
        # idle lanes: rows shorter than a warp; column blocks past the last output
        assert any(x.scalars["K"] < x.scalars["T"] for x in rows), sms
        assert any(x.scalars["M"] % 32 for x in cols), sms
        # splits that do not divide K, in both styles, merged afterwards
        for style in (rows, cols):
            assert any(x.scalars["P"] > 1 and x.scalars["K"] % x.scalars["P"] for x in style)
        assert any(x.entry.endswith("_merge") for x in made)
        # row ops: rows longer than a warp, more rows than warps, classes `inner` apart
        row_ops = [x for x in made if "rows" in x.scalars]
        assert any(x.scalars["n"] > 32 for x in row_ops), sms
        assert any(x.scalars["rows"] > x.grid[0] * 256 // 32 for x in row_ops), sms
        assert any(x.scalars["inner"] > 1 for x in row_ops), sms
    assert any(x.scalars.get("P", 0) > 32 for x in launches[3])   # merge lanes loop over P


def test_a_program_with_state_updates_it_from_the_arrays_the_host_module_returns(cache_dir):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [1000], "float32")
        w = sg.parameter("w", [1000], "float32", init=np.linspace(-1, 1, 1000))
        loss = sg.sum(sg.tanh(x * w))
        sg.assign(w * 0.5 + x, w)
    fn = sg.compile(prog, [loss], backend="cuda")
    reference = sg.compile(prog, [loss], backend="interpreter")
    device = EmulatedDevice(emulation.Library([fn._executable.cuda_source], cache_dir=cache_dir))
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, 1000).astype("float32")}
    for _ in range(3):
        got, = device.run(fn, feeds)
        np.testing.assert_allclose(got, reference(**feeds)[0], rtol=1e-5)
        np.testing.assert_allclose(fn.state["w"], reference.state["w"], rtol=1e-6)


def test_labels_outside_the_classes_raise_at_the_end_of_the_call_and_leave_the_state(cache_dir):
    """The class-index checks of softmax cross-entropy and of its gradient's one-hot are queued
    on the device and read once, after the call's last kernel: the NumPy backend's error, the
    state untouched."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        labels = sg.data("labels", [None], "int64")
        w = sg.parameter("w", [4, 3], "float32", init=np.linspace(-1, 1, 12).reshape(4, 3))
        loss = sg.mean(sg.nn.softmax_cross_entropy(sg.matmul(x, w), labels))
        sg.optimizer.SGD(0.1).minimize(loss)
    fn = sg.compile(prog, [loss], backend="cuda")
    source = fn.source if isinstance(fn.source, str) else fn.sources[".py"]
    assert source.count("_raise_failed_checks(_CHECKS.pending)") == 1
    reference = sg.compile(prog, [loss], backend="interpreter")
    device = EmulatedDevice(emulation.Library([fn._executable.cuda_source], cache_dir=cache_dir))
    x_value = np.linspace(-1, 1, 20, dtype="float32").reshape(5, 4)
    good = np.array([0, 2, 1, 1, 0])
    got, = device.run(fn, {"x": x_value, "labels": good})
    np.testing.assert_allclose(got, reference(x=x_value, labels=good)[0], rtol=1e-5)
    before = np.array(fn.state["w"])
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=rf"class index {bad} is outside \[0, 3\)"):
            device.run(fn, {"x": x_value, "labels": np.where(good == 1, bad, good)})
        np.testing.assert_array_equal(fn.state["w"], before)


def test_schedules_are_deterministic_and_different(cache_dir):
    source = r"""
extern "C" __global__ void order(int* out, int* counter) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(counter, 1);
  __syncthreads();
  out[gridDim.x * blockDim.x + blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(counter, 1);
}
"""
    library = emulation.Library([source], cache_dir=cache_dir)
    orders = {}
    for schedule in SCHEDULES:
        runs = []
        for _ in range(2):
            out, counter = np.zeros(2 * 2 * 64, np.int32), np.zeros(1, np.int32)
            kernel = EmulatedDevice(library, schedule).module.RawModule(code=source)
            kernel.get_function("order")((2,), (64,), (out, counter))
            runs.append(out.tobytes())
        assert runs[0] == runs[1], schedule                     # deterministic
        orders[schedule] = runs[0]
    assert len(set(orders.values())) == len(SCHEDULES)         # and each its own order


# --- the shim's fault reports --------------------------------------------------------------
FAULTS = r"""
extern "C" __global__ void deadlock(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
  else __syncthreads();
}
extern "C" __global__ void exit_before_barrier(float* out) {
  if (threadIdx.x < 40) __syncthreads();
  out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void barriers_at_two_lines(float* out) {
  if (threadIdx.x < 40) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}
extern "C" __global__ void mask_beyond_block(float* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}
extern "C" __global__ void lane_outside_mask(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);
}
extern "C" __global__ void masks_differ(float* out) {
  unsigned mask = threadIdx.x < 8 ? 0xffffffffu : 0x7fffffffu;
  out[threadIdx.x] = __shfl_sync(mask, 1.0f, 0);
}
extern "C" __global__ void endless(float* out, int n) {
  for (int i = 0; i < n; i += 0) out[0] += 1.0f;
}
extern "C" __global__ void wild_pointer(float* out) {
  out[0] = ((float*)16)[threadIdx.x];
}
extern "C" __global__ void unwritten_shared(float* out) {
  __shared__ float tile[64];
  if (threadIdx.x < 32) tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}
extern "C" __global__ void warp_primitives(int* out) {
  int lane = threadIdx.x % 32;
  int sum = lane;
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  out[threadIdx.x * 4 + 0] = sum;
  out[threadIdx.x * 4 + 1] = __shfl_up_sync(0xffffffffu, lane, 1);
  out[threadIdx.x * 4 + 2] = __ballot_sync(0xffffffffu, lane % 2);
  out[threadIdx.x * 4 + 3] = __shfl_sync(0xffffffffu, lane, 3, 8);
}
"""


@pytest.fixture(scope="module")
def faults(cache_dir):
    library = emulation.Library([FAULTS], cache_dir=cache_dir)
    library.set_time_limit(0.5)
    yield EmulatedDevice(library).module.RawModule(code=FAULTS)
    library.set_time_limit(emulation.DEFAULT_TIME_LIMIT)


@pytest.mark.parametrize("kernel, block, message", [
    ("deadlock", 32, r"deadlock in block \(0,0,0\): 32 of 32 threads wait"),
    ("exit_before_barrier", 64, r"thread \(40,0,0\): exits while 40 threads wait at "
                                r"__syncthreads \(line 7\): divergent barrier"),
    ("barriers_at_two_lines", 64, r"__syncthreads at line 14 while other threads wait at line "
                                  r"12 \(divergent barrier\)"),
    ("mask_beyond_block", 48, r"mask 0xffffffff names lanes that do not exist \(warp 1 has "
                              r"lanes 0x0000ffff\)"),
    ("lane_outside_mask", 32, r"thread \(16,0,0\): __shfl_xor_sync at line 21: mask "
                              r"0x0000ffff leaves out the calling lane 16"),
    ("masks_differ", 32, r"with mask 0x7fffffff while lanes of the warp wait at line 25 with "
                         r"mask 0xffffffff"),
    ("endless", 1, r"still running after 0 CPU seconds \(an endless loop\?\)"),
    ("wild_pointer", 1, r"invalid memory access at address 0x10"),
])
def test_kernel_faults_are_reported_not_hung(faults, kernel, block, message):
    args = (np.zeros(64, np.float32),) + ((np.int32(5),) if kernel == "endless" else ())
    with pytest.raises(KernelFault, match=message):
        faults.get_function(kernel)((1,), (block,), args)


def test_unwritten_shared_memory_reads_as_nan(faults):
    out = np.zeros(64, np.float32)
    faults.get_function("unwritten_shared")((2,), (64,), (out,))
    assert (out[:32] == 1).all() and np.isnan(out[32:]).all()


def test_warp_primitives(faults):
    out = np.zeros((64, 4), np.int32)
    faults.get_function("warp_primitives")((1,), (64,), (out,))
    lane = np.arange(64) % 32
    assert (out[:, 0] == sum(range(32))).all()
    assert (out[:, 1] == np.where(lane == 0, 0, lane - 1)).all()
    assert (out[:, 2] == np.int32(np.uint32(0xAAAAAAAA).view(np.int32))).all()
    assert (out[:, 3] == lane // 8 * 8 + 3).all()


def test_launch_arguments_are_checked(faults):
    kernel = faults.get_function("endless")
    with pytest.raises(KernelFault, match="must be numpy.int32, got int"):
        kernel((1,), (1,), (np.zeros(1, np.float32), 5))
    with pytest.raises(KernelFault, match="wants a float32 array, got ndarray float64"):
        kernel((1,), (1,), (np.zeros(1), np.int32(5)))
    with pytest.raises(KernelFault, match="1 arguments for 2 parameters"):
        kernel((1,), (1,), (np.zeros(1, np.float32),))


def test_unwritten_outputs_are_nan():
    """Every array the host module allocates on the device starts as NaN bytes."""
    device = EmulatedDevice(None)
    assert np.isnan(device.module.empty((3, 2), "float32")).all()
    assert (device.module.empty(4, "int32") == -1).all()


def test_translation_keeps_lines_and_refuses_what_it_cannot_model():
    source = 'extern "C" __global__ void f(const float* __restrict__ a, long long n) {\n' \
             "  __shared__ double t[4][8];\n}\n"
    text = translate(source, "f.cu")
    assert '#line 1 "f.cu"' in text and "__shared__ double t[4][8]; SG_SHARED(t);" in text
    params = entry_points(source)["f"]
    assert [(p.name, p.dtype, p.pointer) for p in params] == [("a", "float32", True),
                                                              ("n", "int64", False)]
    with pytest.raises(TranslationError, match="inline PTX the emulation does not know"):
        translate('__device__ void g() { asm("trap;"); }')
    with pytest.raises(TranslationError, match="has a type the emulation does not pass"):
        entry_points('extern "C" __global__ void h(float2* a) {}')


# --- programs ------------------------------------------------------------------------------
def test_new_batch_size_reuses_the_compiled_kernels(cache_dir):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        b = sg.parameter("b", [3], "float32", init=np.arange(3, dtype="float32"))
        y = sg.sum(sg.tanh(x + b), axis=1)
    compiled = sg.compile(prog, [y], backend="cuda")
    device = EmulatedDevice(emulation.Library([compiled._executable.cuda_source],
                                              cache_dir=cache_dir))
    reference = sg.compile(prog, [y], backend="interpreter")
    with device.installed():
        module = compiled._executable.load()
        for batch in (2, 37, 301):
            x_value = np.linspace(-1, 1, batch * 3, dtype="float32").reshape(batch, 3)
            got, = compiled(x=x_value)
            assert compiled._executable.module is module    # same kernels, no recompilation
            np.testing.assert_allclose(got, reference(x=x_value)[0], rtol=1e-5)


@pytest.mark.parametrize("case", ["reshape", "concatenate", "slice"])
def test_launch_sizes_come_from_the_binding(case, cache_dir):
    """Named and anonymous dims, dim expressions and an op-defined dim: the host module
    renders every launch's sizes from the binding (no array's shape but the op-defined dim's)."""
    from tests.backends.test_dim_code import CASES, _program, _shape_reads

    build, inputs, feeds_of = CASES[case]
    prog, fetches = _program(build, *inputs)
    compiled = sg.compile(prog, fetches, backend="cuda")
    assert len(_shape_reads(compiled.source)) == (case == "slice")
    reference = sg.compile(prog, fetches, backend="interpreter")
    device = EmulatedDevice(emulation.Library([compiled._executable.cuda_source],
                                              cache_dir=cache_dir))
    rng = np.random.default_rng(0)
    for batch in (1, 2, 12):
        feeds = feeds_of(batch, rng)
        for got, want in zip(device.run(compiled, feeds), reference(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_group_with_an_op_lacking_a_cuda_emitter_runs_on_the_host(monkeypatch, cache_dir):
    from symgrad.backends.cuda_backend.lowering import LOWERINGS

    monkeypatch.delitem(LOWERINGS.rules, "sin")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.sum(sg.sin(x) * 2.0 + x, axis=1)
    compiled = sg.compile(prog, [y], backend="cuda")
    assert not compiled.kernels and "on the host" in compiled.source
    x_value = np.linspace(0, 1, 12).reshape(3, 4)
    device = EmulatedDevice(emulation.Library([compiled._executable.cuda_source],
                                              cache_dir=cache_dir))
    got, = device.run(compiled, {"x": x_value})
    np.testing.assert_allclose(got, (np.sin(x_value) * 2 + x_value).sum(axis=1))


@pytest.mark.parametrize("kind,depth", [("cond", 100), ("scan", 30)])
def test_regions_nested_deeper_than_python_nests_blocks(cache_dir, kind, depth):
    """The host module writes regions past ``MAX_NESTED_REGIONS`` as functions (checked for
    NumPy and C in test_numpy_regions.py); here they launch their kernels."""
    prog, fetches = nested(kind, depth)
    fn = sg.compile(prog, fetches, backend="cuda")
    device = EmulatedDevice(emulation.Library([fn._executable.cuda_source], cache_dir=cache_dir))
    got = device.run(fn, FEEDS)
    expected = sg.compile(prog, fetches, backend="interpreter")(**FEEDS)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)
