"""map_reduce on a real dask.distributed.LocalCluster: 2 worker processes, 1 thread each,
started with symgrad hidden from their import path (they run the artifact's standalone module).
One cluster serves the whole module; the worker-killing test runs last."""
import os
import pickle
import signal
import sys
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402

from symgrad.distributed import map_reduce  # noqa: E402
from symgrad.distributed import shipping, worker  # noqa: E402

from .programs import (LINEAR_REDUCE, linear_data, linear_model, mlp_data,  # noqa: E402
                       trained_linear_model, w1_mlp)

# The probes below run on workers, which cannot import this test package: ship them by value.
cloudpickle = pytest.importorskip("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Run in each worker process before it starts: take every import path that could provide
# symgrad (a sys.path entry holding the package, or a finder such as an editable install's)
# out of the process, as on a machine where symgrad is not installed.
HIDE_SYMGRAD = """
import importlib, importlib.machinery, os, sys

def _provides_symgrad(finder):
    try:
        return finder.find_spec("symgrad", None) is not None
    except Exception:
        return False

sys.meta_path[:] = [finder for finder in sys.meta_path
                    if finder is importlib.machinery.PathFinder or not _provides_symgrad(finder)]
sys.path[:] = [entry for entry in sys.path
               if not os.path.exists(os.path.join(entry or ".", "symgrad", "__init__.py"))]
sys.path_importer_cache.clear()
importlib.invalidate_caches()
"""


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, preload=[HIDE_SYMGRAD])
    with cluster, distributed.Client(cluster) as client:
        yield client


def _workers_without_symgrad():
    """On a worker: whether symgrad is absent (not imported, not importable) and which
    artifact modules the process has loaded."""
    import importlib.util
    import sys

    try:
        importable = importlib.util.find_spec("symgrad") is not None
    except ImportError:
        importable = False
    loaded = sorted(name for name in sys.modules if name.startswith("_symgrad_artifact_"))
    return {"imported": "symgrad" in sys.modules, "importable": importable, "artifacts": loaded}


def test_linear_model_float64_equals_single_process(client):
    fn = linear_model()
    x, y = linear_data(1000)
    want = fn(x=x, y=y)
    got = map_reduce(fn, {"x": da.from_array(x, chunks=(300, 3)),
                          "y": da.from_array(y, chunks=300)},
                     reduce=LINEAR_REDUCE)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


def test_replicated_parameters_equal_fed_parameters(client):
    fn = linear_model()
    x, y = linear_data(500, seed=1)
    params = {"w": np.array([2.0, -0.5, 1.5]), "b": np.asarray(-1.0)}
    want = fn(x=x, y=y, **params)
    got = map_reduce(fn, {"x": da.from_array(x, chunks=(128, 3)),
                          "y": da.from_array(y, chunks=128)},
                     replicated=params, reduce=LINEAR_REDUCE)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


def test_a_program_with_state_runs_with_its_current_values(client):
    train, evaluate = trained_linear_model()
    x, y = linear_data(600, seed=3)
    sharded = {"x": da.from_array(x, chunks=(200, 3)), "y": da.from_array(y, chunks=200)}
    before = {name: np.array(value) for name, value in train.state.items()}
    for _ in range(2):   # the second call ships the cached artifact, with the values trained since
        want = evaluate(x=x, y=y)
        got = map_reduce(train, sharded, reduce=["mean", "concat"])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
        for name, value in before.items():   # map_reduce never changes the state
            np.testing.assert_array_equal(train.state[name], value)
        train(x=x[:100], y=y[:100])
        before = {name: np.array(value) for name, value in train.state.items()}


def test_w1_mlp_float32_equals_single_process(client):
    fn = w1_mlp()
    x, labels = mlp_data(1500)
    want = fn(x=x, labels=labels)
    got = map_reduce(fn, {"x": da.from_array(x, chunks=(400, 784)),
                          "labels": da.from_array(labels, chunks=400)})
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_workers_run_the_artifact_without_symgrad(client):
    fn = linear_model()
    x, y = linear_data(200)
    map_reduce(fn, {"x": da.from_array(x, chunks=(100, 3)), "y": da.from_array(y, chunks=100)},
               reduce=LINEAR_REDUCE)
    digest = shipping.artifact_payload(fn).digest
    for state in client.run(_workers_without_symgrad).values():
        assert not state["imported"] and not state["importable"]
    loaded = [state["artifacts"] for state in client.run(_workers_without_symgrad).values()]
    assert any(worker.MODULE_PREFIX + digest in names for names in loaded)


