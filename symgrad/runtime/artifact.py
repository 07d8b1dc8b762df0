"""AOT artifacts: ``CompiledProgram.save(path)`` and ``symgrad.load(path)``.

An artifact is a directory (or, for a path ending in ``.zip``, a zip of the same tree)::

    manifest.json         format/version, library versions, the generator (a fingerprint of the
                          symgrad source that wrote it), backend, options, entry points, input
                          and output signature (dtypes, unknown dims as null), constants table,
                          stats, and the sha256 and size of every other file
    manifest.hmac         with ``save(path, key=...)``: hex HMAC-SHA256 of manifest.json
    program.json          the optimized program (forward and backward), see symgrad.ir.serialize
    numpy/program.py      the generated NumPy module (numpy + stdlib only)
    numpy/row_pool.py     the runtime helper it imports (a copy of symgrad's, stdlib only)
    numpy/standalone.py   loader: verifies the artifact, fills CONSTANTS, checks feeds, run()
    constants/<n>.npy     parameter values, constants and array attrs (no pickle), named by
                          number, never by a user's name
    cuda/*.cu, cuda/host.py, cuda/*.cubin   for programs compiled for CUDA
    c/host.py, c/program.c, c/program.so   for programs compiled for C: the standalone
                          runner's native entry (the host module calls the library through
                          ctypes; no compiler needed)

**Trust model.** ``program.json`` (with the arrays it names) is the artifact's content; every
other file is derived from it. :func:`load` executes only code that the installed symgrad
generates from ``program.json``: it regenerates the NumPy module (and its backend's code: the
CUDA sources, the C program, which it compiles) and runs what it generated, never a file of the
artifact (built binaries, cubins or a C library, are for the standalone runner). The
regenerated files, the constants table, the entry points and the listed files must also equal
the artifact's, so a modified ``numpy/program.py`` or ``numpy/standalone.py`` (the files the
standalone runner executes) is refused; no manifest field turns this off (an artifact of
another symgrad version, whose generated files differ, loads only when the caller passes
``check_generated=False``). The signature, inputs and outputs in the manifest are always
cross-checked with ``program.json``, every listed file's size and sha256 are checked (sizes
before reading, hashes in chunks), and a file the manifest does not list is refused, but for
a ``__pycache__/*.pyc`` that is the compilation of a verified module of the artifact (what
Python's import system writes when that module is imported). Hashes stored next to the
files detect corruption, not tampering: whoever can rewrite the files can rewrite the
hashes. A signed artifact
(``key=``) is authenticated: its manifest's HMAC is checked before anything else, and the
manifest holds the hash of every file. Loading an unsigned artifact with symgrad runs only
symgrad's code, but the program it computes is whatever ``program.json`` says; running an
unsigned artifact *standalone* executes its files, like unpickling: do that only with
artifacts you trust (see :mod:`.standalone` for the signed standalone path).

Saving is atomic: the tree is written to a temporary sibling (named with the saving process's
id) and published in one step: a new directory is renamed into place, an existing one is
exchanged with it atomically (``renameat2(RENAME_EXCHANGE)``, where the OS has it), and a zip
replaces the old one with ``os.replace``, so the old or the new artifact is always at the
path. Temporary entries left by a killed save are removed by the next save to that path.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import io
import json
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import warnings
import zipfile

import numpy as np

from ..backends import available_backends, get_backend
from ..backends.cache import library_fingerprint
from ..errors import ArtifactError, SymgradError, VerificationError
from ..ir.graph import ancestors_of
from ..ir.serialize import fetches_from_json, program_from_json, program_to_json
from ..ops.core import op_table
from ..ops.state import assignments, split_state_fetches, with_parameter_values
from ..version import __version__
from . import standalone
from .compiled import build_compiled, output_specs
from .feeds import build_signature, feedable_sources
from .options import CompileOptions, checked_option, option_schema

PROGRAM_FILE = standalone.PROGRAM_FILE
NUMPY_MODULE = "numpy/program.py"
STANDALONE_MODULE = "numpy/standalone.py"
ENTRY_FUNCTION = "run"
BACKENDS = tuple(available_backends())   # what an artifact may name as its backend
NUMPY_BACKEND = "numpy"   # the backend of the NumPy module every artifact holds
MAX_PROGRAM_BYTES = 1 << 30


class ArtifactFallbackWarning(UserWarning):
    """An artifact runs on its NumPy module because its backend cannot run here (no CuPy or
    CUDA device for a CUDA artifact, no C compiler for a C artifact)."""


@contextlib.contextmanager
def _artifact_errors(path):
    """Re-raise the standalone checker's errors as ArtifactError naming the artifact."""
    try:
        yield
    except standalone.ArtifactIntegrityError as exc:
        raise ArtifactError(f"artifact {os.fspath(path)!r}: {exc}") from None


