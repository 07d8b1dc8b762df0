"""The NumPy backend: one generated module per program, cached on disk and imported.

``build(program, fetches, options)`` returns a :class:`NumpyExecutable` whose ``run(feeds)``
calls the module's ``run(**feeds)``. See :mod:`.codegen` for the module contract and
:mod:`.group` for how fused groups become chunked loops.
"""
from __future__ import annotations

from ...gc_pause import gc_paused
from ...ops.state import split_state_fetches
from ...runtime import cache
from . import row_pool
from .codegen import generate
from .names import sanitize

BACKEND = "numpy"
# The package a generated module is executed in: its ``from .row_pool import RowPool`` reads
# this package's row_pool (an artifact ships a copy of that file: RUNTIME_MODULES).
PACKAGE = __name__
RUNTIME_MODULES = {"row_pool": row_pool}


def signature_literals(program, fetches):
    """The ``INPUTS``/``OUTPUTS`` literals of the module (the outputs: the fetches before the
    state outputs)."""
    fetches = split_state_fetches(program, fetches)[0]
    inputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "kind": kind}
              for kind, values in (("data", program.inputs), ("parameter", program.parameters))
              for v in values]
    outputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name} for v in fetches]
    return inputs, outputs


def bind_references(module, references) -> None:
    """Give ``module`` the functions its helpers name by reference (``HelperReference``)."""
    for name, reference in references.items():
        setattr(module, name, reference.function)


class NumpyExecutable:
    """A loaded generated module: ``run(feeds_by_name, buffers=None) -> list of arrays`` (the
    fetches, then the state outputs; ``buffers``: output buffers of the ``in_place``
    parameters); ``source``, ``module``, ``constants`` (name -> array, the module's
    ``CONSTANTS``), ``references`` (name -> ``HelperReference``: functions bound into the
    module rather than written in it), ``path`` (the cached file), ``kernels`` (always empty),
    ``in_place`` (the parameters whose new values it writes into given buffers) and ``stats``
    (``cache_hit``...)."""

    backend = BACKEND

    def __init__(self, module, path, source, constants, stats, references=None):
        self.module = module
        self.path = path
        self.source = source
        self.constants = constants
        self.references = references or {}
        self.kernels = {}
        self.stats = stats
        self.stateful = hasattr(module, "STATE")
        self.in_place = tuple(getattr(module, "IN_PLACE", ()))

    def run(self, feeds, buffers=None):
        if self.stateful:
            return self.module.run(buffers, **feeds)
        return self.module.run(**feeds)


def build(program, fetches, options):
    """Generate the module, then load it from the cache, keyed by the source itself (which
    renders everything it depends on: program, fetches, options, templates) and the library's
    code, so a second compile of the same program is a cache hit (a cached file is used only
    when it holds exactly the generated source)."""
    inputs, outputs = signature_literals(program, fetches)
    first = fetches[0].name if fetches and fetches[0].name else "program"
    prefix = f"{BACKEND}_{sanitize(first)}_{len(program.ops)}ops"
    with gc_paused():
        generated = generate(program, fetches, options, inputs, outputs)
    key = cache.cache_key(BACKEND, generated.source)
    source = generated.source
    path, hit = cache.cached_source(prefix, key, source, options)
    cache.dump(prefix, key, source)
    module = cache.load_module(path, source, package=PACKAGE)
    bind_references(module, generated.references)
    module.CONSTANTS.update(generated.constants)
    stats = {"cache_hit": hit, "source_lines": source.count("\n"),
             "group_functions": generated.group_functions}
    return NumpyExecutable(module, path, source, dict(generated.constants), stats,
                           generated.references)
