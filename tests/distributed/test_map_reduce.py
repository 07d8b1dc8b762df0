"""map_reduce's contract on Dask's local (threaded) scheduler: every kind of ``fn``, the
reductions and their dtypes, empty chunks, ``compute=False``, what the workers run (only what
``sg.load`` checked, or code symgrad regenerated), and a clear error for every bad call."""
import os
import subprocess

import numpy as np
import pytest

pytest.importorskip("dask")
pytest.importorskip("distributed")
import dask  # noqa: E402
import dask.array as da  # noqa: E402

import symgrad as sg  # noqa: E402
from symgrad.backends.c_backend import compiler  # noqa: E402
from symgrad.distributed import ShardingError, map_reduce  # noqa: E402
from tests.runtime.test_artifact import _rewrite_manifest, replace_file  # noqa: E402

from .programs import (LINEAR_REDUCE, linear_data, linear_model,  # noqa: E402
                       trained_linear_model)


@pytest.fixture(scope="module")
def fn():
    return linear_model()


@pytest.fixture(scope="module")
def data():
    x, y = linear_data(250, seed=2)
    return x, y, {"x": da.from_array(x, chunks=(64, 3)), "y": da.from_array(y, chunks=64)}


def _assert_same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind", ["compiled", "directory", "zip", "loaded"])
def test_every_kind_of_fn_gives_the_single_process_result(fn, data, kind, tmp_path):
    x, y, sharded = data
    target = {"compiled": lambda: fn,
              "directory": lambda: fn.save(tmp_path / "linear"),
              "zip": lambda: fn.save(str(tmp_path / "linear.zip")),
              "loaded": lambda: sg.load(fn.save(tmp_path / "linear"))}[kind]()
    _assert_same(map_reduce(target, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))


def test_a_loaded_artifact_with_state_runs_with_its_current_values(data, tmp_path):
    x, y, sharded = data
    train, _ = trained_linear_model()
    loaded = sg.load(train.save(tmp_path / "trained"))
    loaded(x=x, y=y)                       # one more step: the artifact on disk is behind
    evaluate = sg.compile(loaded.program, [loaded.fetches[0]], updates=False,
                          state=loaded.state)
    got, = map_reduce(loaded, sharded, reduce=["mean", "concat"])[:1]
    np.testing.assert_allclose(got, evaluate(x=x, y=y)[0], rtol=1e-12, atol=0)


def test_sum_adds_the_chunks_and_mean_weights_them_by_rows(fn, data):
    x, y, sharded = data          # chunks of 64, 64, 64 and 58 rows
    parts = [fn(x=x[i:i + 64], y=y[i:i + 64]) for i in range(0, 250, 64)]
    summed = map_reduce(fn, sharded, reduce=["sum", "sum", "sum", "concat", "sum"])
    np.testing.assert_allclose(summed[0], sum(p[0] for p in parts), rtol=1e-12)
    np.testing.assert_allclose(summed[1], sum(p[1] for p in parts), rtol=1e-12)
    weighted = sum(len(p[3]) * p[0] for p in parts) / 250
    np.testing.assert_allclose(map_reduce(fn, sharded, reduce=LINEAR_REDUCE)[0], weighted,
                               rtol=1e-12)


def test_dtypes_are_kept():
    fn32 = linear_model(dtype="float32")
    x, y = linear_data(300, dtype="float32")
    sharded = {"x": da.from_array(x, chunks=(100, 3)), "y": da.from_array(y, chunks=100)}
    got = map_reduce(fn32, sharded, reduce=LINEAR_REDUCE)
    want = fn32(x=x, y=y)
    assert [g.dtype for g in got] == [np.float32] * 4 + [np.int64]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    mean_count = map_reduce(fn32, sharded, reduce=["mean"] * 3 + ["concat", "mean"])[-1]
    assert mean_count.dtype == np.float64                  # as NumPy's mean of integers
    np.testing.assert_allclose(mean_count, want[-1] / 3)  # three chunks of 100 rows


def test_compute_false_returns_dask_arrays(fn, data):
    x, y, sharded = data
    lazy = map_reduce(fn, sharded, reduce=LINEAR_REDUCE, compute=False)
    assert all(isinstance(a, da.Array) for a in lazy)
    assert lazy[3].chunks[0] == (64, 64, 64, 58)
    _assert_same(dask.compute(*lazy), fn(x=x, y=y))


