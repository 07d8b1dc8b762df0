"""What the Dask workers run: NumPy and the standard library only, never symgrad.

:mod:`symgrad.distributed` ships :func:`run_chunk` to the workers *by value* (cloudpickle),
together with the helpers it calls, so a worker needs NumPy and Dask but not symgrad: nothing
here may import symgrad, and the test suite runs these functions on workers that cannot.

The artifact reaches each worker once, as a payload ``{"digest", "entry", "files"}`` (its
files by relative path and the manifest's ``standalone`` entry point). The first task of a
process that needs it writes the files to a private directory and executes the artifact's
standalone module from there; that module verifies the artifact and runs it. Later tasks
reuse the module, which is kept in ``sys.modules`` under a name made from the digest: a
function shipped by value gets fresh globals with every task, so it cannot cache in them.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import types

import numpy as np

MODULE_PREFIX = "_symgrad_artifact_"


def _path_parts(rel: str) -> list[str]:
    """``rel`` split into parts, refused unless it stays inside the artifact directory."""
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"artifact payload: {rel!r} is not a plain relative path")
    return parts


def _scratch_directory():
    """The Dask worker's local directory, or None (the system's temporary directory) when
    the task runs outside a distributed worker (threaded or synchronous scheduler)."""
    try:
        from distributed import get_worker

        return get_worker().local_directory
    except (ImportError, ValueError):
        return None


def _materialize(payload) -> str:
    """Write the payload's files to a new private directory; returns its path."""
    root = tempfile.mkdtemp(prefix="symgrad-artifact-", dir=_scratch_directory())
    for rel, data in payload["files"].items():
        path = os.path.join(root, *_path_parts(rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    return root


def _load_standalone(payload, name):
    """The artifact's standalone module, executed from a fresh copy of the files (compiled
    from source, so no ``__pycache__`` is left inside the artifact)."""
    root = _materialize(payload)
    path = os.path.join(root, *_path_parts(payload["entry"]["module"]))
    with open(path, "rb") as handle:
        source = handle.read()
    module = types.ModuleType(name)
    module.__file__ = path
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    module.__symgrad_root__ = root
    return module


def entry_function(payload):
    """The artifact's standalone entry function (``run``), loaded once per process."""
    name = MODULE_PREFIX + payload["digest"]
    module = sys.modules.get(name)
    if module is None:
        candidate = _load_standalone(payload, name)
        module = sys.modules.setdefault(name, candidate)   # another thread may have won
        if module is candidate:
            atexit.register(shutil.rmtree, candidate.__symgrad_root__, True)
        else:
            shutil.rmtree(candidate.__symgrad_root__, ignore_errors=True)
    return getattr(module, payload["entry"]["function"])


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


def run_chunk(artifact, replicated, plan, *blocks):
    """Run the artifact on one chunk of rows; returns ``(parts, *per_row)``.

    ``artifact``: the payload (see the module docstring). ``replicated``: feeds by name that
    every chunk shares. ``plan``: ``{"sharded": the names of blocks, "fetches": [(reduce,
    accumulator dtype name, label)] per fetch}``. ``blocks``: this chunk of every sharded
    input, in ``plan["sharded"]`` order, all with the same rows. ``parts`` holds the
    contribution of every ``"sum"``/``"mean"`` fetch (see :func:`_part`), ``per_row`` the
    output of every ``"concat"`` fetch, each in fetch order.
    """
    run = entry_function(artifact)
    feeds = dict(replicated)
    feeds.update(zip(plan["sharded"], blocks))
    rows = np.shape(blocks[0])[0]
    parts, per_row = [], []
    for output, (mode, accumulator, label) in zip(run(**feeds), plan["fetches"]):
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
