"""Group functions and threaded chunk loops of the NumPy backend: the threaded path agrees with
the interpreter (every reduce kind, float32 sums, exported values), empty batches,
``threads=1`` makes no pool, a forked child runs programs on a pool of its own, and a pool
keeps glibc's malloc from trimming the memory that arrays reuse at every call."""
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.common import Namer
from symgrad.backends.options import MIN_PARALLEL_CHUNKS, NUMPY_GROUP_MIN_PARALLEL_CHUNKS
from symgrad.backends.host import row_pool

from .forking import run_forked

REDUCTIONS = {
    "sum0": lambda y: sg.sum(y, axis=0),
    "sum1": lambda y: sg.sum(y, axis=1, keepdims=True),
    "sum_all": lambda y: sg.sum(y),
    "mean0": lambda y: sg.mean(y, axis=0),
    "mean_all": lambda y: sg.mean(y),
    "prod0": lambda y: sg.prod(y * 0.1 + 1.0, axis=0),
    "max0": lambda y: sg.max(y, axis=0),
    "max1": lambda y: sg.max(y, axis=1),
    "min0": lambda y: sg.min(y, axis=0, keepdims=True),
    "min_all": lambda y: sg.min(y),
}


def _program(reduce, dtype="float64"):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6], dtype)
        b = sg.data("b", [6], dtype)
        y = sg.tanh(x * 1.5 + b) + sg.sin(x)
        y.name = "y"
        fetches = [reduce(y), y]
    return prog, fetches


def _check(prog, fetches, feeds, rtol, **options):
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    compiled = sg.compile(prog, fetches, backend="numpy", **options)
    for e, g in zip(expected, compiled(**feeds)):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol)
    return compiled


@pytest.fixture
def executor_uses(monkeypatch):
    """How many times a loop handed rows to the shared worker threads."""
    uses = []
    shared = row_pool.shared_executor
    monkeypatch.setattr(row_pool, "shared_executor", lambda: uses.append(1) or shared())
    return uses


@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_threaded_reductions_match_the_interpreter(kind, executor_uses):
    prog, fetches = _program(REDUCTIONS[kind])
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((37, 6)), "b": rng.standard_normal(6)}
    compiled = _check(prog, fetches, feeds, 1e-9, threads=2, chunk_size=12)
    if kind.startswith("prod"):   # a product is not reassociated by chunks: one NumPy pass
        assert "over_rows(" not in compiled.source
        return
    assert "_POOL.over_rows(" in compiled.source
    assert executor_uses                     # 19 chunks of 2 rows: the worker threads ran them


@pytest.mark.parametrize("accumulate", [True, False])
def test_threaded_float32_sums(accumulate):
    prog, fetches = _program(lambda y: sg.sum(y), dtype="float32")
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((301, 6)).astype("float32"),
             "b": rng.standard_normal(6).astype("float32")}
    compiled = _check(prog, fetches, feeds, 1e-4, threads=2, chunk_size=30,
                      accumulate_float64=accumulate)
    assert ("dtype=np.float64" in compiled.source) == accumulate


def test_gradient_through_threaded_groups():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 5], "float64")
        loss = sg.sum(sg.exp(-x * x) * sg.cos(x)) + sg.mean(sg.max(x * 2.0, axis=1))
        gx, = ir_backward.grad(loss, [x])
    feeds = {"x": np.random.default_rng(5).standard_normal((40, 5))}
    _check(prog, [loss, gx], feeds, 1e-9, threads=3, chunk_size=10)


@pytest.mark.parametrize("threads", [1, 2])
def test_empty_batch_through_chunked_groups(threads):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.exp(x) * 2.0 + 1.0
        fetches = [y, sg.sum(y, axis=0), sg.sum(y * y, axis=1), sg.mean(y, axis=1)]
    compiled = sg.compile(prog, fetches, backend="numpy", threads=threads, chunk_size=8)
    assert "_rows(_start, _stop, _rows" in compiled.source
    got = compiled(x=np.zeros((0, 4)))
    assert [g.shape for g in got] == [(0, 4), (4,), (0,), (0,)]
    np.testing.assert_array_equal(got[1], np.zeros(4))


def test_one_thread_makes_no_pool():
    prog, fetches = _program(REDUCTIONS["sum0"])
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((50, 6)), "b": rng.standard_normal(6)}
    compiled = _check(prog, fetches, feeds, 1e-9, threads=1, chunk_size=12)
    source = compiled.source
    assert "RowPool" not in source and "over_rows" not in source
    assert not hasattr(compiled._executable.module, "_POOL")


def test_small_arrays_stay_on_the_calling_thread(executor_uses):
    prog, fetches = _program(REDUCTIONS["sum0"])
    compiled = sg.compile(prog, fetches, backend="numpy", threads=2, chunk_size=12)
    rng = np.random.default_rng(7)
    compiled(x=rng.standard_normal((5, 6)), b=rng.standard_normal(6))   # 3 chunks of 2 rows
    assert not executor_uses


