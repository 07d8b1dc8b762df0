"""Standalone runner of a symgrad AOT artifact. Needs only NumPy and the standard library.

This file is copied verbatim into every artifact as ``numpy/standalone.py``; the artifact's
``manifest.json`` names it as the ``standalone`` entry point. Use it without symgrad::

    import importlib.util
    spec = importlib.util.spec_from_file_location("model", "my_artifact/numpy/standalone.py")
    model = importlib.util.module_from_spec(spec); spec.loader.exec_module(model)
    outputs = model.run(x=x_array)           # feeds by name (or by position, in data order)

On first use it reads ``manifest.json`` next to its own folder, checks the format version and
the sha256 of every listed file, compiles the generated NumPy module from the verified bytes,
fills its ``CONSTANTS`` from ``constants/*.npy`` (``allow_pickle=False``) and checks each feed
against the signature (name, rank, known dims, dtype kind) before calling the module's entry
function. Nothing from the artifact is executed before every check has passed.

``symgrad.runtime.artifact`` imports the checking helpers from here, so ``sg.load`` and the
standalone runner enforce the same rules.
"""
from __future__ import annotations

import hashlib
import io
import json
import linecache
import os
import types

import numpy as np

FORMAT_NAME = "symgrad-artifact"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class ArtifactIntegrityError(ValueError):
    """The artifact is missing, modified, malformed or of an unsupported format."""


# --- paths and files -------------------------------------------------------------------------
def safe_relpath(rel) -> str:
    """``rel`` if it is a plain relative POSIX path that stays inside the artifact."""
    if not isinstance(rel, str) or not rel:
        raise ArtifactIntegrityError(f"invalid path {rel!r} in the manifest")
    parts = rel.split("/")
    if (rel.startswith("/") or "\\" in rel or ":" in rel or "\x00" in rel
            or any(part in ("", ".", "..") for part in parts)):
        raise ArtifactIntegrityError(
            f"path {rel!r} in the manifest leaves the artifact or is not a plain relative path")
    return rel


