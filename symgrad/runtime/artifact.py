"""AOT artifacts: ``CompiledProgram.save(path)`` and ``symgrad.load(path)``.

An artifact is a directory (or, for a path ending in ``.zip``, a zip of the same tree)::

    manifest.json         format/version, library versions, backend, entry points, input and
                          output signature (dtypes, unknown dims as null), constants table,
                          stats, and the sha256 of every other file
    program.json          the optimized program (forward and backward), see symgrad.ir.serialize
    numpy/program.py      the generated NumPy module (numpy + stdlib only)
    numpy/standalone.py   loader: verifies the artifact, fills CONSTANTS, checks feeds, run()
    constants/*.npy       parameter values, constants and array attrs (no pickle)
    cuda/*.cu, cuda/host.py   kernels and host module, for programs compiled for CUDA

Saving is atomic: the tree is written to a temporary sibling and renamed into place, so a
failure never leaves a partial artifact under the final name (a previous artifact there stays
untouched unless the new one is complete). Loading verifies the
format version, each listed path (no ``..``, no absolute path, no link leaving the artifact),
each sha256 and program.json before any code from the artifact runs; every failure is an
:class:`~symgrad.errors.ArtifactError`.
"""
from __future__ import annotations

import contextlib
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
import zipfile

import numpy as np

from ..errors import ArtifactError, VerificationError
from ..ir.serialize import fetches_from_json, program_from_json, program_to_json
from ..ops.core import op_table
from . import standalone
from .feeds import InputSpec, OutputSpec, StepCounter, bind_feeds

PROGRAM_FILE = "program.json"
NUMPY_MODULE = "numpy/program.py"
STANDALONE_MODULE = "numpy/standalone.py"
ENTRY_FUNCTION = "run"


@contextlib.contextmanager
def _artifact_errors(path):
    """Re-raise the standalone checker's errors as ArtifactError naming the artifact."""
    try:
        yield
    except standalone.ArtifactIntegrityError as exc:
        raise ArtifactError(f"artifact {os.fspath(path)!r}: {exc}") from None


