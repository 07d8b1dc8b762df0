"""The NumPy backend: one generated module per program, cached on disk and imported.

``build(program, fetches, options)`` returns a :class:`NumpyExecutable` whose ``run(feeds,
buffers, dims)`` calls the module's ``run(dims, buffers, **feeds)``. The module is the host
layer's (:mod:`symgrad.backends.host`) with every group a chunked NumPy loop: see
:mod:`~symgrad.backends.host.generator` for the module contract,
:mod:`~symgrad.backends.host.chunks` for how fused groups become chunked loops and
:mod:`~symgrad.backends.host.lowering` for the lowering table.
"""
from __future__ import annotations

from ...gc_pause import gc_paused
from .. import Backend, cache
from ..common import cache_prefix, signature_literals
from ..options import ACCUMULATE_FLOAT64, CACHE_DIR, CHUNK_SIZE, THREADS, chunk_loop_policy
from ..host import PACKAGE, RUNTIME_MODULES, bind_references, lowers
from ..host.generator import generate

NAME = "numpy"
__all__ = ["BACKEND", "NumpyExecutable", "PACKAGE", "RUNTIME_MODULES", "bind_references",
           "build", "lowers"]


class NumpyExecutable:
    """A loaded generated module: ``run(feeds_by_name, buffers=None, dims=None) -> list of arrays``
    (``dims``: the binding of the symbolic dims, ``{symbol text: size}``; the
    fetches, then the state outputs; ``buffers``: output buffers of the ``in_place``
    parameters); ``source``, ``module``, ``constants`` (name -> array, the module's
    ``CONSTANTS``), ``references`` (name -> ``HelperReference``: functions bound into the
    module rather than written in it), ``path`` (the cached file), ``kernels`` (always empty),
    ``in_place`` (the parameters whose new values it writes into given buffers),
    ``overwrites`` (those of them whose buffer may be the parameter's own array), ``stats``
    (``cache_hit``...) and ``numpy_module`` (``(source, constants, references)``: the module
    is NumPy-only)."""

    backend = NAME

    def __init__(self, module, path, source, constants, stats, references=None):
        self.module = module
        self.path = path
        self.source = source
        self.constants = constants
        self.references = references or {}
        self.kernels = {}
        self.stats = stats
        self.numpy_module = (source, constants, self.references)
        self.in_place = tuple(getattr(module, "IN_PLACE", ()))
        self.overwrites = tuple(getattr(module, "OVERWRITES", ()))

    def run(self, feeds, buffers=None, dims=None):
        return self.module.run(dims, buffers, **feeds)


def build(program, fetches, options):
    """Generate the module, then load it from the cache, keyed by the source itself (which
    renders everything it depends on: program, fetches, options, templates) and the library's
    code, so a second compile of the same program is a cache hit (a cached file is used only
    when it holds exactly the generated source)."""
    inputs, outputs = signature_literals(program, fetches)
    with gc_paused():
        generated = generate(program, fetches, options, inputs, outputs)
    source = generated.source
    _, paths, hit = cache.store_sources(NAME, cache_prefix(NAME, program, fetches),
                                       {".py": source}, options)
    path = paths[".py"]
    module = cache.load_module(path, source, package=PACKAGE)
    bind_references(module, generated.references)
    module.CONSTANTS.update(generated.constants)
    stats = {"cache_hit": hit, "source_lines": source.count("\n"),
             "group_functions": generated.group_functions}
    return NumpyExecutable(module, path, source, dict(generated.constants), stats,
                           generated.references)


BACKEND = Backend(NAME, build, lowers, options=(CHUNK_SIZE, THREADS, ACCUMULATE_FLOAT64, CACHE_DIR),
                  fusion_policy=chunk_loop_policy)