class DirectoryFiles:
    """Reads files of an artifact directory; refuses paths (or symlinks) leading outside."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(self.root)

    def display_path(self, rel) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def read(self, rel) -> bytes:
        rel = safe_relpath(rel)
        real = os.path.realpath(self.display_path(rel))
        if os.path.commonpath([real, self.real_root]) != self.real_root:
            raise ArtifactIntegrityError(f"{rel!r} is a link that leads outside the artifact")
        if not os.path.isfile(real):
            raise ArtifactIntegrityError(f"file {rel!r} listed in the manifest is missing")
        with open(real, "rb") as handle:
            return handle.read()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- manifest --------------------------------------------------------------------------------
def read_manifest(files) -> dict:
    try:
        text = files.read(MANIFEST)
    except ArtifactIntegrityError:
        raise ArtifactIntegrityError("not a symgrad artifact: manifest.json is missing") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ArtifactIntegrityError(f"manifest.json is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ArtifactIntegrityError(f"manifest.json does not describe a {FORMAT_NAME}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ArtifactIntegrityError(f"manifest.json has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ArtifactIntegrityError(
            f"artifact format version {version} is newer than this runtime reads "
            f"(up to {FORMAT_VERSION}); upgrade symgrad to load it")
    _check_layout(manifest)
    return manifest


def _check_layout(manifest):
    """The manifest tables this runner reads exist and have the right types."""
    entry = manifest.get("entry_points")
    entry = entry.get("numpy") if isinstance(entry, dict) else None
    checks = {
        "files": isinstance(manifest.get("files"), dict),
        "constants": isinstance(manifest.get("constants", {}), dict),
        "inputs": isinstance(manifest.get("inputs"), list)
        and all(isinstance(spec, dict) for spec in manifest["inputs"]),
        "outputs": isinstance(manifest.get("outputs"), list),
        "entry_points.numpy": isinstance(entry, dict)
        and isinstance(entry.get("module"), str) and isinstance(entry.get("function"), str),
    }
    broken = [name for name, ok in checks.items() if not ok]
    if broken:
        raise ArtifactIntegrityError(f"manifest.json is malformed: bad {', '.join(broken)}")


def verify_files(files, manifest) -> dict:
    """Read every file the manifest lists and check its sha256; returns ``{path: bytes}``."""
    contents = {}
    for rel, digest in manifest["files"].items():
        data = files.read(rel)
        if not isinstance(digest, str) or sha256_hex(data) != digest.lower():
            raise ArtifactIntegrityError(
                f"file {rel!r} was modified after the artifact was saved (sha256 mismatch)")
        contents[rel] = data
    return contents


def listed(contents, rel, what) -> bytes:
    """The verified bytes of ``rel``, which the manifest must list."""
    rel = safe_relpath(rel)
    if rel not in contents:
        raise ArtifactIntegrityError(f"{what} {rel!r} is not among the artifact's hashed files")
    return contents[rel]


def load_array(data: bytes, what="array") -> np.ndarray:
    """An ``.npy`` payload as a read-only array; pickled object arrays are refused."""
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise ArtifactIntegrityError(f"{what} is not a plain .npy array ({exc})") from None
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        # .npy keeps no extension dtype's name: symgrad's one 2-byte extension dtype is
        # ml_dtypes' bfloat16 (imported by the modules that use it)
        array = array.view(np.dtype("bfloat16"))
    array.flags.writeable = False
    return array


def exec_module(source: bytes, filename: str, module_name: str) -> types.ModuleType:
    """Execute verified module ``source`` (never a cached .pyc) as a fresh module; its lines
    are registered with ``linecache`` so tracebacks show them."""
    text = source.decode("utf-8")
    module = types.ModuleType(module_name)
    module.__file__ = filename
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(text, filename, "exec"), module.__dict__)
    return module


def load_numpy_entry(contents, manifest, files):
    """The artifact's generated NumPy module with ``CONSTANTS`` filled, and its entry
    function. Call only after :func:`verify_files`."""
    entry = manifest["entry_points"]["numpy"]
    rel = safe_relpath(entry["module"])
    source = listed(contents, rel, "module")
    module = exec_module(source, files.display_path(rel),
                         "symgrad_artifact_" + sha256_hex(source)[:16])
    constants = module.CONSTANTS
    for name, const_rel in manifest.get("constants", {}).items():
        constants[name] = load_array(listed(contents, const_rel, "constant"), repr(const_rel))
    return module, getattr(module, entry["function"])


# --- feeds -----------------------------------------------------------------------------------
def _kind(dtype) -> str:
    if dtype.name == "bfloat16":   # ml_dtypes' (the module imports it when it needs it)
        return "f"
    return "i" if dtype.kind == "u" else dtype.kind


def check_feed(spec: dict, value) -> np.ndarray:
    """``value`` as an array matching input ``spec`` (from the manifest's ``inputs``)."""
    want = np.dtype(spec["dtype"])
    array = np.asarray(value)
    got = _kind(array.dtype)
    python_number = not isinstance(value, (np.ndarray, np.generic)) and got in "bi"
    if got != _kind(want) and not (python_number and _kind(want) in "fi"):
        raise TypeError(f"input {spec['name']!r}: expected {want} data, got {array.dtype}")
    shape = spec["shape"]
    if array.ndim != len(shape) or any(d is not None and d != n
                                       for d, n in zip(shape, array.shape)):
        shown = ["?" if d is None else d for d in shape]
        raise ValueError(f"input {spec['name']!r}: expected shape {shown}, "
                         f"got {list(array.shape)}")
    return array if array.dtype == want else array.astype(want)


def check_feeds(inputs, args, feeds) -> dict:
    """Positional feeds (in ``data`` order) and keyword feeds as checked arrays by name."""
    data = [spec for spec in inputs if spec["kind"] == "data"]
    by_name = {spec["name"]: spec for spec in inputs}
    if len(args) > len(data):
        raise TypeError(f"the program takes {len(data)} positional inputs, got {len(args)}")
    named = {spec["name"]: value for spec, value in zip(data, args)}
    for name, value in feeds.items():
        if name not in by_name:
            raise ValueError(f"unknown input {name!r}; the inputs are: {', '.join(by_name)}")
        if name in named:
            raise TypeError(f"input {name!r} was given both by position and by name")
        named[name] = value
    missing = [spec["name"] for spec in inputs if spec["required"] and spec["name"] not in named]
    if missing:
        raise ValueError(f"missing feed for input(s) {', '.join(map(repr, missing))}")
    return {name: check_feed(by_name[name], value) for name, value in named.items()}


# --- the entry point -------------------------------------------------------------------------
class Runner:
    """The artifact at ``root``, verified and ready: ``runner(*inputs, **feeds) -> list``."""

    def __init__(self, root):
        files = DirectoryFiles(root)
        self.manifest = read_manifest(files)
        contents = verify_files(files, self.manifest)
        self.inputs = self.manifest["inputs"]
        self.module, self._entry = load_numpy_entry(contents, self.manifest, files)

    def __call__(self, *args, **feeds) -> list:
        return list(self._entry(**check_feeds(self.inputs, args, feeds)))


_runner = None


def run(*args, **feeds) -> list:
    """Run the artifact this file belongs to; returns one array per fetch."""
    global _runner
    if _runner is None:
        _runner = Runner(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return _runner(*args, **feeds)