# --- the files of an artifact, made from its program ----------------------------------------
class _Tree:
    """The files of an artifact as they are made: each is written under ``root`` (or, with
    no root, kept in memory when ``keep``) and its sha256 and size recorded. Backends write
    their own files through :meth:`add` (``Backend.artifact_files``)."""

    def __init__(self, root=None):
        self.root = root
        self.hashes: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.data: dict[str, bytes] = {}

    def add(self, rel, data: bytes, keep=True):
        if self.root is not None:
            path = os.path.join(self.root, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
        elif keep:
            self.data[rel] = data
        self.hashes[rel] = standalone.sha256_hex(data)
        self.sizes[rel] = len(data)


def _npy_bytes(array) -> bytes:
    array = np.asarray(array, order="C")
    if array.dtype.hasobject:
        raise ArtifactError("an array of dtype object needs pickle, which artifacts never use")
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


class _ConstantStore:
    """Stores arrays as ``constants/<n>.npy`` (numbered in order), one file per distinct
    content; ``arrays`` maps each file to its array."""

    def __init__(self, tree):
        self.tree = tree
        self.by_digest: dict[str, str] = {}
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, array) -> str:
        data = _npy_bytes(array)
        digest = hashlib.sha256(data).hexdigest()
        rel = self.by_digest.get(digest)
        if rel is None:
            rel = self.by_digest[digest] = f"constants/{len(self.by_digest)}.npy"
            self.tree.add(rel, data, keep=False)
            self.arrays[rel] = np.asarray(array)
        return rel


def _regeneration_options(options, artifact_backend, target):
    """``program.json`` holds the program optimized for ``artifact_backend``: code for that
    same backend is regenerated from it with only the passes that annotate (the memory plan),
    code for another backend with that backend's whole pipeline."""
    if target != artifact_backend:
        return options
    from ..passes import ANNOTATIONS, DEFAULT_PIPELINE

    pipeline = options.passes if options.passes is not None else DEFAULT_PIPELINE
    return options.replace(passes=tuple(name for name in pipeline if name in ANNOTATIONS))


@dataclasses.dataclass
class _Generated:
    numpy: object            # CompiledProgram of the NumPy module
    native: object = None    # CompiledProgram for the artifact's backend, when it has files
    backend: object = None   # that Backend


def _generate(program, fetches, options, backend) -> _Generated:
    """The code symgrad generates for an artifact of ``program`` (loaded from program.json):
    the NumPy module, and the code of ``backend`` when it writes files of its own and can
    build here."""
    numpy_compiled = build_compiled(program, fetches, get_backend(NUMPY_BACKEND),
                                    _regeneration_options(options, backend, NUMPY_BACKEND),
                                    saver=save)
    chosen = get_backend(backend)
    native = None
    if chosen.artifact_files is not None:
        try:
            chosen.require_build()
        except SymgradError:   # no compiler here: the NumPy module only
            pass
        else:
            native = build_compiled(program, fetches, chosen,
                                    _regeneration_options(options, backend, backend), saver=save)
    return _Generated(numpy_compiled, native, chosen)


def _refuse_references(generated):
    references = generated.numpy._executable.references
    if references:
        reasons = "; ".join(r.reason for r in references.values())
        raise ArtifactError(f"cannot save this program: {reasons}. A saved artifact contains "
                            f"all the code it runs: define each such forward as a module-level "
                            f"`def` (no decorator) that uses only its arguments, NumPy (or math) "
                            f"and builtins, register the op again and rebuild the program")