def _plugins(dask_scheduler):
    return sorted(dask_scheduler.worker_plugins)


def test_artifact_is_installed_once_per_worker_and_tasks_carry_its_digest(client):
    fn = w1_mlp()
    shipped = shipping.artifact_payload(fn)
    x, labels = mlp_data(400)
    sharded = {"x": da.from_array(x, chunks=(100, 784)),
               "labels": da.from_array(labels, chunks=100)}
    results = map_reduce(fn, sharded, compute=False) + map_reduce(fn, sharded, compute=False)
    plugin = f"symgrad-artifact-{shipped.digest}"
    assert client.run_on_scheduler(_plugins).count(plugin) == 1
    graph = {}
    for array in results:
        graph.update(array.__dask_graph__())
    runs = [task for key, task in graph.items() if str(key).startswith("symgrad-run-chunk")]
    assert len(runs) == 4                     # both calls build the same four tasks
    for task in runs:                         # the artifact is not among their inputs
        assert len(pickle.dumps(task)) < min(16384, shipped.nbytes / 100)
        assert all(not str(key).startswith("symgrad-artifact") for key in task.dependencies)
    dask.compute(*results)
    for state in client.run(_workers_without_symgrad).values():
        assert worker.MODULE_PREFIX + shipped.digest in state["artifacts"]


def test_the_oldest_installed_artifact_is_unregistered(client, monkeypatch):
    monkeypatch.setattr(shipping, "_INSTALLED_LIMIT", 1)
    first, second = linear_model(features=4), linear_model(features=5)
    for fn, features in ((first, 4), (second, 5)):
        x, y = linear_data(100, features=features)
        map_reduce(fn, {"x": da.from_array(x, chunks=(50, features)),
                        "y": da.from_array(y, chunks=50)}, reduce=LINEAR_REDUCE)
    gone, kept = (shipping.artifact_payload(fn).digest for fn in (first, second))
    plugins = client.run_on_scheduler(_plugins)
    assert f"symgrad-artifact-{kept}" in plugins and f"symgrad-artifact-{gone}" not in plugins
    for state in client.run(_workers_without_symgrad).values():
        assert worker.MODULE_PREFIX + gone not in state["artifacts"]
        assert worker.MODULE_PREFIX + kept in state["artifacts"]


def _run_tasks_in_memory(dask_scheduler):
    """On the scheduler: worker address -> how many chunk results it holds."""
    held = {}
    for key, state in dask_scheduler.tasks.items():
        if str(key).startswith("symgrad-run-chunk") and state.state == "memory":
            for holder in state.who_has:
                held[holder.address] = held.get(holder.address, 0) + 1
    return held


def test_killed_worker_gives_the_same_result(client):
    fn = linear_model()
    x, y = linear_data(2400, seed=3)
    want = fn(x=x, y=y)

    def slowly(block):        # each chunk takes a while, so the kill lands mid-run
        time.sleep(0.05)
        return block

    sharded = {"x": da.from_array(x, chunks=(150, 3)).map_blocks(slowly),
               "y": da.from_array(y, chunks=150).map_blocks(slowly)}
    futures = client.compute(map_reduce(fn, sharded, reduce=LINEAR_REDUCE, compute=False))
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 30
    held = {}
    while not held and time.monotonic() < deadline:
        held = client.run_on_scheduler(_run_tasks_in_memory)
        time.sleep(0.01)
    assert held, "no chunk finished"
    assert not all(future.done() for future in futures)
    victim = max(held, key=held.get)
    os.kill(pids[victim], signal.SIGKILL)             # its finished chunks are lost with it
    got = client.gather(futures)
    assert victim not in client.scheduler_info()["workers"]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
    client.wait_for_workers(2, timeout=30)               # the nanny restarts it
    digest = shipping.artifact_payload(fn).digest
    for state in client.run(_workers_without_symgrad).values():   # the restarted one too
        assert not state["imported"]
        assert worker.MODULE_PREFIX + digest in state["artifacts"]