def test_loops_of_cheap_ops_need_more_chunks_to_take_the_pool(executor_uses):
    """A fused group of cheap ops only hands NumPy's GIL between its threads at every ufunc
    call for little work, so it takes the pool only from NUMPY_GROUP_MIN_PARALLEL_CHUNKS
    chunks on; one with a costly op (a transcendental function), from the pool's own
    MIN_PARALLEL_CHUNKS on."""
    least = NUMPY_GROUP_MIN_PARALLEL_CHUNKS
    assert least > MIN_PARALLEL_CHUNKS
    rng = np.random.default_rng(7)
    for build, needed in ((lambda x: sg.sum(x * 2.0 + 1.0, axis=0), least),
                          (lambda x: sg.sum(sg.exp(x), axis=0), MIN_PARALLEL_CHUNKS)):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 6], "float64")
            fetches = [build(x)]
        compiled = sg.compile(prog, fetches, backend="numpy", threads=2, chunk_size=12)
        assert (f"min_chunks={least})" in compiled.source) == (needed == least)
        executor_uses.clear()
        compiled(x=rng.standard_normal((2 * (needed - 1), 6)))   # needed - 1 chunks of 2 rows
        assert not executor_uses
        compiled(x=rng.standard_normal((2 * needed, 6)))
        assert executor_uses


def test_every_loaded_module_shares_one_pool(executor_uses):
    prog, fetches = _program(REDUCTIONS["sum0"])
    first = sg.compile(prog, fetches, backend="numpy", threads=2, chunk_size=12)
    second = sg.compile(prog, fetches, backend="numpy", threads=3, chunk_size=6)
    for compiled in (first, second):
        module = compiled._executable.module
        assert module.RowPool is row_pool.RowPool    # the one helper module of the process
        compiled(x=np.ones((40, 6)), b=np.ones(6))
    assert len(executor_uses) == 2          # both loops ran on the one shared executor
    assert (first._executable.module._POOL.threads,
            second._executable.module._POOL.threads) == (2, 3)


def test_a_forked_child_runs_a_program_that_ran_in_its_parent():
    """The pool's threads are not in a forked child: it makes its own pool (also when another
    thread of the parent was in a loop at the fork) instead of waiting for them forever."""
    run_forked("numpy", idle_forks=2, busy_forks=10)


def test_each_group_is_a_function_called_from_run():
    prog, fetches = _program(REDUCTIONS["sum1"])
    compiled = sg.compile(prog, fetches, backend="numpy", chunk_size=12)
    source = compiled.source
    assert "\ndef _group0(x, b, _n):\n" in source   # _n: the run-time row count
    assert "\ndef _group0_rows(_start, _stop, _rows, x, b, y" in source
    run = source[source.index("\ndef run("):]
    assert "= _group0(x, b, _d0)" in run and "np.tanh" not in run


def test_threads_option_is_validated():
    with pytest.raises(ValueError, match="threads"):
        sg.CompileOptions(threads=0)
    assert sg.CompileOptions(threads=4).threads == 4


def test_namer_suffixes_stay_unique():
    namer = Namer(reserved={"x_2"})
    names = [namer.fresh("x") for _ in range(5)] + [namer.fresh("x_1"), namer.fresh("np")]
    assert names == ["x", "x_1", "x_3", "x_4", "x_5", "x_1_1", "np_1"]
    assert len(set(names)) == len(names)


CONVOLUTIONS = {   # (x shape, w shape, conv2d keywords)
    "strided": ((9, 3, 8, 7), (4, 3, 3, 3), dict(stride=(1, 2), padding=1)),
    "dilated groups": ((7, 4, 9, 8), (6, 2, 2, 3), dict(stride=2, padding=(2, 1), dilation=(2, 1),
                                                       groups=2)),
}


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", sorted(CONVOLUTIONS))
def test_convolutions_and_pooling_run_their_samples_on_the_pool(threads, case, executor_uses):
    """The conv and max-pool helpers get the module's pool (none at threads=1) and agree bit
    for bit with the interpreter, which runs them on one thread (each range of samples does
    its own padding, im2col, GEMMs and col2im)."""
    x_shape, w_shape, keywords = CONVOLUTIONS[case]
    prog = sg.Program()
    rng = np.random.default_rng(8)
    with sg.program_guard(prog):
        x = sg.data("x", [None, *x_shape[1:]], "float64")
        w = sg.parameter("w", w_shape, "float64", init=rng.standard_normal(w_shape))
        h = sg.nn.max_pool2d(sg.nn.conv2d(x, w, **keywords), 2, 2, 1)
        loss = sg.sum(h * h)
        fetches = [loss, h] + list(ir_backward.grad(loss, [x, w]))
    expected = sg.compile(prog, fetches, backend="interpreter")
    compiled = sg.compile(prog, fetches, backend="numpy", threads=threads)
    for batch in (x_shape[0], 1, 0):   # a dynamic batch: several ranges, one, none
        feed = {"x": rng.standard_normal((batch, *x_shape[1:]))}
        for e, g in zip(expected(**feed), compiled(**feed)):
            np.testing.assert_array_equal(g, e)
    assert ("over_rows=_POOL.over_rows" in compiled.source) == (threads > 1)
    assert bool(executor_uses) == (threads > 1)