# --- saving ----------------------------------------------------------------------------------
class _TreeWriter:
    """Writes files under a staging root and records their sha256 for the manifest."""

    def __init__(self, root):
        self.root = root
        self.hashes: dict[str, str] = {}

    def write(self, rel, data: bytes):
        path = os.path.join(self.root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        self.hashes[rel] = standalone.sha256_hex(data)

    def write_text(self, rel, text: str):
        self.write(rel, text.encode("utf-8"))


def _safe_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "array"


class _ConstantStore:
    """Stores arrays as ``constants/<name>.npy``, one file per distinct content."""

    def __init__(self, writer):
        self.writer = writer
        self.by_digest: dict[str, str] = {}

    def add(self, array, name) -> str:
        array = np.asarray(array, order="C")
        if array.dtype.hasobject:
            raise ArtifactError(f"constant {name!r} has dtype object, which needs pickle")
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.by_digest:
            stem, rel, n = _safe_stem(name), None, 0
            while rel is None or rel in self.writer.hashes:
                rel = f"constants/{stem}{'' if n == 0 else f'_{n}'}.npy"
                n += 1
            self.writer.write(rel, data)
            self.by_digest[digest] = rel
        return self.by_digest[digest]


def _numpy_module(compiled):
    """``(source, constants)`` of the generated NumPy module for ``compiled``; programs
    compiled for another backend are compiled again with the NumPy backend."""
    if compiled.backend != "numpy":
        from .compile import compile as compile_program

        compiled = compile_program(compiled.program, compiled.fetches, backend="numpy",
                                   options=compiled.options)
    return compiled.source, dict(compiled._executable.constants)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _dump_json(obj, indent=1) -> str:
    return json.dumps(obj, indent=indent, default=_json_default) + "\n"


def _library_versions():
    from .. import __version__

    cupy = sys.modules.get("cupy")
    return {"symgrad": __version__, "numpy": np.__version__,
            "cupy": getattr(cupy, "__version__", None), "python": platform.python_version()}


def _cubin_archs(executable, requested):
    """Architectures to build cubins for: those requested, else the current device's when a
    GPU is present, else none (the .cu source is always saved)."""
    if requested is not None:
        return list(requested)
    try:
        from ..backends.cuda_backend import device_arch

        return [device_arch()]
    except Exception:  # no CuPy or no device: source only
        return []


def _write_cuda(writer, compiled, cubin_archs):
    """``cuda/host.py``, ``cuda/program.cu``, one file per kernel, and a cubin per arch."""
    executable = compiled._executable
    kernels = {}
    for name, kernel_source in compiled.kernels.items():
        kernels[name] = f"cuda/{_safe_stem(name)}.cu"
        writer.write_text(kernels[name], kernel_source)
    writer.write_text("cuda/host.py", compiled.source)
    entry = {"host": "cuda/host.py", "kernels": kernels}
    full_source = getattr(executable, "cuda_source", None)
    if full_source is not None:
        entry["source"] = "cuda/program.cu"
        writer.write_text(entry["source"], full_source)
        archs = _cubin_archs(executable, cubin_archs)
        entry["cubins"] = {}
        for arch, cubin in (executable.cubins(archs) if archs else {}).items():
            entry["cubins"][arch] = f"cuda/program.{_safe_stem(arch)}.cubin"
            writer.write(entry["cubins"][arch], cubin)
    return entry


def _write_tree(compiled, root, cubin_archs=None):
    writer = _TreeWriter(root)
    store = _ConstantStore(writer)
    source, constants = _numpy_module(compiled)
    constant_files = {name: store.add(array, name) for name, array in constants.items()}
    program = program_to_json(compiled.program, lambda array: store.add(array, "attr"),
                              fetches=compiled.fetches)
    writer.write_text(PROGRAM_FILE, _dump_json(program, indent=None))
    writer.write_text(NUMPY_MODULE, source)
    with open(standalone.__file__, "rb") as handle:
        writer.write(STANDALONE_MODULE, handle.read())
    standalone_entry = {"module": STANDALONE_MODULE, "function": ENTRY_FUNCTION}
    entry_points = {"standalone": standalone_entry,
                    "numpy": {"module": NUMPY_MODULE, "function": ENTRY_FUNCTION},
                    "program": PROGRAM_FILE}
    if compiled.backend == "cuda":
        entry_points["cuda"] = _write_cuda(writer, compiled, cubin_archs)
    manifest = {
        "format": standalone.FORMAT_NAME,
        "format_version": standalone.FORMAT_VERSION,
        "versions": _library_versions(),
        "backend": compiled.backend,
        "entry_points": entry_points,
        "standalone": standalone_entry,
        "inputs": [spec.to_json() for spec in compiled.signature],
        "outputs": [spec.to_json() for spec in compiled.outputs],
        "constants": constant_files,
        "options": dataclasses.asdict(compiled.options),
        "stats": compiled.stats,
        "files": dict(sorted(writer.hashes.items())),
    }
    with open(os.path.join(root, standalone.MANIFEST), "w", encoding="utf-8") as handle:
        handle.write(_dump_json(manifest))


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


def _publish_dir(staging, target):
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".old",
                           dir=os.path.dirname(target))
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _publish_zip(staging, target):
    handle, partial = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                       dir=os.path.dirname(target))
    try:
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w",
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


def save(compiled, path, cubin_archs=None):
    """Write ``compiled`` as an artifact at ``path`` (a zip if it ends in ``.zip``) and
    return ``path``. Atomic: a failure leaves whatever was at ``path`` before untouched.
    For CUDA programs, ``cubin_archs`` (e.g. ``["sm_80", "sm_90"]``) lists the GPU
    architectures to save compiled cubins for (default: the current device's, if any)."""
    target = os.path.abspath(os.fspath(path))
    as_zip = target.endswith(".zip")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    _check_target(target, as_zip)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                               dir=parent)
    try:
        _write_tree(compiled, staging, cubin_archs)
        if as_zip:
            _publish_zip(staging, target)
        else:
            _publish_dir(staging, target)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return path