def _generated_files(tree, store, generated, save_options=None):
    """Add the generated files to ``tree``; returns ``(entry_points, constants table)``.
    ``save_options`` (what ``save`` was given, None when comparing with a loaded artifact)
    go to the backend, which builds its binaries only when saving."""
    numpy_compiled = generated.numpy
    tree.add(NUMPY_MODULE, numpy_compiled.source.encode("utf-8"))
    with open(standalone.__file__, "rb") as handle:
        tree.add(STANDALONE_MODULE, handle.read())
    constants = {name: store.add(array)
                 for name, array in numpy_compiled._executable.constants.items()}
    standalone_entry = {"module": STANDALONE_MODULE, "function": ENTRY_FUNCTION}
    entry_points = {"standalone": standalone_entry,
                    "numpy": {"module": NUMPY_MODULE, "function": ENTRY_FUNCTION,
                              "imports": _runtime_modules(tree)},
                    "program": PROGRAM_FILE}
    if generated.native is not None:
        entry_points[generated.backend.name] = generated.backend.artifact_files(
            generated.native._executable, tree, save_options)
    return entry_points, constants


def _runtime_modules(tree) -> dict:
    """Add the modules generated NumPy code imports (``numpy/row_pool.py``), copied from the
    installed symgrad; returns the manifest's ``imports`` table (module name -> file)."""
    from ..backends.host import RUNTIME_MODULES

    imports = {}
    for name, module in RUNTIME_MODULES.items():
        imports[name] = f"numpy/{name}.py"
        with open(module.__file__, "rb") as handle:
            tree.add(imports[name], handle.read())
    return imports


# --- options in the manifest --------------------------------------------------------------------
def _options_to_json(options) -> dict:
    fields = options.as_dict()
    fields["cache_dir"] = None   # where a machine caches code is not part of the artifact
    fields["passes"] = None if options.passes is None else list(options.passes)
    return fields


def _options_from_json(obj) -> CompileOptions:
    """The manifest's options, each checked against its declaration (they steer the code
    symgrad generates; one not listed keeps its default); ``cache_dir`` is never taken from an
    artifact."""
    if not isinstance(obj, dict):
        raise ArtifactError("manifest.json: 'options' must be an object")
    schema = option_schema()
    values = {}
    for name, value in obj.items():
        if name == "cache_dir":
            continue
        try:
            values[name] = checked_option(name, value, schema)
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"manifest.json: option {name}={value!r} is invalid: "
                                f"{exc}") from None
    return CompileOptions(**values)


# --- saving ------------------------------------------------------------------------------------
def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _dump_json(obj, indent=1) -> str:
    return json.dumps(obj, indent=indent, default=_json_default) + "\n"


def _library_versions():
    cupy = sys.modules.get("cupy")
    return {"symgrad": __version__, "numpy": np.__version__,
            "cupy": getattr(cupy, "__version__", None), "python": platform.python_version()}


def host_array(array) -> np.ndarray:
    """A state value as a NumPy array (a device array is copied to the host)."""
    return array.get() if not isinstance(array, np.ndarray) and hasattr(array, "get") \
        else np.asarray(array)


def _round_trip(compiled, tree, store):
    """Write program.json for ``compiled``, its parameters starting from their current values
    in ``compiled.state``, and return the program and the user's fetches read back from it:
    every other file is generated from what :func:`load` will read."""
    with compiled.state.lock:
        values = {name: host_array(array) for name, array in compiled.state._arrays.items()}
    program, value_map = with_parameter_values(compiled.program, values)
    document = program_to_json(program, store.add,
                                fetches=[value_map[v] for v in compiled.fetches])
    if compiled._dim_check is not None:   # what the program assumed of its symbolic dims
        document["dim_binding"] = compiled._dim_check.to_json()
    text = _dump_json(document, indent=None)
    tree.add(PROGRAM_FILE, text.encode("utf-8"))
    document = json.loads(text)
    program = program_from_json(document, store.arrays.__getitem__, op_table())
    return program, split_state_fetches(program, fetches_from_json(document, program))[0]


