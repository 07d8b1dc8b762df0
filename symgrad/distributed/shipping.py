"""Getting a program and its shared inputs to the Dask workers, once.

* :func:`artifact_payload`: the artifact of a compiled program, a loaded artifact or an
  artifact path, as a payload of plain bytes (its files by relative path) plus its signature.
* :func:`ship_artifact`: the artifact installed once on every worker of a
  ``dask.distributed`` cluster by a worker plugin (tasks carry only its digest), or one graph
  node for the local schedulers; :func:`ship`: a value every task of one call shares, as one
  graph node.
* :class:`ByValue`: a function that always travels by value, so workers need not import the
  module it lives in (the worker code of :mod:`symgrad.distributed.worker`, which is
  registered with cloudpickle to travel by value, its plugin included).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import sys
import tempfile
import threading
import weakref

import cloudpickle
import dask

from ..runtime import artifact
from ..runtime.compiled import CompiledProgram
from ..runtime.feeds import InputSpec, OutputSpec
from . import worker


@dataclasses.dataclass(frozen=True)
class ArtifactPayload:
    """An artifact ready to ship: ``payload`` (what the workers get: ``digest``, the manifest's
    ``standalone`` ``entry`` and every file's bytes), and the signature read from its manifest."""

    payload: dict
    inputs: list
    outputs: list

    @property
    def digest(self) -> str:
        return self.payload["digest"]

    @property
    def reference(self) -> dict:
        """What a task needs to find the artifact installed on its worker."""
        return {"digest": self.digest, "entry": self.payload["entry"]}

    @property
    def nbytes(self) -> int:
        return sum(len(data) for data in self.payload["files"].values())


def _payload_from_path(path) -> ArtifactPayload:
    """Verify the artifact at ``path`` (format, listing and every hash) and read its files,
    once (:func:`artifact.verified_files`)."""
    manifest, files = artifact.verified_files(path)
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(files[rel]).digest())
    payload = {"digest": digest.hexdigest()[:32], "entry": dict(manifest["standalone"]),
               "files": files}
    return ArtifactPayload(payload, [InputSpec.from_json(obj) for obj in manifest["inputs"]],
                           [OutputSpec.from_json(obj) for obj in manifest["outputs"]])


def _payload_from_compiled(compiled) -> ArtifactPayload:
    with tempfile.TemporaryDirectory(prefix="symgrad-ship-") as folder:
        return _payload_from_path(compiled.save(os.path.join(folder, "artifact")))


_PAYLOADS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def artifact_payload(fn) -> ArtifactPayload:
    """The payload of ``fn``: a :class:`~symgrad.CompiledProgram` (saved once and
    remembered for as long as it lives), a loaded artifact (read again from its path) or the
    path of an artifact (a directory or a zip)."""
    if isinstance(fn, CompiledProgram):
        payload = _PAYLOADS.get(fn)
        if payload is None:
            payload = _PAYLOADS[fn] = _payload_from_compiled(fn)
        return payload
    if isinstance(fn, artifact.LoadedProgram):
        return _payload_from_path(fn.path)
    if isinstance(fn, (str, os.PathLike)):
        return _payload_from_path(os.fspath(fn))
    raise TypeError(f"fn must be a compiled program, a loaded artifact or an artifact path, "
                    f"got {type(fn).__name__}")


# --- the scheduler ---------------------------------------------------------------------------
def active_client():
    """The ``dask.distributed.Client`` that ``dask.compute`` would use now, or None when a
    local scheduler (threads, processes, synchronous) would run the graph."""
    try:
        from distributed import Client
    except ImportError:
        return None
    scheduler = dask.base.get_scheduler()
    owner = getattr(scheduler, "__self__", None)
    return owner if isinstance(owner, Client) else None


# The worker code (functions and plugin) travels by value: workers cannot import symgrad.
cloudpickle.register_pickle_by_value(worker)

_INSTALLED: "collections.OrderedDict" = collections.OrderedDict()
_INSTALLED_LIMIT = 8      # artifacts kept installed on clusters; the oldest is unregistered
_INSTALLED_LOCK = threading.Lock()


def ship(value):
    """``value``, shared by every task of one call, as one node of the graph: a worker that
    needs it runs that node or fetches its result from a peer (each worker gets it once), and
    a copy lost with a worker is made again from the graph."""
    return dask.delayed(value, traverse=False)


def _forget_oldest_installed():
    _, (client_ref, name) = _INSTALLED.popitem(last=False)
    client = client_ref()
    if client is not None and client.status == "running":
        client.unregister_worker_plugin(name)


def ship_artifact(client, shipped: ArtifactPayload):
    """What the tasks of a call get to reach the artifact. With a client: the artifact is
    installed on every worker of its cluster by a worker plugin (once per worker, also on
    workers that join or restart later; later calls on the same client find it there), and
    the tasks get only its reference. Without: one graph node holding the payload, which the
    first task of each process installs from."""
    if client is None:
        return dask.delayed(shipped.payload, name=f"symgrad-artifact-{shipped.digest}",
                            traverse=False)
    key = (client.id, shipped.digest)
    with _INSTALLED_LOCK:
        if key in _INSTALLED:
            _INSTALLED.move_to_end(key)
        else:
            plugin = worker.ArtifactPlugin(shipped.payload)
            client.register_plugin(plugin)
            _INSTALLED[key] = (weakref.ref(client), plugin.name)
            while len(_INSTALLED) > _INSTALLED_LIMIT:
                _forget_oldest_installed()
    return shipped.reference


class ByValue:
    """``function``, pickled by value (cloudpickle, with the helpers of its module) whichever
    pickler Dask uses, so a worker can run it without importing the module it comes from.
    The bytes are made once; on the worker they unpickle to the plain function."""

    def __init__(self, function):
        cloudpickle.register_pickle_by_value(sys.modules[function.__module__])
        self.function = function
        self.__name__ = f"symgrad-{function.__name__.replace('_', '-')}"
        self.pickled = cloudpickle.dumps(function)

    def __call__(self, *args):
        return self.function(*args)

    def __reduce__(self):
        return cloudpickle.loads, (self.pickled,)

    def __dask_tokenize__(self):
        return ("symgrad.ByValue", hashlib.sha256(self.pickled).hexdigest())
