"""Getting a program and its shared inputs to the Dask workers, once.

* :func:`artifact_payload`: the artifact of a compiled program, a loaded artifact or an
  artifact path, as a payload of plain bytes (its files by relative path) plus its signature:
  always an artifact that the installed symgrad writes from the program's ``program.json``
  (a loaded artifact's files are never shipped, nor read again from its path).
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
from . import worker


@dataclasses.dataclass(frozen=True)
class ArtifactPayload:
    """An artifact ready to ship: ``payload`` (what the workers get: ``digest``, the manifest's
    ``standalone`` ``entry`` and every file's bytes), and the program's signature (``inputs``,
    ``outputs``: InputSpecs and OutputSpecs)."""

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


def _payload_from_compiled(compiled) -> ArtifactPayload:
    """Save ``compiled`` to a private temporary folder and read the artifact back, once
    (:func:`artifact.verified_files`)."""
    with tempfile.TemporaryDirectory(prefix="symgrad-ship-") as folder:
        manifest, files = artifact.verified_files(
            compiled.save(os.path.join(folder, "artifact")))
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(files[rel]).digest())
    payload = {"digest": digest.hexdigest()[:32], "entry": dict(manifest["standalone"]),
               "files": files}
    return ArtifactPayload(payload, list(compiled.signature), list(compiled.outputs))


_PAYLOADS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def artifact_payload(fn, key=None) -> ArtifactPayload:
    """The payload of ``fn``, saved by symgrad from the program it runs (once per
    :class:`~symgrad.CompiledProgram`, remembered for as long as that lives):

    * a compiled program: its artifact;
    * a loaded artifact (``sg.load(path)``): the artifact of the program ``sg.load`` compiled
      from its verified ``program.json``, never its files (which may have changed on disk
      since, or hold binaries that ``sg.load`` cannot check, such as a C library);
    * an artifact path: loaded first with ``sg.load(path, key=key)``, every check included
      (``key``: the key it must be signed with), then as a loaded artifact.
    """
    if isinstance(fn, (str, os.PathLike)):
        fn = artifact.load(os.fspath(fn), key=key)
    elif key is not None:
        raise TypeError(f"key= is the key an artifact path must be signed with; "
                        f"fn is a {type(fn).__name__}, whose artifact symgrad saves itself "
                        f"(check a signed artifact with sg.load(path, key=...))")
    compiled = fn.compiled if isinstance(fn, artifact.LoadedProgram) else fn
    if not isinstance(compiled, CompiledProgram):
        raise TypeError(f"fn must be a compiled program, a loaded artifact or an artifact "
                        f"path, got {type(fn).__name__}")
    payload = _PAYLOADS.get(compiled)
    if payload is None:
        payload = _PAYLOADS[compiled] = _payload_from_compiled(compiled)
    return payload


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