def _write_tree(compiled, root, cubin_archs=None, key=None):
    tree = _Tree(root)
    store = _ConstantStore(tree)
    program, fetches = _round_trip(compiled, tree, store)
    options = compiled.options.replace(cache_dir=None)
    generated = _generate(program, fetches, options, compiled.backend)
    _refuse_references(generated)
    entry_points, constants = _generated_files(tree, store, generated,
                                               {"cubin_archs": cubin_archs})
    manifest = {
        "format": standalone.FORMAT_NAME,
        "format_version": standalone.FORMAT_VERSION,
        "versions": _library_versions(),
        "generator": library_fingerprint(),
        "backend": compiled.backend,
        "entry_points": entry_points,
        "standalone": entry_points["standalone"],
        "inputs": [spec.to_json() for spec in compiled.signature],
        "outputs": [spec.to_json() for spec in compiled.outputs],
        "state": list(compiled.assigned),
        "constants": constants,
        "options": _options_to_json(options),
        "stats": compiled.stats,
        "files": dict(sorted(tree.hashes.items())),
        "sizes": dict(sorted(tree.sizes.items())),
    }
    data = _dump_json(manifest).encode("utf-8")
    with open(os.path.join(root, standalone.MANIFEST), "wb") as handle:
        handle.write(data)
    if key is not None:
        with open(os.path.join(root, standalone.SIGNATURE), "wb") as handle:
            handle.write(standalone.signature_of(data, key))


def _check_target(target, as_zip):
    """Refuse to replace anything but a previous artifact (or an empty directory)."""
    if not os.path.lexists(target):
        return
    if as_zip:
        if os.path.islink(target) or not zipfile.is_zipfile(target):
            raise ArtifactError(f"cannot save to {target!r}: it exists and is not a zip file")
        return
    if os.path.islink(target) or not os.path.isdir(target):
        raise ArtifactError(f"cannot save to {target!r}: it exists and is not a directory")
    if os.listdir(target) and not os.path.isfile(os.path.join(target, standalone.MANIFEST)):
        raise ArtifactError(f"refusing to overwrite {target!r}: it is a non-empty directory "
                            f"that is not a symgrad artifact")


# temporary siblings of an artifact being saved: .<name>.<pid>.<random>.tmp / .old
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.(tmp|old)\Z")


