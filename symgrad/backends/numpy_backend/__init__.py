"""The NumPy backend: one generated module per program, cached on disk and imported.

``build(program, fetches, options)`` returns a :class:`NumpyExecutable` whose ``run(feeds)``
calls the module's ``run(**feeds)``. See :mod:`.codegen` for the module contract and
:mod:`.group` for how fused groups become chunked loops.
"""
from __future__ import annotations

import concurrent.futures
import threading

from ...gc_pause import gc_paused
from ...ops.core import SOURCE
from .. import Backend, cache
from ..common import cache_prefix, signature_literals
from .codegen import generate
from .lowering import LOWERINGS

NAME = "numpy"


_shared_pool = None
_shared_pool_lock = threading.Lock()


def shared_pool() -> concurrent.futures.ThreadPoolExecutor:
    """One worker pool for every generated module of the process (its threads start only as
    chunked loops need them), so compiling many programs never piles up idle threads."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=32, thread_name_prefix="symgrad")
    return _shared_pool


class NumpyExecutable:
    """A loaded generated module: ``run(feeds_by_name) -> list of arrays``; ``source``,
    ``module``, ``constants`` (name -> array, the module's ``CONSTANTS``), ``path`` (the
    cached file), ``kernels`` (always empty), ``stats`` (``cache_hit``...) and
    ``numpy_module`` (``(source, constants)``: the module is NumPy-only)."""

    backend = NAME

    def __init__(self, module, path, source, constants, stats):
        self.module = module
        self.path = path
        self.source = source
        self.constants = constants
        self.kernels = {}
        self.stats = stats
        self.numpy_module = (source, constants)

    def run(self, feeds):
        return self.module.run(**feeds)


def build(program, fetches, options):
    """Generate the module, then load it from the cache, keyed by the source itself (which
    renders everything it depends on: program, fetches, options, templates) and the library's
    code, so a second compile of the same program is a cache hit."""
    inputs, outputs = signature_literals(program, fetches)
    with gc_paused():
        generated = generate(program, fetches, options, inputs, outputs)
    source = generated.source
    _, paths, hit = cache.store_sources(NAME, cache_prefix(NAME, program, fetches),
                                       {".py": source}, options)
    path = paths[".py"]
    module = cache.load_module(path)
    module.CONSTANTS.update(generated.constants)
    if hasattr(module, "_POOL"):
        module._POOL = shared_pool()
    stats = {"cache_hit": hit, "source_lines": source.count("\n"),
             "group_functions": generated.group_functions}
    return NumpyExecutable(module, path, source, dict(generated.constants), stats)


def lowers(opdef) -> bool:
    """Sources, and every op with a rule in the lowering table (region ops included)."""
    return opdef.category == SOURCE or LOWERINGS.lowers(opdef)


BACKEND = Backend(NAME, build, lowers)