@pytest.mark.skipif(row_pool.loaded_openblas() is None, reason="NumPy's BLAS is no OpenBLAS")
def test_the_blas_is_single_threaded_while_a_loop_runs_on_threads(monkeypatch):
    """Ranges running on threads each call a single-threaded BLAS; the count is restored
    after the loop (and after nested blocks, only by the outermost)."""
    get, set_ = row_pool.loaded_openblas()
    before = get()
    set_(2)
    try:
        seen = []
        row_pool.RowPool(threads=2).over_rows(lambda *_: seen.append(get()), 8, 1)
        assert seen == [1, 1] and get() == 2
        with row_pool.BLAS_THREADS.single():
            with row_pool.BLAS_THREADS.single():
                assert get() == 1
            assert get() == 1
        assert get() == 2
        row_pool.RowPool(threads=2).over_rows(lambda *_: seen.append(get()), 2, 1)
        assert seen[2:] == [2]   # one range, on the calling thread: the BLAS keeps its threads
    finally:
        set_(before)


@pytest.mark.parametrize("threads", [1, 2])
def test_small_matmuls_run_on_one_blas_thread_beside_a_pool(threads, monkeypatch):
    """With a pool of several threads a matmul is ``_sg_matmul(..., pool=_POOL)``: a product
    under 2**22 multiply-adds runs with the BLAS single-threaded, a larger one as it is;
    ``threads=1`` writes ``np.matmul``. Either agrees with the interpreter."""
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [None, 64], "float32")
        b = sg.data("b", [64, None], "float32")
        fetches = [a @ b]
    compiled = sg.compile(prog, fetches, backend="numpy", threads=threads)
    assert ("_sg_matmul(a, b, pool=_POOL)" in compiled.source) == (threads > 1)
    assert ("np.matmul(a, b)" in compiled.source) == (threads == 1)
    single = []
    if threads > 1:
        pool = compiled._executable.module._POOL
        monkeypatch.setattr(pool, "single_blas",
                            lambda: single.append(1) or row_pool.BLAS_THREADS.single())
    rng = np.random.default_rng(9)
    for rows, cols in ((32, 10), (1024, 128)):   # 20,480 and 8,388,608 multiply-adds
        feed = {"a": rng.standard_normal((rows, 64)).astype("float32"),
                "b": rng.standard_normal((64, cols)).astype("float32")}
        expected, = sg.compile(prog, fetches, backend="interpreter")(**feed)
        np.testing.assert_array_equal(compiled(**feed)[0], expected)
    assert single == ([1] if threads > 1 else [])


def test_heap_settings_leave_a_user_tuned_malloc_alone():
    assert row_pool.heap_settings({}) == row_pool.HEAP_SETTINGS
    assert row_pool.heap_settings({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}) == row_pool.HEAP_SETTINGS
    for environ in ({"MALLOC_TRIM_THRESHOLD_": "0"}, {"MALLOC_TOP_PAD_": "0"},
                    {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}):
        assert row_pool.heap_settings(environ) == () and row_pool.heap_environment(environ) == {}
    assert row_pool.heap_environment({}) == {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
                                             "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


CHURN = """
import concurrent.futures, resource, sys
import os
import platform
import subprocess
import sys

import numpy as np
from symgrad.backends.host import row_pool
if sys.argv[1] == "pool":
    row_pool.RowPool()
worker = concurrent.futures.ThreadPoolExecutor(1)
def churn():   # six 2 MB arrays at once, then freed, ten times: the top of the heap is trimmed
    for _ in range(10):
        arrays = [np.ones(1 << 19, np.float32) for _ in range(6)]
        del arrays
def both():
    churn()
    worker.submit(churn).result()
both()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
both()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
def test_a_row_pool_makes_freed_arrays_reuse_their_pages():
    """After ``RowPool()``, arrays of a few MB allocated and freed again and again, on the
    calling thread and on a worker, reuse the pages the process has: (almost) no page
    faults, where glibc's default settings trim the heap and fault them in again at every
    round."""
    env = {k: v for k, v in os.environ.items()
           if k not in row_pool.MALLOC_VARIABLES and k != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)

    def faults(mode):
        done = subprocess.run([sys.executable, "-c", CHURN, mode], env=env, check=True,
                              capture_output=True, text=True)
        return int(done.stdout.split()[-1])
    assert faults("pool") < 100        # none here
    assert faults("default") > 1000    # 55,680 here