def _temporary(target, suffix, directory=True) -> str:
    prefix = f".{os.path.basename(target)}.{os.getpid()}."
    parent = os.path.dirname(target)
    if directory:
        return tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent)
    handle, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=parent)
    os.close(handle)
    return path


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(target) -> None:
    """Remove what killed saves to ``target`` left behind (their process is gone); restore a
    previous artifact that a killed two-step replace had moved aside."""
    parent, name = os.path.dirname(target), os.path.basename(target)
    for entry in os.listdir(parent):
        match = _TEMPORARY.match(entry)
        if match is None or match["name"] != name or _process_alive(int(match["pid"])):
            continue
        path = os.path.join(parent, entry)
        if entry.endswith(".old") and not os.path.lexists(target):
            os.rename(path, target)   # the killed save had moved the old artifact aside
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a, b) -> bool:
    """Atomically swap the paths ``a`` and ``b`` (Linux ``renameat2``); False where the OS or
    the filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return done == 0


def _publish_dir(staging, target):
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    if _exchange(staging, target):   # the new artifact at target, the old one at staging
        shutil.rmtree(staging, ignore_errors=True)
        return
    old = _temporary(target, ".old")  # two renames; a save killed between them is repaired
    os.rmdir(old)                     # by the next one (_remove_stale_temporaries)
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _publish_zip(staging, target):
    partial = _temporary(target, ".tmp", directory=False)
    try:
        with open(partial, "wb") as raw, zipfile.ZipFile(raw, "w",
                                                          zipfile.ZIP_DEFLATED) as archive:
            for folder, _, names in sorted(os.walk(staging)):
                for name in sorted(names):
                    path = os.path.join(folder, name)
                    archive.write(path, os.path.relpath(path, staging).replace(os.sep, "/"))
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


def save(compiled, path, cubin_archs=None, key=None):
    """Write ``compiled`` as an artifact at ``path`` (a zip if it ends in ``.zip``) and
    return ``path``. Atomic: a failure leaves whatever was at ``path`` before untouched.
    For CUDA programs, ``cubin_archs`` (e.g. ``["sm_80", "sm_90"]``) lists the GPU
    architectures to save compiled cubins for (default: the current device's, if any).
    ``key`` (bytes or str) signs the manifest with HMAC-SHA256 (``manifest.hmac``)."""
    if key is not None:
        standalone.as_key(key)
    target = os.path.abspath(os.fspath(path))
    as_zip = target.endswith(".zip")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    _remove_stale_temporaries(target)
    _check_target(target, as_zip)
    staging = _temporary(target, ".tmp")
    try:
        _write_tree(compiled, staging, cubin_archs, key)
        if as_zip:
            _publish_zip(staging, target)
        else:
            _publish_dir(staging, target)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return path


# --- reading -----------------------------------------------------------------------------------
class _ZipFiles:
    """The files of a zipped artifact; refuses unsafe names, duplicates and link entries,
    and reads an entry only up to its declared size."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        try:
            with zipfile.ZipFile(self.path) as archive:
                infos = archive.infolist()
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ArtifactError(f"artifact {path!r} is not a readable zip file ({exc})") from None
        self.entries_by_name = {}
        for info in infos:
            if info.filename in self.entries_by_name:
                raise ArtifactError(f"artifact {path!r}: the zip holds {info.filename!r} twice")
            self.entries_by_name[info.filename] = info

    def display_path(self, rel) -> str:
        return f"{self.path}/{rel}"

    def entries(self) -> list:
        return list(self.entries_by_name)

    def _info(self, rel):
        rel = standalone.safe_relpath(rel)
        info = self.entries_by_name.get(rel)
        if info is None or info.is_dir():
            raise standalone.MissingFile(f"file {rel!r} listed in the manifest is missing")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise standalone.ArtifactIntegrityError(f"{rel!r} is a link inside the zip")
        return info

    def size(self, rel) -> int:
        return self._info(rel).file_size

    def read(self, rel, limit) -> bytes:
        info = self._info(rel)
        if info.file_size > limit:
            raise standalone.ArtifactIntegrityError(
                f"{rel!r} is larger than the {limit} bytes declared")
        try:
            with zipfile.ZipFile(self.path) as archive, archive.open(info) as stream:
                return standalone.read_bounded(stream, limit, repr(rel))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise standalone.ArtifactIntegrityError(f"{rel!r} cannot be read from the zip "
                                                    f"({exc})") from None


def _open_files(path):
    path = os.fspath(path)
    if os.path.isdir(path):
        return standalone.DirectoryFiles(path)
    if os.path.isfile(path) and (path.endswith(".zip") or zipfile.is_zipfile(path)):
        return _ZipFiles(path)
    if os.path.exists(path):
        raise ArtifactError(f"{path!r} is not a symgrad artifact: an artifact is the directory "
                            f"that fn.save(path) writes, or a zip of it")
    raise ArtifactError(f"no artifact at {path!r}")


def _verified(path, key, keep=True):
    """``(files, manifest, contents)`` of the artifact at ``path`` after the signature (with
    ``key``), the format, the listing, every size and every hash (and any cached bytecode of
    its modules) were checked."""
    files = _open_files(path)
    with _artifact_errors(path):
        manifest = standalone.read_manifest(files, key)
        contents = standalone.verify_artifact(files, manifest, keep=keep)
    return files, manifest, contents


def verified_files(path, key=None):
    """``(manifest, {path: bytes})`` of the artifact at ``path``: every file it holds
    (``manifest.json`` and its signature included), read once and checked as :func:`inspect`
    checks them."""
    files, manifest, contents = _verified(path, key)
    for rel in (standalone.MANIFEST, standalone.SIGNATURE):
        try:
            contents[rel] = files.read(rel, standalone.MAX_MANIFEST_BYTES)
        except standalone.MissingFile:
            pass
    return manifest, contents


def inspect(path, key=None):
    """``(manifest, sizes)`` of the artifact at ``path`` after checking its signature (with
    ``key``), format, listing and every size and hash, without loading the program or running
    any of its code; ``sizes`` maps each listed file to its size in bytes."""
    _, manifest, sizes = _verified(path, key, keep=False)
    return manifest, sizes


class LoadedProgram:
    """A loaded artifact: call it like the compiled program (feeds by name or position,
    checked against the signature; returns a list with one array per fetch).

    Attributes: ``program`` (the program of program.json: the optimized program), ``fetches``
    (its fetched Values), ``signature``/``outputs`` (input/output specs), ``state`` (the
    parameters, starting from the values saved in the artifact, updated by every call of a
    program that assigns parameters) and ``assigned``, ``backend`` (what runs it:
    ``"numpy"``, ``"cuda"`` or ``"interpreter"``), ``source`` (the module symgrad generated
    from program.json and runs), ``kernels`` (CUDA sources by name, if any), ``compiled``
    (the :class:`~symgrad.runtime.compiled.CompiledProgram` that runs), ``checked_files``
    (whether all the artifact's generated files were compared with the regenerated ones:
    false with ``check_generated=False``, and for a C artifact where no C compiler builds
    its code), ``manifest`` and ``path``.
    """

    def __init__(self, path, manifest, compiled, program, fetches, signature, outputs, kernels,
                 checked_files):
        self.path = path
        self.manifest = manifest
        self.compiled = compiled
        self.program = program
        self.fetches = fetches
        self.backend = compiled.backend
        self.signature = signature
        self.outputs = outputs
        self.kernels = kernels
        self.checked_files = checked_files

    @property
    def source(self) -> str:
        return self.compiled.source

    @property
    def state(self):
        return self.compiled.state

    @property
    def assigned(self) -> list:
        return self.compiled.assigned

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.signature if s.kind == "data"]

    def save(self, path, cubin_archs=None, key=None):
        """Save the program again, with its current state, as an artifact at ``path`` (see
        :meth:`~symgrad.runtime.compiled.CompiledProgram.save`)."""
        return self.compiled.save(path, cubin_archs, key)

    def __call__(self, *args, **feeds) -> list:
        from .feeds import bind_feeds

        feeds = bind_feeds(self.signature, args, feeds, self.assigned)
        known = {s.name for s in self.compiled.signature}
        return list(self.compiled(**{k: v for k, v in feeds.items() if k in known}))

    def bound_dims(self, **feeds) -> dict:
        """``{symbol: size}``: how the arrays ``feeds`` (by input name) bind the program's
        symbolic dims (``{"batch": 32, "?0": 32}``), as a call binds them; nothing runs. Only
        their shapes are read: a call with them checks them whole."""
        binder = self.compiled._dim_check
        if binder is None:
            return {}
        return dict(binder({name: np.asarray(value) for name, value in feeds.items()}))

    def __repr__(self):
        return (f"<symgrad artifact {self.path!r} backend={self.backend} "
                f"inputs=({', '.join(self.input_names)}) outputs={len(self.outputs)}>")