def test_the_graph_reduces_with_a_tree():
    fn = linear_model()
    x, y = linear_data(40)
    sharded = {"x": da.from_array(x, chunks=(2, 3)), "y": da.from_array(y, chunks=2)}
    loss = map_reduce(fn, sharded, reduce=LINEAR_REDUCE, compute=False)[0]
    adds = [key for key in loss.__dask_graph__() if str(key).startswith("symgrad-add-parts")]
    assert len(adds) == 4           # 20 chunks, fan-in 8: 3 sums of 8, 8 and 4, then 1 of 3
    want = fn(x=x, y=y)[0]
    np.testing.assert_allclose(loss.compute(), want, rtol=1e-12)


# --- errors ----------------------------------------------------------------------------------
def test_unknown_input_name(fn, data):
    sharded = dict(data[2], z=data[2]["y"])
    with pytest.raises(sg.FeedError, match=r"unknown input 'z' in sharded.*x, y, w, b"):
        map_reduce(fn, sharded)
    with pytest.raises(sg.FeedError, match="unknown input 'q' in replicated"):
        map_reduce(fn, data[2], replicated={"q": np.ones(3)})


def test_chunked_along_another_axis(fn, data):
    x = da.from_array(data[0], chunks=(64, 2))
    with pytest.raises(ShardingError, match=r"'x' is chunked along axis 1.*rechunk\(\{1: -1\}\)"):
        map_reduce(fn, {"x": x, "y": data[2]["y"]})


def test_misaligned_chunks(fn, data):
    y = da.from_array(data[1], chunks=100)
    with pytest.raises(ShardingError, match="'x' and 'y' are not chunked alike along axis 0"):
        map_reduce(fn, {"x": data[2]["x"], "y": y})


def test_concat_of_a_fetch_whose_leading_dim_is_not_the_batch(fn, data):
    with pytest.raises(ShardingError, match=r"fetch 0 has shape \[\].*not the batch"):
        map_reduce(fn, data[2], reduce="concat")
    with pytest.raises(ShardingError, match=r"fetch 1 has shape \[3\].*not the batch"):
        map_reduce(fn, data[2], reduce=["mean", "concat", "mean", "concat", "sum"])


def test_concat_of_a_fetch_that_shows_a_foreign_leading_dim_only_when_run():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2], "float64")
        z = sg.data("z", [None], "float64")
        fetches = [sg.sum(x, axis=1), z * 2.0]
    fn = sg.compile(prog, fetches, threads=1)
    sharded = {"x": da.ones((10, 2), chunks=(5, 2))}
    got = map_reduce(fn, sharded, replicated={"z": np.arange(5.0)}, reduce="concat")
    np.testing.assert_array_equal(got[1], np.tile(np.arange(5.0) * 2, 2))   # rows by luck
    with pytest.raises(ValueError, match=r"fetch 1 has shape \[3\] on a chunk of 5 rows"):
        map_reduce(fn, sharded, replicated={"z": np.arange(3.0)}, reduce="concat")


def test_per_row_fetch_needs_concat(fn, data):
    with pytest.raises(ShardingError, match=r"fetch 3 has shape \[\?\].*need 'concat'"):
        map_reduce(fn, data[2])


@pytest.mark.parametrize("call, error, pattern", [
    (lambda fn, s: map_reduce(fn, {}), ValueError, "at least one input"),
    (lambda fn, s: map_reduce(fn, {"x": s["x"]}), sg.FeedError, "missing feed for input.*'y'"),
    (lambda fn, s: map_reduce(fn, dict(s, x=np.ones((4, 3)))), TypeError, "must be a dask array"),
    (lambda fn, s: map_reduce(fn, s, replicated={"y": np.ones(3)}), ValueError,
     "both sharded and replicated"),
    (lambda fn, s: map_reduce(fn, s, replicated={"w": s["x"][0]}), TypeError,
     "replicated inputs are NumPy arrays"),
    (lambda fn, s: map_reduce(fn, s, replicated={"w": np.ones(4)}), sg.FeedError, "'w'"),
    (lambda fn, s: map_reduce(fn, dict(s, x=s["x"][:, :2])), sg.FeedError, "'x'"),
    (lambda fn, s: map_reduce(fn, dict(s, y=s["y"] > 0)), sg.FeedTypeError, "'y'"),
    (lambda fn, s: map_reduce(fn, s, reduce=["mean"]), ValueError, "1 reductions for 5 fetches"),
    (lambda fn, s: map_reduce(fn, s, reduce="max"), ValueError, "unknown reduction 'max'"),
    (lambda fn, s: map_reduce(fn, s, reduce=None), TypeError, "reduce must be"),
    (lambda fn, s: map_reduce(fn, dict(s, x=s["x"][s["x"][:, 0] > 0], y=s["y"][s["x"][:, 0] > 0]),
                              reduce=LINEAR_REDUCE), ShardingError, "unknown chunk sizes"),
    (lambda fn, s: map_reduce(42, s), TypeError, "fn must be a compiled program"),
    (lambda fn, s: map_reduce("/nonexistent/artifact", s), sg.ArtifactError, "no artifact"),
])
def test_bad_calls_raise_clear_errors(fn, data, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(fn, data[2])


def test_fixed_leading_dim_must_match_every_chunk():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 2], "float64")
        loss = sg.mean(x * x)
    fn = sg.compile(prog, [loss], threads=1)
    np.testing.assert_allclose(map_reduce(fn, {"x": da.ones((8, 2), chunks=(4, 2))})[0], 1.0)
    with pytest.raises(ShardingError, match="fixed leading dim 4"):
        map_reduce(fn, {"x": da.ones((8, 2), chunks=(3, 2))})


