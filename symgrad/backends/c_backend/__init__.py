"""The C backend: loop groups compiled to native code, called from a generated host module.

``build(program, fetches, options)`` renders the C program (:mod:`.host`, :mod:`.kernels`,
:mod:`.segments`, :mod:`.row_ops`; templates in ``codegen_templates/c/``; one C file, or for a
large program translation units of bounded size: :mod:`.units`) and a Python host module,
compiles the C with the system compiler into a shared library cached on disk
(:mod:`.compiler`) and loads both: the host runs the program and calls the library's entry
points through ``ctypes``: a segment computes a run of loop groups, of matmuls, conv2d,
pooling and their gradients (:mod:`.native_ops`, calling NumPy's bundled BLAS from C:
:mod:`.blas`) and of the softmax family and ``one_hot`` (:mod:`.row_ops`); other opaque ops
keep calling NumPy.
While a program runs, NumPy allocates array data through the library's caching allocator
(:mod:`.array_cache`), so that a step's large results reuse the memory of the last one.
``source`` is the C program (its units one after the other, each under a header), ``host_source``
the host module; ``SYMGRAD_DUMP`` writes both.
"""
from __future__ import annotations

import platform

from ...gc_pause import gc_paused
from ...ops.core import ELEMENTWISE, REDUCTION, SOURCE
from .. import Backend, CustomLowering, cache
from ..common import cache_prefix, signature_literals
from ..options import (ACCUMULATE_FLOAT64, CACHE_DIR, CHUNK_SIZE, FLUSH_DENORMALS, THREADS,
                       chunk_loop_policy)
from ..host import PACKAGE, RUNTIME_MODULES, bind_references
from ..host import lowers as numpy_lowers
from . import array_cache, compiler
from .compiler import CCompileError, CCompilerNotFoundError, CLoadError, deferred
from .host import generate
from .lowering import LOWERINGS, CLoweringError, check_custom_expression, register_lowering

NAME = "c"

__all__ = ["BACKEND", "CCompileError", "CCompilerNotFoundError", "CExecutable", "CLoadError",
           "CLoweringError", "build", "deferred"]


class CExecutable:
    """A program compiled for the C backend: ``run(feeds_by_name, buffers=None, dims=None) ->
    list of arrays`` (``dims``: the binding of the symbolic dims, passed to the module's
    ``run``). ``source``: the C program; ``units``: its translation units; ``host_source``:
    the host module; ``library``: the shared library's path (None until compiled, inside
    :func:`deferred`); ``module``: the loaded host module; ``constants``; ``kernels`` (always
    empty); ``stats`` (``cache_hit``, ``c_segments``, ``c_functions``, ``c_units``...)."""

    backend = NAME
    numpy_module = None

    def __init__(self, generated, path, library, resolve, stats, tools, options):
        self.source = generated.c_source
        self.units = generated.c_units
        self.host_source = generated.source
        self.sources = {".c": self.source, ".py": self.host_source}
        self.constants = dict(generated.constants)
        self.references = generated.references
        self._caches_arrays = generated.caches_arrays
        self.kernels = {}
        self.stats = stats
        self.library = library
        self._array_cache = None
        self._resolve = resolve
        self._tools, self._options = tools, options
        self.module = cache.load_module(path, self.host_source, package=PACKAGE)
        bind_references(self.module, self.references)
        self.module.CONSTANTS.update(generated.constants)
        if library is not None:
            self._bind(library)
        self.in_place = tuple(getattr(self.module, "IN_PLACE", ()))
        self.overwrites = tuple(getattr(self.module, "OVERWRITES", ()))

    def _bind(self, library) -> None:
        """Load ``library`` into the host module (:func:`compiler.load`: a library the
        dynamic loader refuses never stays in the cache)."""
        self.library = compiler.load(self.module.bind_library, library, self.source,
                                     self.units, self._tools, self._options)
        if self._caches_arrays:
            self._array_cache = array_cache.handler(self.module.LIBRARY)

    def run(self, feeds, buffers=None, dims=None):
        """The module's ``run``, with NumPy allocating array data through the library's
        caching handler meanwhile where the program has large values (:mod:`.array_cache`)."""
        if self.library is None:
            self._bind(self._resolve())
        if self._array_cache is None:
            return self.module.run(dims, buffers, **feeds)
        previous = array_cache.swap(self._array_cache)
        try:
            return self.module.run(dims, buffers, **feeds)
        finally:
            array_cache.swap(previous)


def build(program, fetches, options):
    """Generate, cache and compile (see the module docstring); a missing compiler is a
    :class:`CCompilerNotFoundError` naming it."""
    tools = compiler.toolchain()
    inputs, outputs = signature_literals(program, fetches)
    with gc_paused():
        generated = generate(program, fetches, options, inputs, outputs)
    _, paths, hit = cache.store_sources(NAME, cache_prefix(NAME, program, fetches),
                                       {".py": generated.source, ".c": generated.c_source},
                                       options)
    library, resolve = compiler.library(generated.c_source, generated.c_units, tools, options)
    stats = {"cache_hit": hit, "c_segments": generated.segments,
             "c_functions": generated.functions, "c_units": len(generated.c_units),
             "source_lines": generated.c_source.count("\n"),
             "host_lines": generated.source.count("\n")}
    return CExecutable(generated, paths[".py"], library, resolve, stats, tools, options)


def artifact_files(executable, tree, save_options) -> dict:
    """``c/host.py``, ``c/program.c`` and (when saving) the compiled ``c/program.so``: the
    artifact's native entry, which its standalone runner loads with ctypes (no compiler
    needed); the host module imports the NumPy module's runtime helpers. The entry names the
    machine type and, for a ``-march=native`` build, the CPU features it was built for: the
    runner uses the library only on a machine of that type with all of them."""
    tree.add("c/host.py", executable.host_source.encode("utf-8"))
    tree.add("c/program.c", executable.source.encode("utf-8"))
    if save_options is not None:
        if executable.library is None:
            executable.library = executable._resolve()
        with open(executable.library, "rb") as handle:
            tree.add("c/program.so", handle.read())
    native = "-march=native" in compiler.toolchain().flags
    return {"module": "c/host.py", "function": "run",
            "imports": {name: f"numpy/{name}.py" for name in RUNTIME_MODULES},
            "source": "c/program.c", "library": "c/program.so", "machine": platform.machine(),
            "cpu_features": compiler.cpu_features() if native else None}


def _export_library(program, fetches, options, spec, folder) -> dict:
    from .library import export_library   # its templates load only when exporting

    return export_library(program, fetches, options, spec, folder)


def _require_build() -> None:
    compiler.toolchain()


def lowers(opdef) -> bool:
    """Elementwise ops with a C rule and fusible reductions compile to C, the row ops of
    :mod:`.row_ops` to C functions of segments; every other op the NumPy backend lowers runs
    through NumPy in the host module."""
    if opdef.category == ELEMENTWISE and LOWERINGS.lowers(opdef):
        return True
    if opdef.category == REDUCTION and opdef.reduction is not None:
        return True
    return opdef.category == SOURCE or numpy_lowers(opdef)


BACKEND = Backend(NAME, build, lowers, artifact_files=artifact_files,
                  artifact_binaries=("library",),
                  artifact_build_facts=("machine", "cpu_features"), require_build=_require_build,
                  options=(CHUNK_SIZE, THREADS, ACCUMULATE_FLOAT64, FLUSH_DENORMALS, CACHE_DIR),
                  fusion_policy=chunk_loop_policy,
                  custom_lowering=CustomLowering(check_custom_expression, register_lowering),
                  export_library=_export_library)