def _parse_program(contents, path):
    try:
        document = json.loads(standalone.listed(contents, PROGRAM_FILE, "program"))
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ArtifactError(f"artifact {path!r}: program.json is malformed ({reason})") from None

    def array_source(rel):
        with _artifact_errors(path):
            return standalone.load_array(standalone.listed(contents, rel, "array"), repr(rel))

    try:
        program = program_from_json(document, array_source, op_table())
        fetches = fetches_from_json(document, program)
        program.verify()
    except ArtifactError as exc:
        raise ArtifactError(f"artifact {path!r}: program.json: {exc}") from None
    except VerificationError as exc:
        raise ArtifactError(f"artifact {path!r}: program.json does not verify: {exc}") from None
    except RecursionError:
        raise ArtifactError(f"artifact {path!r}: program.json is nested too deeply") from None
    try:
        return program, split_state_fetches(program, fetches)[0]
    except ValueError as exc:
        raise ArtifactError(f"artifact {path!r}: program.json: {exc}") from None


def _cross_check_signature(path, signature, outputs, program, fetches):
    """The manifest's inputs and outputs must be what program.json implies: each input or
    parameter of the program listed with its type and whether the fetches or the updates (its
    state outputs) need it; other listed inputs (data they never needed) are optional data."""
    updates = assignments(program).values()
    expected = {spec.name: spec for spec in build_signature(
        program, feedable_sources(ancestors_of(fetches)),
        feedable_sources(ancestors_of(updates)))}
    listed = {}
    for spec in signature:
        if spec.name in listed:
            raise ArtifactError(f"artifact {path!r}: manifest.json lists input {spec.name!r} "
                                f"twice")
        listed[spec.name] = spec
        want = expected.get(spec.name)
        if want is None and (spec.kind != "data" or spec.required):
            raise ArtifactError(f"artifact {path!r}: manifest.json lists input {spec.name!r}, "
                                f"which program.json does not have")
        if want is not None and spec != want:
            raise ArtifactError(f"artifact {path!r}: manifest.json describes input "
                                f"{spec.name!r} differently from program.json")
    missing = sorted(set(expected) - set(listed))
    if missing:
        raise ArtifactError(f"artifact {path!r}: manifest.json does not list the input(s) "
                            f"{', '.join(map(repr, missing))} of program.json")
    if outputs != output_specs(fetches):
        raise ArtifactError(f"artifact {path!r}: manifest.json's outputs differ from "
                            f"program.json's fetches")