def test_mean_over_zero_rows(fn):
    empty = {"x": da.zeros((0, 3), chunks=(1, 3)), "y": da.zeros((0,), chunks=1)}
    with pytest.raises(ShardingError, match="zero rows"):
        map_reduce(fn, empty, reduce=LINEAR_REDUCE)


def test_an_empty_chunk_contributes_nothing(fn, data):
    """Issue #24 item 2: a chunk of no rows made reduce='mean' NaN (the program's mean over
    no rows, times no rows). It is not run: zeros to the sums, no rows to the concats."""
    x, y, _ = data
    rows = ((100, 0, 150, 0),)
    sharded = {"x": da.from_array(x, chunks=rows + ((3,),)), "y": da.from_array(y, chunks=rows)}
    _assert_same(map_reduce(fn, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))
    nothing = {"x": da.zeros((0, 3), chunks=(1, 3)), "y": da.zeros((0,), chunks=1)}
    summed = map_reduce(fn, nothing, reduce=["sum", "sum", "sum", "concat", "sum"])
    assert [a.shape for a in summed] == [(), (3,), (), (0,), ()]
    assert all(not a.any() for a in summed)


def test_an_empty_chunk_is_allowed_with_a_fixed_leading_dim():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 2], "float64")
        fetches = [sg.mean(x * x), x * 2.0]
    fn = sg.compile(prog, fetches, threads=1)
    x = np.arange(16.0).reshape(8, 2)
    got = map_reduce(fn, {"x": da.from_array(x, chunks=((4, 0, 4), (2,)))},
                     reduce=["mean", "concat"])
    np.testing.assert_allclose(got[0], np.mean(x * x))
    np.testing.assert_array_equal(got[1], x * 2)


# --- what the workers run -----------------------------------------------------------------------
MARKER_CODE = b"open(__import__('os').environ['SYMGRAD_TEST_MARKER'], 'w').close()\n"


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "foreign-code-ran"
    monkeypatch.setenv("SYMGRAD_TEST_MARKER", str(path))
    return path


def _runner_with_marker(path):
    """numpy/standalone.py with code that proves it ran; its hash and size rewritten."""
    with open(os.path.join(path, "numpy", "standalone.py"), "rb") as handle:
        replace_file(path, "numpy/standalone.py", MARKER_CODE + handle.read())


def test_a_loaded_artifact_ships_what_sg_load_checked(fn, data, tmp_path, marker):
    """Issue #24 item 4: map_reduce(sg.load(path)) read the artifact's files again from the
    path, so files changed after sg.load checked them ran on the workers."""
    x, y, sharded = data
    path = fn.save(tmp_path / "linear")
    loaded = sg.load(path)
    _runner_with_marker(path)
    _assert_same(map_reduce(loaded, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))
    assert not marker.exists()


def test_an_artifact_path_is_checked_as_sg_load_checks_it(fn, data, tmp_path, marker):
    """A manifest saying another symgrad build wrote the artifact made sg.load skip the
    comparison of the generated files (issue #24 item 5): an edited runner then ran."""
    x, y, sharded = data
    path = fn.save(tmp_path / "linear")
    _runner_with_marker(path)
    _rewrite_manifest(path, lambda manifest: manifest.update(generator="0" * 64))
    with pytest.raises(sg.ArtifactError, match="numpy/standalone.py is not what symgrad "
                                               "generates"):
        map_reduce(path, sharded, reduce=LINEAR_REDUCE)
    loaded = sg.load(path, check_generated=False)   # trusted by the caller: its program runs
    _assert_same(map_reduce(loaded, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))
    assert not marker.exists()