# --- loading ---------------------------------------------------------------------------------
class _ZipFiles:
    """Reads files of a zipped artifact; refuses unsafe names and link entries."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        try:
            with zipfile.ZipFile(self.path) as archive:
                self.entries = {info.filename: info for info in archive.infolist()}
        except (zipfile.BadZipFile, OSError) as exc:
            raise ArtifactError(f"artifact {path!r} is not a readable zip file ({exc})") from None

    def display_path(self, rel) -> str:
        return f"{self.path}/{rel}"

    def read(self, rel) -> bytes:
        rel = standalone.safe_relpath(rel)
        info = self.entries.get(rel)
        if info is None or info.is_dir():
            raise standalone.ArtifactIntegrityError(
                f"file {rel!r} listed in the manifest is missing")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise standalone.ArtifactIntegrityError(f"{rel!r} is a link inside the zip")
        with zipfile.ZipFile(self.path) as archive:
            return archive.read(info)


def _open_files(path):
    path = os.fspath(path)
    if os.path.isdir(path):
        return standalone.DirectoryFiles(path)
    if os.path.isfile(path):
        return _ZipFiles(path)
    raise ArtifactError(f"no artifact at {path!r}")


class LoadedProgram:
    """A loaded artifact: call it like the compiled program (feeds by name or position,
    checked against the signature; returns a list with one array per fetch).

    Attributes: ``program`` (the deserialized optimized program), ``fetches`` (its fetched
    Values), ``signature``/``outputs`` (input/output specs), ``source`` (the generated NumPy
    module), ``kernels`` (CUDA sources by name, if any), ``manifest`` and ``path``.
    """

    backend = "numpy"

    def __init__(self, path, manifest, program, fetches, signature, outputs, source, kernels,
                 module, entry):
        self.path = path
        self.manifest = manifest
        self.program = program
        self.fetches = fetches
        self.signature = signature
        self.outputs = outputs
        self.source = source
        self.kernels = kernels
        self.module = module
        self._entry = entry
        self._steps = StepCounter(signature)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.signature if s.kind == "data"]

    def __call__(self, *args, **feeds) -> list:
        return list(self._steps.run(lambda bound: self._entry(**bound),
                                    bind_feeds(self.signature, args, feeds)))

    def __repr__(self):
        return (f"<symgrad artifact {self.path!r} inputs=({', '.join(self.input_names)}) "
                f"outputs={len(self.outputs)}>")


def _parse_program(contents, path):
    try:
        document = json.loads(standalone.listed(contents, PROGRAM_FILE, "program"))
    except ValueError as exc:
        raise ArtifactError(f"artifact {path!r}: program.json is malformed ({exc})") from None

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
    return program, fetches


def inspect(path):
    """``(manifest, sizes)`` of the artifact at ``path`` after checking its format and every
    hash, without loading the program or running any of its code; ``sizes`` maps each listed
    file to its size in bytes."""
    files = _open_files(path)
    with _artifact_errors(path):
        manifest = standalone.read_manifest(files)
        contents = standalone.verify_files(files, manifest)
    return manifest, {rel: len(data) for rel, data in contents.items()}


def load(path) -> LoadedProgram:
    """Verify and load the artifact at ``path`` (see the module docstring)."""
    files = _open_files(path)
    with _artifact_errors(path):
        manifest = standalone.read_manifest(files)
        contents = standalone.verify_files(files, manifest)
        source = standalone.listed(contents, manifest["entry_points"]["numpy"]["module"],
                                   "module")
        kernels = {name: standalone.listed(contents, rel, "kernel").decode("utf-8")
                   for name, rel in manifest["entry_points"].get("cuda", {})
                   .get("kernels", {}).items()}
    try:
        signature = [InputSpec.from_json(obj) for obj in manifest["inputs"]]
        outputs = [OutputSpec.from_json(obj) for obj in manifest["outputs"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"artifact {path!r}: malformed signature in manifest.json ({exc})") \
            from None
    program, fetches = _parse_program(contents, path)
    with _artifact_errors(path):
        module, entry = standalone.load_numpy_entry(contents, manifest, files)
    return LoadedProgram(os.fspath(path), manifest, program, fetches, signature, outputs,
                         source.decode("utf-8"), kernels, module, entry)
