"""``fn.export_c(path, name=...)``: a compiled program as a C library folder, and its manifest.

The backend that compiled the program writes and builds the library (its ``export_library``
capability; the C backend's is :mod:`symgrad.backends.c_backend.library`); this module gives
it what only the runtime knows (the data inputs in signature order, the dims binding, the
state's current values) and then writes ``manifest.json``: the format, the versions, the
entry point, the signature, the BLAS, and the size and sha256 of every file, which
:func:`inspect_export` (``symgrad inspect``) checks. The state is exported as it is now (the
program's inits, or the values calls have left).
"""
from __future__ import annotations

import json
import os
import platform

import numpy as np

from ..backends import get_backend
from ..errors import SymgradError
from ..version import __version__
from .standalone import ArtifactIntegrityError, sha256_hex

FORMAT = "symgrad-c-library"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20


class ExportError(SymgradError, ValueError):
    """A compiled program that cannot be exported (its backend has no library export)."""


def export_c(compiled, path, name="program", embed_parameters=False, blas=None,
             native=False) -> str:
    """Write the C library of ``compiled`` into the folder ``path`` (created; files of an
    earlier export there are replaced) and return ``path``. ``name``: the C prefix of every
    symbol and file (``lib<name>.so``, ``<name>.h``...); ``embed_parameters``: compile the
    parameters into the library too; ``blas``: linker flags of the CBLAS to use, or ``"numpy"``
    for the OpenBLAS NumPy bundles (default: found on this machine); ``native``: build the
    library (and, by default, the folder's Makefile and CMakeLists.txt) for this machine's CPU
    (``-march=native``) instead of any CPU of its architecture; the manifest's ``library``
    entry says which (``native``, ``cflags``). See ``docs/c-library.md``."""
    backend = get_backend(compiled.backend)
    if backend.export_library is None:
        raise ExportError(f"a program compiled with backend={compiled.backend!r} cannot be "
                          f"exported as a C library: compile it with backend=\"c\"")
    binder = compiled._dim_check
    values = {}
    with compiled.state.lock:
        for param in compiled.program.parameters:
            values[param.name] = np.array(compiled.state[param.name])
    spec = {"name": name,
            "inputs": [(s.name, s.dtype) for s in compiled.signature if s.kind == "data"],
            "binding": binder.to_json() if binder is not None else None,
            "parameters": values, "embed": embed_parameters, "blas": blas,
            "native": bool(native)}
    path = os.fspath(path)
    library = backend.export_library(compiled.program, compiled.fetches, compiled.options,
                                     spec, path)
    files = {}
    for rel in library["files"]:
        with open(os.path.join(path, rel), "rb") as handle:
            files[rel] = handle.read()
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "name": name,
        "backend": compiled.backend,
        "versions": {"symgrad": __version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "machine": platform.machine(),
        "library": {k: v for k, v in library.items() if k != "files"},
        "inputs": [s.to_json() for s in compiled.signature if s.kind == "data"],
        "outputs": [o.to_json() for o in compiled.outputs],
        "state": library["state"],
        "files": {rel: sha256_hex(data) for rel, data in sorted(files.items())},
        "sizes": {rel: len(data) for rel, data in sorted(files.items())},
    }
    with open(os.path.join(path, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, default=str)
        handle.write("\n")
    return path


def is_export(path) -> bool:
    """Whether ``path`` is a folder an export wrote (its manifest names the format)."""
    try:
        with open(os.path.join(path, MANIFEST), "rb") as handle:
            return json.loads(handle.read(MAX_MANIFEST_BYTES)).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def inspect_export(path) -> tuple[dict, dict]:
    """``(manifest, sizes)`` of the export at ``path`` after checking every listed file's
    size and sha256 (files it does not list, such as a rebuild's objects, are not read); an
    :class:`~symgrad.errors.ArtifactIntegrityError` names a file that changed."""
    with open(os.path.join(path, MANIFEST), "rb") as handle:
        manifest = json.loads(handle.read(MAX_MANIFEST_BYTES))
    files, sizes = manifest.get("files"), manifest.get("sizes")
    if not isinstance(files, dict) or not isinstance(sizes, dict) or set(files) != set(sizes):
        raise ArtifactIntegrityError("manifest.json of the export is malformed: 'files' and "
                                     "'sizes' must list the same files")
    for rel, digest in files.items():
        full = os.path.join(path, rel)
        if os.path.isabs(rel) or ".." in rel.split("/") or not os.path.isfile(full):
            raise ArtifactIntegrityError(f"file {rel!r} of the export is missing")
        with open(full, "rb") as handle:
            data = handle.read()
        if len(data) != sizes[rel] or sha256_hex(data) != str(digest).lower():
            raise ArtifactIntegrityError(f"file {rel!r} was modified after the export "
                                         f"(size or sha256 mismatch)")
    return manifest, dict(sizes)