def test_a_signed_artifact_path_needs_its_key(fn, data, tmp_path):
    x, y, sharded = data
    path = fn.save(tmp_path / "signed", key=b"secret")
    _assert_same(map_reduce(path, sharded, reduce=LINEAR_REDUCE, key=b"secret"), fn(x=x, y=y))
    with pytest.raises(sg.ArtifactError, match="does not match the key"):
        map_reduce(path, sharded, reduce=LINEAR_REDUCE, key=b"guess")
    with pytest.raises(TypeError, match="key= is the key an artifact path must be signed with"):
        map_reduce(fn, sharded, reduce=LINEAR_REDUCE, key=b"secret")


LIBRARY_WITH_MARKER = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    fclose(fopen(getenv("SYMGRAD_TEST_MARKER"), "w"));
}
"""


def test_a_swapped_c_library_never_runs(data, tmp_path, marker):
    """The standalone runner of a C artifact loads c/program.so, a binary sg.load cannot
    regenerate: map_reduce(sg.load(path)) ships the library symgrad built from the program."""
    x, y, sharded = data
    fn = linear_model(backend="c")
    path = fn.save(tmp_path / "linear_c")
    with open(os.path.join(path, "c", "program.so"), "ab") as handle:
        handle.write(b"\0")   # sg.load hash-checks the library too
    with pytest.raises(sg.ArtifactError, match="'c/program.so' was modified"):
        sg.load(path)
    (tmp_path / "evil.c").write_text(LIBRARY_WITH_MARKER)
    subprocess.run([compiler.find_compiler(), "-shared", "-fPIC", "-o", str(tmp_path / "evil.so"),
                    str(tmp_path / "evil.c")], check=True)
    replace_file(path, "c/program.so", (tmp_path / "evil.so").read_bytes())
    loaded = sg.load(path)
    assert loaded.backend == "c"
    _assert_same(map_reduce(loaded, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))
    _assert_same(map_reduce(path, sharded, reduce=LINEAR_REDUCE), fn(x=x, y=y))
    assert not marker.exists()


def _dropout_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 8], "float64")
        y = sg.nn.dropout(x, 0.5)
    return prog, [y]


def test_each_chunk_draws_its_own_random_numbers_as_successive_calls_would():
    """Chunk k of K runs at step ``step * K + k``: equal-sized chunks draw different masks,
    and each is the mask a call of that chunk alone at that step draws."""
    prog, fetches = _dropout_program()
    fn, local = sg.compile(prog, fetches), sg.compile(prog, fetches)
    x = np.ones((40, 8))
    sharded = {"x": da.from_array(x, chunks=(10, 8))}
    for step, replicated in [(0, None), (5, {"rng_step": np.int64(5)})]:
        got, = map_reduce(fn, sharded, replicated, reduce="concat")
        parts = [got[10 * k:10 * k + 10] for k in range(4)]
        assert all(not np.array_equal(parts[0], part) for part in parts[1:])
        for k, part in enumerate(parts):
            want, = local(x=x[:10], rng_step=np.int64(step * 4 + k))
            np.testing.assert_array_equal(part, want)
    assert int(fn.state["rng_step"]) == 0          # map_reduce leaves the state alone
    one_chunk, = map_reduce(fn, {"x": da.from_array(x, chunks=(40, 8))}, reduce="concat")
    np.testing.assert_array_equal(one_chunk, local(x=x, rng_step=np.int64(0))[0])


def test_an_artifact_path_runs_its_random_ops_from_its_saved_step(tmp_path):
    prog, fetches = _dropout_program()
    fn = sg.compile(prog, fetches)
    x = np.ones((20, 8))
    fn(x=x)
    fn(x=x)                                       # the state's step is 2 now
    path = fn.save(tmp_path / "dropout")
    got, = map_reduce(str(path), {"x": da.from_array(x, chunks=(10, 8))}, reduce="concat")
    local = sg.compile(prog, fetches)
    for k in range(2):
        np.testing.assert_array_equal(got[10 * k:10 * k + 10],
                                      local(x=x[:10], rng_step=np.int64(2 * 2 + k))[0])