def _another_build(manifest) -> str:
    """What a refusal adds when the manifest says that another symgrad build wrote the
    artifact (only said: the manifest is not trusted, and this steers no check)."""
    if manifest.get("generator") == library_fingerprint():
        return ""
    versions = manifest.get("versions")
    named = versions.get("symgrad") if isinstance(versions, dict) else None
    return (f"; its manifest says another symgrad build saved it (symgrad {named!r}): to run "
            f"the program of its program.json with what this symgrad generates, load it with "
            f"check_generated=False")


def _compare_with_regenerated(path, manifest, contents, generated):
    """The artifact must be exactly what this symgrad build makes of its program.json: the
    generated files, the constants table, the entry points and the listed files. Made
    whatever the manifest says (its ``generator`` only shapes the message)."""
    tree = _Tree()
    store = _ConstantStore(tree)
    by_digest = {digest: rel for rel, digest in manifest["files"].items()
                 if rel.startswith("constants/")}
    expected_points, table = _generated_files(tree, store, generated)
    for rel, data in tree.data.items():
        if contents.get(rel) != data:
            raise ArtifactError(f"artifact {path!r}: {rel} is not what symgrad generates from "
                                f"program.json (the artifact was modified after it was saved)"
                                f"{_another_build(manifest)}")
    for name in set(table) | set(manifest["constants"]):
        digest = tree.hashes.get(table.get(name, ""))
        if digest is None or by_digest.get(digest) != manifest["constants"].get(name):
            raise ArtifactError(f"artifact {path!r}: manifest.json's constants table does not "
                                f"match program.json (entry {name!r}){_another_build(manifest)}")
    backend = generated.backend
    listed = manifest["entry_points"].get(backend.name)
    binaries = set()
    if backend.name in expected_points and isinstance(listed, dict):
        for key in backend.artifact_binaries:   # built files: not regenerated, only listed
            expected_points[backend.name][key] = listed.get(key)
            reference = listed.get(key)
            binaries |= set(reference.values()) if isinstance(reference, dict) else \
                {reference} if isinstance(reference, str) else set()
        for key in backend.artifact_build_facts:   # where they were built: kept as saved
            expected_points[backend.name][key] = listed.get(key)
    if generated.native is None and backend.artifact_files is not None and \
            isinstance(listed, dict):   # its code cannot be made here: not compared
        expected_points[backend.name] = listed
        binaries |= {rel for rel in manifest["files"] if rel.startswith(f"{backend.name}/")}
    if manifest["entry_points"] != expected_points or \
            manifest.get("standalone") != expected_points["standalone"]:
        raise ArtifactError(f"artifact {path!r}: manifest.json's entry points are not the "
                            f"ones symgrad writes{_another_build(manifest)}")
    known = set(tree.hashes) | set(by_digest.values()) | {PROGRAM_FILE} | binaries
    unexpected = sorted(set(manifest["files"]) - known)
    if unexpected:
        raise ArtifactError(f"artifact {path!r}: manifest.json lists {unexpected[0]!r}, which "
                            f"is not part of an artifact of this program")


