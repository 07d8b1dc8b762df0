"""What the Dask workers run: NumPy, Dask and the standard library, never symgrad.

:mod:`symgrad.distributed` ships this module's functions and plugin to the workers *by value*
(cloudpickle), so a worker needs NumPy and Dask but not symgrad: nothing here may import
symgrad, and the test suite runs this code on workers that cannot.

An artifact travels as a payload ``{"digest", "entry", "files"}``: its files by relative path
and the manifest's ``standalone`` entry point. :func:`install` writes the files to a private
directory and executes the artifact's standalone module from there (that module verifies the
artifact and runs it); the module is kept in ``sys.modules`` under a name made from the
digest, since a function shipped by value gets fresh globals with every task. On a
``dask.distributed`` cluster :class:`ArtifactPlugin` installs it once on every worker, those
that join or restart later included, and tasks carry only ``{"digest", "entry"}``; on a local
scheduler the first task that needs the artifact installs it from the full payload.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import types

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

MODULE_PREFIX = "_symgrad_artifact_"


def _path_parts(rel: str) -> list[str]:
    """``rel`` split into parts, refused unless it stays inside the artifact directory."""
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"artifact payload: {rel!r} is not a plain relative path")
    return parts


def _load_standalone(payload, name, directory):
    """The artifact's standalone module, executed from a fresh copy of the files in a new
    private folder under ``directory`` (compiled from source, so no ``__pycache__`` is left
    inside the artifact)."""
    root = tempfile.mkdtemp(prefix="symgrad-artifact-", dir=directory)
    try:
        for rel, data in payload["files"].items():
            path = os.path.join(root, *_path_parts(rel))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
        path = os.path.join(root, *_path_parts(payload["entry"]["module"]))
        with open(path, "rb") as handle:
            source = handle.read()
        module = types.ModuleType(name)
        module.__file__ = path
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    module.__symgrad_root__ = root
    return module


def install(payload, directory=None):
    """Install the artifact of ``payload`` in this process (once; later calls return the
    module already there) under ``directory`` (default: the system's temporary folder)."""
    name = MODULE_PREFIX + payload["digest"]
    module = sys.modules.get(name)
    if module is None:
        candidate = _load_standalone(payload, name, directory)
        module = sys.modules.setdefault(name, candidate)   # another thread may have won
        if module is candidate:
            atexit.register(shutil.rmtree, candidate.__symgrad_root__, True)
        else:
            shutil.rmtree(candidate.__symgrad_root__, ignore_errors=True)
    return module


def uninstall(digest):
    """Forget the artifact ``digest`` in this process and delete its files."""
    module = sys.modules.pop(MODULE_PREFIX + digest, None)
    if module is not None:
        shutil.rmtree(module.__symgrad_root__, ignore_errors=True)


def standalone_module(artifact):
    """The standalone module of ``artifact`` (a full payload, installed here if need be, or
    ``{"digest", "entry"}`` of one :class:`ArtifactPlugin` installed)."""
    module = sys.modules.get(MODULE_PREFIX + artifact["digest"])
    if module is None:
        if "files" not in artifact:
            raise RuntimeError(
                f"symgrad artifact {artifact['digest']} is not installed on this worker (its "
                f"ArtifactPlugin was unregistered, or the worker left the cluster's plugins)")
        module = install(artifact)
    return module


def entry_function(artifact):
    """The function a task runs of ``artifact`` (see :func:`standalone_module`): the
    standalone module's ``evaluate``, which leaves the artifact's state alone (tasks share it
    and never update it), or, in a module without one, its entry function (``run``)."""
    module = standalone_module(artifact)
    return getattr(module, "evaluate", None) or getattr(module, artifact["entry"]["function"])


def chunk_step(artifact, feeds, name, chunk, chunks) -> np.ndarray:
    """The random-number step chunk ``chunk`` of ``chunks`` runs at: ``step * chunks +
    chunk``, where ``step`` is the fed step counter ``name`` or, when not fed, the value the
    artifact holds, as if the chunks were that many calls in a row (each draws its own
    numbers; one chunk draws what a call of the whole batch would)."""
    if name in feeds:
        step = feeds[name]
    else:
        state = getattr(standalone_module(artifact), "state", None)
        if state is None:
            raise RuntimeError("the artifact's standalone module has no state(): save the "
                               "artifact again with this symgrad to run its random ops with "
                               "map_reduce")
        step = state()[name]
    return np.asarray(int(step) * chunks + chunk, dtype=np.int64)


class ArtifactPlugin(WorkerPlugin):
    """Installs an artifact on every worker of a cluster: on registration on the workers
    there, and on start on every worker that joins later (a restarted one included). The
    payload travels once per worker; unregistering deletes the artifact's files."""

    idempotent = True       # registering it again under the same name sends nothing

    def __init__(self, payload):
        self.payload = payload
        self.name = f"symgrad-artifact-{payload['digest']}"

    def setup(self, worker):
        install(self.payload, worker.local_directory)

    def teardown(self, worker):
        uninstall(self.payload["digest"])


# --- the tasks --------------------------------------------------------------------------------
def _per_row(output, rows, label):
    """A ``"concat"`` fetch's output, whose leading dim must be the chunk's rows."""
    output = np.asarray(output)
    if output.ndim == 0 or output.shape[0] != rows:
        raise ValueError(
            f"reduce='concat': {label} has shape {list(output.shape)} on a chunk of {rows} "
            f"rows; its leading dim is not the batch (reduce it with 'sum' or 'mean')")
    return output


def _part(output, rows, mode, accumulator):
    """A ``"sum"`` or ``"mean"`` fetch's contribution: its output in the accumulator dtype,
    times the chunk's rows for ``"mean"`` (:func:`finish` divides by all the rows)."""
    part = np.array(output, dtype=accumulator)
    if mode == "mean":
        part *= rows
    return part


def run_chunk(artifact, replicated, plan, chunk, *blocks):
    """Run the artifact on chunk number ``chunk`` of rows; returns ``(parts, *per_row)``.

    ``artifact``: the payload (see the module docstring). ``replicated``: feeds by name that
    every chunk shares. ``plan``: ``{"sharded": the names of blocks, "fetches": [(reduce,
    accumulator dtype name, label, shape of an empty chunk's part)] per fetch, "step": the name
    of the program's random-number step counter or None, "chunks": how many chunks there
    are}``. ``blocks``: this chunk of every sharded input, in ``plan["sharded"]`` order, all
    with the same rows. ``parts`` holds the contribution of every ``"sum"``/``"mean"`` fetch
    (see :func:`_part`), ``per_row`` the output of every ``"concat"`` fetch, each in fetch
    order. A program that draws random numbers runs at the step :func:`chunk_step` gives. A
    chunk of no rows is not run: it contributes zeros and no rows (a program's mean over no
    rows would be NaN, and NaN times no rows is still NaN).
    """
    rows = np.shape(blocks[0])[0]
    if rows:
        feeds = dict(replicated)
        feeds.update(zip(plan["sharded"], blocks))
        if plan["step"] is not None:
            feeds[plan["step"]] = chunk_step(artifact, feeds, plan["step"], chunk,
                                             plan["chunks"])
        outputs = entry_function(artifact)(**feeds)
    else:
        outputs = [np.zeros(shape, accumulator) for _, accumulator, _, shape in plan["fetches"]]
    parts, per_row = [], []
    for output, (mode, accumulator, label, _) in zip(outputs, plan["fetches"]):
        if mode == "concat":
            per_row.append(_per_row(output, rows, label))
        else:
            parts.append(_part(output, rows, mode, accumulator))
    return (tuple(parts), *per_row)


def add_parts(*results):
    """One node of the reduction tree: the elementwise sum of the ``parts`` of several
    :func:`run_chunk` (or earlier ``add_parts``) results, as ``(parts,)``."""
    total = [np.array(part) for part in results[0][0]]
    for result in results[1:]:
        for accumulated, part in zip(total, result[0]):
            accumulated += part
    return (tuple(total),)


def finish(result, fetches, rows):
    """The root of the tree: each ``"sum"``/``"mean"`` fetch in its result dtype; ``fetches``
    lists ``(reduce, result dtype name)`` for them, ``rows`` the rows of all chunks."""
    return tuple((part / rows if mode == "mean" else part).astype(dtype, copy=False)
                 for part, (mode, dtype) in zip(result[0], fetches))
