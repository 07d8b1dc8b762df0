"""Backends: the interpreter and the code generators, each described by a :class:`Backend`.

Runtime code asks a backend for everything that differs between them (its passes, its build,
its artifact files, how its results become NumPy arrays) and never branches on a backend's
name. Each backend module defines ``BACKEND``; modules are imported on first use.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from ..option_schema import unknown_name_message
from ..passes.options import FusionPolicy

_BACKEND_MODULES = {
    "interpreter": "symgrad.backends.interpreter",
    "numpy": "symgrad.backends.numpy_backend",
    "c": "symgrad.backends.c_backend",
    "cuda": "symgrad.backends.cuda_backend",
}


def _as_list(results) -> list:
    return list(results)


def _nothing() -> None:
    return None


def _no_fusion_policy(options) -> FusionPolicy:
    return FusionPolicy()


@dataclasses.dataclass(frozen=True)
class CustomLowering:
    """How a backend takes a user op's own lowering, given as ``custom_op(..., <backend
    name>=spec)``: ``check(op_name, spec, category)`` raises an error naming the op when the
    backend cannot use ``spec`` (before anything is registered); ``register(opdef, spec)``
    registers it (``spec`` None removes an earlier rule)."""

    check: Callable
    register: Callable


@dataclasses.dataclass(frozen=True)
class Backend:
    """What runtime needs of one backend.

    ``build(program, fetches, options) -> executable``: the executable has ``run(feeds by
    name, buffers=None, dims=None) -> list of arrays`` (``dims``: the binding of the symbolic
    dims, ``{symbol text: size}``, None when the inputs have none), ``source``, ``kernels``,
    ``stats`` and ``numpy_module`` (``(source, constants)`` of a NumPy-only module computing
    the same, or None).
    ``lowers(opdef) -> bool``: can this backend run the op (asked by ``show_registry``).
    ``default_passes``: pass names run when the options name none (None: the whole pipeline).
    ``artifact_files(executable, tree, save_options) -> dict``: writes the backend's own files
    into an artifact through ``tree.add(path, bytes)`` and returns the manifest's entry for
    them (None as the field: the artifact holds the NumPy module only); ``save_options`` are
    what ``save`` was given (``cubin_archs``...), None when a loaded artifact is compared
    with what symgrad regenerates: then built binaries are not made. ``artifact_binaries``:
    the keys of that entry naming built binaries (not regenerated: cubins, a C library);
    ``artifact_build_facts``: its keys describing the machine they were built for (kept as
    saved, not compared with this machine's).
    ``require_build()`` / ``require_run()`` raise the backend's own error when this machine
    cannot build (no C compiler) or run (no CUDA device) its programs. ``host_arrays(results)
    -> list of NumPy arrays``: what a runner returning NumPy gives back.
    ``options``: the :class:`~symgrad.option_schema.Option` s the backend reads (besides the
    pass pipeline's), which ``CompileOptions``, artifacts and the CLI validate them by.
    ``fusion_policy(options) -> FusionPolicy``: how the fusion pass should group for it.
    ``generates_code``: it generates source (``symgrad dump`` shows it). ``custom_lowering``:
    a :class:`CustomLowering` when a user op may bring its own lowering for this backend.
    ``export_library(program, fetches, options, spec, folder) -> dict``: writes and builds
    the program as a C library needing no Python (``fn.export_c``; None: this backend cannot);
    the C backend's is :func:`symgrad.backends.c_backend.library.export_library`.
    """

    name: str
    build: Callable
    lowers: Callable
    default_passes: tuple | None = None
    artifact_files: Callable | None = None
    artifact_binaries: tuple = ()
    artifact_build_facts: tuple = ()
    require_build: Callable = _nothing
    require_run: Callable = _nothing
    host_arrays: Callable = _as_list
    options: tuple = ()
    fusion_policy: Callable = _no_fusion_policy
    generates_code: bool = True
    custom_lowering: CustomLowering | None = None
    export_library: Callable | None = None


def get_backend(name: str) -> Backend:
    if not isinstance(name, str) or name not in _BACKEND_MODULES:
        raise ValueError(unknown_name_message("backend", name, _BACKEND_MODULES))
    return importlib.import_module(_BACKEND_MODULES[name]).BACKEND


def available_backends() -> list[str]:
    return list(_BACKEND_MODULES)


def backend_options() -> dict:
    """``{option name: Option}`` of every registered backend (one Option object per name:
    backends sharing an option declare the same one)."""
    declared: dict = {}
    for name in _BACKEND_MODULES:
        for option in get_backend(name).options:
            if declared.setdefault(option.name, option) != option:
                raise RuntimeError(f"backend {name!r} declares option {option.name!r} unlike "
                                   f"another backend")
    return declared


def custom_lowering_backends() -> dict:
    """``{backend name: CustomLowering}`` of the backends a user op may bring a lowering for."""
    return {name: get_backend(name).custom_lowering for name in _BACKEND_MODULES
            if get_backend(name).custom_lowering is not None}


def lowering_backends(opdef) -> list[str]:
    """The backends that can run ``opdef``, as their lowering tables say."""
    return [name for name in _BACKEND_MODULES if get_backend(name).lowers(opdef)]