def _runner(path, generated, program, fetches, backend, requested):
    """The CompiledProgram that runs a loaded artifact (see :func:`load` for ``backend``): its
    NumPy module, the code of the backend it was saved for, or code that a backend writing no
    artifact files of its own (the interpreter) makes from ``program.json`` here."""
    native = generated.backend
    if requested is None and native.artifact_files is None or requested == NUMPY_BACKEND:
        return generated.numpy
    if requested is not None and get_backend(requested).artifact_files is None:
        return build_compiled(program, fetches, get_backend(requested),
                              generated.numpy.options.replace(passes=None), saver=save)
    if requested not in (None, backend):
        raise ArtifactError(f"artifact {path!r} was saved for the {backend} backend; it has no "
                            f"{requested.upper()} code (load it with backend='numpy')")
    try:
        native.require_build()
        native.require_run()
    except SymgradError as exc:
        if requested is not None:
            raise
        warnings.warn(f"artifact {os.fspath(path)!r} was compiled for {backend.upper()}, but "
                      f"{exc}; "
                      f"it runs on its NumPy module instead. Pass backend='numpy' to choose "
                      f"NumPy without this warning, or backend={backend!r} to make this an "
                      f"error", ArtifactFallbackWarning, stacklevel=4)
        return generated.numpy
    return generated.native


def load(path, backend=None, key=None, check_generated=True) -> LoadedProgram:
    """Verify and load the artifact at ``path`` (see the module docstring for what is
    checked and what runs).

    ``backend``: ``None`` runs the artifact on the backend it was saved for; a CUDA or C
    artifact falls back to its NumPy module, with an :class:`ArtifactFallbackWarning`, where
    that backend cannot run (no CuPy or CUDA device; no C compiler to build the regenerated C
    program). ``"numpy"`` or ``"interpreter"`` choose those; the artifact's own backend
    insists (an error where it cannot run). ``key`` (bytes or str): the artifact must be
    signed with it (HMAC-SHA256 of its manifest, checked before anything else is read).
    ``check_generated``: the artifact's generated files, constants table, entry points and
    listing must be what this symgrad generates from its ``program.json``; ``False`` (for an
    artifact saved by another symgrad version, whose generated files differ) loads it
    without that comparison, which nothing in the artifact can choose. Either way only what
    this symgrad generates from ``program.json`` runs."""
    if backend not in (None, *BACKENDS):
        raise ValueError(f"backend must be None or one of {', '.join(BACKENDS)}, "
                         f"got {backend!r}")
    _, manifest, contents = _verified(path, key)
    artifact_backend = manifest.get("backend")
    if artifact_backend not in BACKENDS:
        raise ArtifactError(f"artifact {path!r}: manifest.json names an unknown backend "
                            f"{artifact_backend!r}")
    options = _options_from_json(manifest.get("options"))
    with _artifact_errors(path):
        signature, outputs = standalone.signature_from_manifest(manifest)
    program, fetches = _parse_program(contents, path)
    _cross_check_signature(path, signature, outputs, program, fetches)
    try:
        generated = _generate(program, fetches, options, artifact_backend)
    except Exception as exc:   # whatever program.json holds, generating code from it fails cleanly
        raise ArtifactError(f"artifact {path!r}: its program cannot be compiled "
                            f"({type(exc).__name__}: {exc})") from None
    if manifest.get("state", []) != generated.numpy.assigned:
        raise ArtifactError(f"artifact {path!r}: manifest.json's state (the assigned "
                            f"parameters) differs from program.json's")
    if check_generated:
        _compare_with_regenerated(path, manifest, contents, generated)
    compiled = _runner(path, generated, program, fetches, artifact_backend, backend)
    with _artifact_errors(path):
        compiled._dim_check = standalone.binder_of(contents)   # the binding program.json saved
    kernels = generated.native.kernels if generated.native is not None else {}
    # the backend's own files were compared too unless it cannot build here (no C compiler)
    compared = check_generated and (generated.native is not None
                                    or generated.backend.artifact_files is None)
    return LoadedProgram(os.fspath(path), manifest, compiled, program, fetches, signature,
                         outputs, kernels, compared)
