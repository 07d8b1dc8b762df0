"""Standalone runner of symgrad AOT artifacts. Needs only NumPy and the standard library.

symgrad copies this file into every artifact as ``numpy/standalone.py`` (the manifest's
``standalone`` entry point). Where symgrad is not installed, load an artifact with it::

    import runpy
    runner = runpy.run_path("runner.py")            # a copy of this file that you trust
    model = runner["load"]("my_artifact", key=KEY)  # key: the bytes the artifact was signed with
    outputs = model(x=x_array)                      # feeds by name (or by position)

The artifact's own copy may also be imported (``import standalone`` with the artifact's
``numpy`` folder on ``sys.path``, or through ``importlib``) and its ``run`` called.

``load`` checks, before any code of the artifact runs: the HMAC-SHA256 signature of
``manifest.json`` when a key is given (an unsigned or re-signed artifact is refused), the
format version, that the artifact holds no file the manifest does not list, each file's
declared size (before reading it) and sha256 (read in chunks), and that a ``.pyc`` in a
``__pycache__`` folder (Python's import system writes one when this file is imported, and
would run it on a later import) is the compilation of the verified source of its module;
then it executes the verified bytes of the generated module (never a cached ``.pyc``; the
helper modules it imports, ``entry_points.numpy.imports``, become members of a package of
its own; for an artifact of the C backend, its host module, which calls the artifact's
compiled library through ctypes, or the NumPy module where that library does not load),
fills its ``CONSTANTS`` from ``constants/*.npy`` (``allow_pickle=False``) and checks each
feed against the signature (name, rank, known dims, dtype kind) before calling the module's
entry function.

Trust: the artifact's own copy of this file is part of the artifact, so running it
(``runpy.run_path("my_artifact/numpy/standalone.py")["run"](x=...)``) trusts the artifact,
like unpickling does; an unsigned artifact's hashes catch corruption, not tampering. Against
tampering, sign the artifact (``fn.save(path, key=KEY)``) and load it with a copy of this
file taken from your symgrad installation, as above. ``symgrad.load`` never runs the
artifact's code at all (it regenerates the module from ``program.json``).

``symgrad.runtime.artifact`` imports the checking helpers from here, and symgrad checks the
feeds of every compiled program with this file's :func:`bind_feeds`, so ``symgrad.load``
and the standalone runner enforce the same rules and raise errors of the same types with
the same messages.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import importlib.util
import io
import json
import linecache
import marshal
import os
import platform
import re
import sys
import tempfile
import threading
import types
import typing
from collections.abc import Mapping

import numpy as np

FORMAT_NAME = "symgrad-artifact"
FORMAT_VERSION = 4            # the newest format this runner reads (and symgrad writes)
MIN_FORMAT_VERSION = 2        # the oldest (format 1 gave no sizes, which every check needs)
# from this format on, the module's run takes the binding of the symbolic dims and the state
# buffers first: run(_dims, _buffers, **feeds); before it, run(**feeds) or run(_buffers, **feeds)
DIMS_FORMAT_VERSION = 4
MANIFEST = "manifest.json"
PROGRAM_FILE = "program.json"   # the serialized program (and its dims binding)
SIGNATURE = "manifest.hmac"          # hex HMAC-SHA256 of manifest.json's bytes, when signed
MAX_MANIFEST_BYTES = 64 << 20
CHUNK = 1 << 20
KEY_VARIABLE = "SYMGRAD_ARTIFACT_KEY"   # run(): the key, when the environment sets it


class ArtifactIntegrityError(ValueError):
    """The artifact is missing, modified, unsigned, malformed or of an unsupported format."""


class MissingFile(ArtifactIntegrityError):
    """A file the manifest lists (or the manifest itself) is not in the artifact."""


# The feed check below is symgrad's own (symgrad.runtime.feeds re-exports it): as part of
# symgrad it raises symgrad's error classes; a copy of this file (an artifact's runner, your
# runner.py), which cannot import symgrad, raises classes of the same names and builtin bases.
if __package__ == "symgrad.runtime":
    from ..errors import FeedError, FeedTypeError
else:
    class FeedError(ValueError):
        """A feed does not match the program's signature (missing, unknown, wrong rank or
        size)."""

    class FeedTypeError(TypeError):
        """A feed has the wrong dtype kind for its input."""


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


def read_bounded(stream, limit: int, what: str) -> bytes:
    """The bytes of ``stream``, read in chunks: more than ``limit`` is an error (a file is
    never read past the size the manifest declares)."""
    parts, total = [], 0
    while True:
        part = stream.read(min(CHUNK, limit - total + 1))
        if not part:
            return b"".join(parts)
        total += len(part)
        if total > limit:
            raise ArtifactIntegrityError(f"{what} is larger than the {limit} bytes declared")
        parts.append(part)


class DirectoryFiles:
    """The files of an artifact directory; refuses paths (or symlinks) leading outside."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(self.root)

    def display_path(self, rel) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def _real(self, rel) -> str:
        rel = safe_relpath(rel)
        real = os.path.realpath(self.display_path(rel))
        if os.path.commonpath([real, self.real_root]) != self.real_root:
            raise ArtifactIntegrityError(f"{rel!r} is a link that leads outside the artifact")
        if not os.path.isfile(real):
            raise MissingFile(f"file {rel!r} listed in the manifest is missing")
        return real

    def size(self, rel) -> int:
        return os.path.getsize(self._real(rel))

    def read(self, rel, limit) -> bytes:
        with open(self._real(rel), "rb") as handle:
            return read_bounded(handle, limit, repr(rel))

    def entries(self) -> list:
        """Every entry below the root but directories, as relative POSIX paths."""
        found = []
        for folder, folders, names in os.walk(self.root):
            for name in folders:   # a link to a folder is listed, never followed
                if os.path.islink(os.path.join(folder, name)):
                    names.append(name)
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), self.root)
                found.append(rel.replace(os.sep, "/"))
        return found


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def as_key(key) -> bytes:
    """A signing key as bytes (a str is taken as UTF-8)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise TypeError(f"a signing key must be non-empty bytes or str, got {type(key).__name__}")
    return bytes(key)


def signature_of(manifest_bytes: bytes, key) -> bytes:
    """The content of ``manifest.hmac``: the hex HMAC-SHA256 of the manifest's bytes."""
    return hmac.new(as_key(key), manifest_bytes, hashlib.sha256).hexdigest().encode() + b"\n"


# --- manifest --------------------------------------------------------------------------------
def read_manifest(files, key=None) -> dict:
    """The parsed, checked manifest; with ``key``, its signature is verified first."""
    try:
        raw = files.read(MANIFEST, MAX_MANIFEST_BYTES)
    except MissingFile:
        raise ArtifactIntegrityError("not a symgrad artifact: manifest.json is missing") \
            from None
    if key is not None:
        _verify_signature(files, raw, key)
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ArtifactIntegrityError(f"manifest.json is not valid JSON ({reason})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ArtifactIntegrityError(f"manifest.json does not describe a {FORMAT_NAME}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ArtifactIntegrityError(f"manifest.json has an invalid format_version {version!r}")
    if version < MIN_FORMAT_VERSION:
        raise ArtifactIntegrityError(
            f"artifact format version {version} is no longer read (its manifest gives no file "
            f"sizes); save the program again")
    if version > FORMAT_VERSION:
        raise ArtifactIntegrityError(
            f"artifact format version {version} is newer than this runtime reads "
            f"(up to {FORMAT_VERSION}); upgrade symgrad to load it")
    _check_layout(manifest)
    return manifest


def _verify_signature(files, raw, key):
    try:
        signature = files.read(SIGNATURE, 256).strip()
    except MissingFile:
        raise ArtifactIntegrityError("the artifact is not signed (no manifest.hmac), but a key "
                                     "was given") from None
    expected = signature_of(raw, key).strip()
    if not hmac.compare_digest(signature, expected):
        raise ArtifactIntegrityError("the signature of manifest.json does not match the key "
                                     "(the artifact was modified, or signed with another key)")


def _check_layout(manifest):
    """The manifest tables this runner reads exist and have the right types."""
    entry = manifest.get("entry_points")
    entry = entry.get("numpy") if isinstance(entry, dict) else None
    files = manifest.get("files")
    sizes = manifest.get("sizes")
    checks = {
        "files": isinstance(files, dict) and all(isinstance(v, str) for v in files.values()),
        "sizes": isinstance(sizes, dict) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values()),
        "constants": isinstance(manifest.get("constants", {}), dict)
        and all(isinstance(v, str) for v in manifest.get("constants", {}).values()),
        "inputs": isinstance(manifest.get("inputs"), list)
        and all(isinstance(spec, dict) for spec in manifest["inputs"]),
        "outputs": isinstance(manifest.get("outputs"), list),
        "entry_points.numpy": isinstance(entry, dict)
        and isinstance(entry.get("module"), str) and isinstance(entry.get("function"), str),
        "entry_points.numpy.imports": not isinstance(entry, dict) or (
            isinstance(entry.get("imports", {}), dict)
            and all(isinstance(name, str) and name.isidentifier() and isinstance(rel, str)
                    for name, rel in entry.get("imports", {}).items())),
    }
    broken = [name for name, ok in checks.items() if not ok]
    if broken:
        raise ArtifactIntegrityError(f"manifest.json is malformed: bad {', '.join(broken)}")
    if set(sizes) != set(files):
        raise ArtifactIntegrityError("manifest.json is malformed: 'sizes' must give the size "
                                     "of every listed file")


def verify_artifact(files, manifest, keep=True) -> dict:
    """Every check of an artifact's files, in order: the listing (:func:`check_listing`),
    each listed file's size and sha256 (:func:`verify_files`), then any cached bytecode of a
    listed module (:func:`check_cached_bytecode`). Returns ``{path: bytes}`` of the listed
    files (``{path: size}`` when ``keep`` is false)."""
    cached = check_listing(files, manifest)
    modules = {module for module, _, _ in cached.values()}
    contents = verify_files(files, manifest, keep=True if keep else modules)
    for rel, (module, tag, optimization) in sorted(cached.items()):
        check_cached_bytecode(files, rel, module, contents[module], tag, optimization)
    if not keep:
        contents.update((module, len(contents[module])) for module in modules)
    return contents


# <folder>/__pycache__/<name>.<cache tag>[.opt-<level>].pyc: Python's cached bytecode of
# <folder>/<name>.py (importlib.util.cache_from_source)
_CACHED_BYTECODE = re.compile(r"(?P<folder>(?:[^/]+/)*)__pycache__/(?P<name>[^./]+)"
                              r"\.(?P<tag>[^./]+)(?:\.opt-(?P<level>[12]))?\.pyc\Z")


def check_listing(files, manifest) -> dict:
    """Refuse any entry of the artifact that the manifest does not list, except the cached
    bytecode Python's import system writes for a listed module (an artifact's runner may be
    imported): those are returned as ``{pyc path: (module path, cache tag, optimization
    level)}``, for :func:`check_cached_bytecode` to check once the module is verified."""
    allowed = set(manifest["files"]) | {MANIFEST, SIGNATURE}
    for rel in manifest["files"]:   # the folders holding listed files (zip folder entries)
        parts = rel.split("/")
        allowed.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    cached = {}
    for rel in sorted(files.entries()):
        if rel in allowed:
            continue
        match = _CACHED_BYTECODE.match(rel)
        module = match and f"{match['folder']}{match['name']}.py"
        if module in manifest["files"]:
            cached[rel] = (module, match["tag"], int(match["level"] or 0))
            continue
        raise ArtifactIntegrityError(f"{rel!r} is in the artifact but not listed in its "
                                     f"manifest")
    return cached


def check_cached_bytecode(files, rel, module, source, tag, optimization) -> None:
    """Accept the ``.pyc`` file ``rel`` only if it is the compilation of ``source``, the
    verified bytes of ``module``, by this Python (``tag``: the cache tag in its name), as its
    import system writes it for the module at its path here: running it then runs exactly
    the verified source. Anything else is refused, since the import system would run it.

    A .pyc is the marshalled code object after a 16-byte header. Marshal output varies with
    the state of the interpreter that wrote it (whether a one-character string was interned
    yet), so the comparison is made in two steps: its bytes must equal those of the
    compilation here except in the interned flags of strings, and only then are both
    unmarshalled (marshal is not meant for hostile bytes) and marshalled again here, which
    must give equal bytes."""
    refused = (f"{rel!r} is not the compilation of the verified {module!r} (Python's import "
               f"system would run it instead); delete that __pycache__ folder")
    if tag != sys.implementation.cache_tag:
        raise ArtifactIntegrityError(f"{rel!r} is bytecode of another Python ({tag}), which "
                                     f"{sys.implementation.cache_tag} cannot check; delete that "
                                     f"__pycache__ folder")
    path = files.display_path(module)
    try:
        expected = {_marshalled(compile(source, name, "exec", dont_inherit=True,
                                        optimize=optimization))
                    for name in {path, os.path.realpath(path)}}
    except (SyntaxError, ValueError):
        raise ArtifactIntegrityError(refused) from None
    size = files.size(rel)
    expected = [body for body in expected if len(body) + 16 == size]
    if not expected:
        raise ArtifactIntegrityError(refused)
    data = files.read(rel, size)
    header, body = data[:16], data[16:]
    if header[:4] != importlib.util.MAGIC_NUMBER or \
            int.from_bytes(header[4:8], "little") not in (0, 1, 3):   # timestamp, hash-based
        raise ArtifactIntegrityError(refused)
    for candidate in expected:
        if _equal_but_interning(candidate, body):
            try:
                if _marshalled(marshal.loads(body)) == _marshalled(marshal.loads(candidate)):
                    return
            except (ValueError, EOFError, TypeError):
                break
    raise ArtifactIntegrityError(refused)


def _marshalled(code) -> bytes:
    """``code`` marshalled as the import system marshals a module's code: while the code
    object has another reference (marshal then records it as shared)."""
    held = code
    return marshal.dumps(held)


# marshal type codes of a string, interned or not: (interned, plain) in both directions
_INTERNED_PAIRS = {ord(a): ord(b) for a, b in ("tu", "ut", "Zz", "zZ", "Aa", "aA")}


def _equal_but_interning(expected: bytes, data: bytes) -> bool:
    """Whether ``data`` equals ``expected`` but for bytes that turn the type code of a string
    into its interned or plain twin (the shared-object flag, 0x80, kept)."""
    if len(expected) != len(data):
        return False
    if expected == data:
        return True
    ours, theirs = np.frombuffer(expected, np.uint8), np.frombuffer(data, np.uint8)
    return all(_INTERNED_PAIRS.get(int(ours[i]) & 0x7F) == int(theirs[i]) & 0x7F
               and ours[i] & 0x80 == theirs[i] & 0x80 for i in np.flatnonzero(ours != theirs))


def verify_files(files, manifest, keep=True) -> dict:
    """Check every listed file's declared size (before reading it) and sha256 (reading in
    chunks); returns ``{path: bytes}``, or with ``keep`` false ``{path: size}`` (with a set
    as ``keep``: the bytes of those paths, the size of the others)."""
    contents = {}
    sizes = manifest["sizes"]
    for rel, digest in manifest["files"].items():
        actual, declared = files.size(rel), sizes[rel]
        if actual != declared:
            raise ArtifactIntegrityError(f"file {rel!r} was modified after the artifact was "
                                         f"saved (it has {actual} bytes, the manifest declares "
                                         f"{declared})")
        data = files.read(rel, declared)
        if sha256_hex(data) != digest.lower():
            raise ArtifactIntegrityError(
                f"file {rel!r} was modified after the artifact was saved (sha256 mismatch)")
        contents[rel] = data if keep is True or (keep and rel in keep) else len(data)
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
    except (ValueError, OSError, EOFError) as exc:
        raise ArtifactIntegrityError(f"{what} is not a plain .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise ArtifactIntegrityError(f"{what} is not a plain .npy array")
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        # .npy keeps no extension dtype's name: symgrad's one 2-byte extension dtype is
        # ml_dtypes' bfloat16 (imported by the modules that use it)
        array = array.view(np.dtype("bfloat16"))
    array.flags.writeable = False
    return array


def exec_module(source: bytes, filename: str, module_name: str,
                package: str | None = None) -> types.ModuleType:
    """Execute verified module ``source`` (never a cached .pyc) as a fresh module whose
    relative imports resolve in ``package``; its lines are registered with ``linecache`` so
    tracebacks show them."""
    try:
        text = source.decode("utf-8")
        code = compile(text, filename, "exec", dont_inherit=True)
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise ArtifactIntegrityError(f"module {filename!r} is not valid Python source "
                                     f"({type(exc).__name__}: {exc})") from None
    module = types.ModuleType(module_name)
    module.__file__ = filename
    module.__package__ = package
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(code, module.__dict__)  # noqa: S102  (verified bytes; see the module docstring)
    return module


def load_package(contents, imports, files, source) -> str:
    """Make the modules the generated module imports relatively (``imports``: name -> file,
    such as ``{"row_pool": "numpy/row_pool.py"}``) members of a package of their own, named
    by the hash of their sources and the module's; returns the package name."""
    digest = hashlib.sha256(source)
    for name, rel in sorted(imports.items()):
        digest.update(f"{name}={sha256_hex(listed(contents, rel, 'module'))}".encode())
    package_name = "symgrad_artifact_" + digest.hexdigest()[:16]
    package = types.ModuleType(package_name)
    package.__path__ = []
    sys.modules[package_name] = package
    for name, rel in sorted(imports.items()):
        member = exec_module(listed(contents, rel, "module"), files.display_path(rel),
                             f"{package_name}.{name}", package_name)
        sys.modules[member.__name__] = member
        setattr(package, name, member)
    return package_name


def _load_module(contents, manifest, files, entry):
    """The module of ``entry`` (``{"module": path, "function": name, "imports": ...}``) with
    ``CONSTANTS`` filled, and its entry function."""
    rel = safe_relpath(entry["module"])
    source = listed(contents, rel, "module")
    package = load_package(contents, entry.get("imports", {}), files, source)
    module = exec_module(source, files.display_path(rel), f"{package}.program", package)
    constants = getattr(module, "CONSTANTS", None)
    function = getattr(module, entry["function"], None)
    if not isinstance(constants, dict) or not callable(function):
        raise ArtifactIntegrityError(f"module {rel!r} does not define a CONSTANTS dict and an "
                                     f"entry function {entry['function']!r}")
    for name, const_rel in manifest.get("constants", {}).items():
        constants[name] = load_array(listed(contents, const_rel, "constant"), repr(const_rel))
    return module, function


def load_numpy_entry(contents, manifest, files):
    """The artifact's generated NumPy module with ``CONSTANTS`` filled, and its entry
    function. Call only after :func:`verify_artifact`."""
    return _load_module(contents, manifest, files, manifest["entry_points"]["numpy"])


def _bind_library(module, data: bytes) -> None:
    """Give ``module`` the verified bytes of its shared library (its ``bind_library`` opens
    a private temporary copy with ctypes; the copy is removed once loaded)."""
    handle, path = tempfile.mkstemp(suffix=".so")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        module.bind_library(path)
    finally:
        os.unlink(path)


def cpu_features() -> list | None:
    """This CPU's instruction-set features, sorted, from ``/proc/cpuinfo`` (``flags`` on x86,
    ``Features`` on ARM); None where it does not say. (The C backend records the same list
    with the same reader in ``symgrad.backends.c_backend.compiler``; this file cannot import
    symgrad.)"""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return sorted(set(value.split()))
    except OSError:
        pass
    return None


def built_for_this_machine(entry) -> bool:
    """Whether the library of a native entry can run here: built for this machine type and,
    when built for the CPU it was compiled on (``-march=native``: ``cpu_features``), on a CPU
    with every one of those features. Loading a library that uses instructions this CPU
    lacks succeeds, and its first call kills the process; so the runner checks first."""
    if entry.get("machine") != platform.machine():
        return False
    wanted = entry.get("cpu_features")
    if not wanted:
        return True
    have = cpu_features()
    return have is not None and set(wanted) <= set(have)


def load_entry(contents, manifest, files):
    """The module the artifact runs and its entry function: its *native* entry (a host
    module calling a shared library of the artifact through ctypes: a program of the C
    backend; no compiler needed) when its library was built for this machine
    (:func:`built_for_this_machine`) and loads, else its NumPy module. Call only after
    :func:`verify_artifact`."""
    for entry in manifest["entry_points"].values():
        if isinstance(entry, dict) and isinstance(entry.get("library"), str):
            if not built_for_this_machine(entry):
                break
            library = listed(contents, entry["library"], "library")
            module, function = _load_module(contents, manifest, files, entry)
            try:
                _bind_library(module, library)
            except OSError:   # built for another machine: the NumPy module computes the same
                break
            return module, function
    return load_numpy_entry(contents, manifest, files)


# --- feeds -----------------------------------------------------------------------------------
# One feed check for symgrad's compiled programs, sg.load and the standalone runner (see
# FeedError above). The specs are named tuples, not dataclasses: a dataclass needs its module
# in sys.modules, which this file's is not when it is executed from an artifact.
class InputSpec(typing.NamedTuple):
    """One input of a program's signature (the manifest's ``inputs``)."""

    name: str
    shape: tuple          # ints and None for unknown dims
    dtype: np.dtype
    kind: str             # "data" or "parameter"
    required: bool        # the fetches or the updates need it (a parameter never: it has init)
    updates_only: bool = False   # required, but only the updates (state outputs) need it
    dims: tuple | None = None    # the symbolic signature: ints, names, "?0" (None: = shape)

    def to_json(self):
        """The manifest's form; ``updates_only`` is written only where it is true, ``dims``
        where a dim is symbolic."""
        obj = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.name,
               "kind": self.kind, "required": self.required}
        if self.updates_only:
            obj["updates_only"] = True
        return _with_dims(obj, self.dims)

    @classmethod
    def from_json(cls, obj):
        """The spec of a manifest entry; ValueError, TypeError or KeyError if malformed."""
        shape = _shape_from_json(obj["shape"])
        spec = cls(obj["name"], shape, np.dtype(obj["dtype"]), obj["kind"], obj["required"],
                   obj.get("updates_only", False), _dims_from_json(obj, shape))
        if not isinstance(spec.name, str) or spec.kind not in ("data", "parameter") or \
                not isinstance(spec.required, bool) or not isinstance(spec.updates_only, bool):
            raise ValueError(f"input {spec.name!r} is malformed")
        return spec


class OutputSpec(typing.NamedTuple):
    """One fetch of a program (the manifest's ``outputs``)."""

    name: str | None
    shape: tuple
    dtype: np.dtype
    dims: tuple | None = None    # ints, names, "?0" and expressions ("batch*784")

    def to_json(self):
        return _with_dims({"name": self.name, "shape": list(self.shape),
                           "dtype": self.dtype.name}, self.dims)

    @classmethod
    def from_json(cls, obj):
        shape = _shape_from_json(obj["shape"])
        return cls(obj["name"], shape, np.dtype(obj["dtype"]), _dims_from_json(obj, shape))


def _with_dims(obj, dims) -> dict:
    if dims is not None and any(type(d) is str for d in dims):
        obj["dims"] = list(dims)
    return obj


def _dims_from_json(obj, shape):
    """The ``dims`` of a manifest entry: a str exactly where the shape has None."""
    dims = obj.get("dims")
    if dims is None:
        return None
    if not isinstance(dims, list) or len(dims) != len(shape) or any(
            (type(d) is str) != (s is None) or type(d) not in (int, str) or
            type(d) is int and d != s for d, s in zip(dims, shape)):
        raise ValueError(f"invalid dims {dims!r} for shape {list(shape)!r}")
    return tuple(dims)


def _shape_from_json(shape) -> tuple:
    if not isinstance(shape, list) or any(
            d is not None and (type(d) is not int or d < 0) for d in shape):
        raise ValueError(f"invalid shape {shape!r}")
    return tuple(shape)


def signature_from_manifest(manifest) -> tuple:
    """``(inputs, outputs)``: the manifest's signature as InputSpecs and OutputSpecs."""
    try:
        return ([InputSpec.from_json(obj) for obj in manifest["inputs"]],
                [OutputSpec.from_json(obj) for obj in manifest["outputs"]])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactIntegrityError(f"malformed signature in manifest.json ({exc})") from None


def format_shape(shape) -> str:
    """``[?, 3]`` (symgrad.ir.value's format, which this file cannot import)."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


_KIND_NAMES = {"f": "floating", "i": "integer", "b": "bool"}


def _dtype_kind(dtype) -> str:
    """The kind a feed is checked by: NumPy's, with ``"f"`` for bfloat16 (ml_dtypes') and
    ``"i"`` for unsigned integers too."""
    if dtype.kind == "V" and dtype.name == "bfloat16":
        return "f"
    return "i" if dtype.kind == "u" else dtype.kind


def _lossless_python(expected_kind, got_kind) -> bool:
    """Python ints are accepted where floats are expected, and bools where numbers are."""
    return (expected_kind == "f" and got_kind in "ib") or (expected_kind == "i" and got_kind == "b")


def check_feed(spec: InputSpec, value) -> np.ndarray:
    """``value`` as an array of the input's dtype, or a clear error naming the input: a
    FeedTypeError for a value that is no numeric array or of the wrong dtype kind, a FeedError
    for a wrong rank or size of a known dim."""
    on_device = hasattr(value, "__cuda_array_interface__")   # CuPy & co.: checked in place
    if on_device:
        _check_device_array(spec, value)
    is_array = on_device or isinstance(value, (np.ndarray, np.generic))
    if not is_array:
        try:
            value = np.asarray(value)
        except Exception as exc:
            raise FeedTypeError(f"input {spec.name!r}: cannot convert {type(value).__name__} "
                                f"to an array ({exc})") from None
        if value.dtype.kind not in "biuf":
            raise FeedTypeError(f"input {spec.name!r}: expected {spec.dtype} data, got "
                                f"{type(value).__name__} of dtype {value.dtype}")
    array = value if on_device else np.asarray(value)
    expected_kind = _dtype_kind(spec.dtype)
    got_kind = _dtype_kind(array.dtype)
    if got_kind != expected_kind and (is_array or not _lossless_python(expected_kind, got_kind)):
        raise FeedTypeError(
            f"input {spec.name!r}: expected {_KIND_NAMES.get(expected_kind, expected_kind)} "
            f"data ({spec.dtype}), got {array.dtype}")
    if array.ndim != len(spec.shape):
        raise FeedError(f"input {spec.name!r}: expected rank {len(spec.shape)} with shape "
                        f"{format_shape(spec.shape)}, got shape {format_shape(array.shape)}")
    for axis, (want, got) in enumerate(zip(spec.shape, array.shape)):
        if want is not None and want != got:
            raise FeedError(f"input {spec.name!r}: dim {axis} must be {want} (declared shape "
                            f"{format_shape(spec.shape)}), got shape {format_shape(array.shape)}")
    if array.dtype != spec.dtype:
        array = array.astype(spec.dtype)
    return array


def _check_device_array(spec, value):
    """A feed claiming ``__cuda_array_interface__`` must be an array object (dtype, shape,
    ndim, astype), as CuPy's are; anything else is a FeedTypeError, not an AttributeError."""
    try:
        dtype = np.dtype(value.dtype)
        shape = tuple(value.shape)
        fine = (value.ndim == len(shape) and callable(value.astype)
                and all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape))
    except Exception:   # any attribute missing or malformed
        dtype, fine = None, False
    if not fine or dtype.kind not in "biuf":
        raise FeedTypeError(f"input {spec.name!r}: {type(value).__name__} has "
                            f"__cuda_array_interface__ but is not a usable device array "
                            f"(needs a numeric dtype, shape, ndim and astype); pass a CuPy or "
                            f"NumPy array")


def bind_feeds(signature, args, kwargs, updates=()) -> dict:
    """Map positional (``data`` order) and keyword feeds to checked arrays by input name.
    ``updates``: the names of the parameters the program assigns (for the error on a missing
    input that only the updates need)."""
    data_specs = [s for s in signature if s.kind == "data"]
    by_name = {s.name: s for s in signature}
    if len(args) > len(data_specs):
        raise TypeError(f"the program takes {len(data_specs)} positional inputs "
                        f"({', '.join(s.name for s in data_specs)}), got {len(args)}")
    feeds = {}
    for spec, value in zip(data_specs, args):
        feeds[spec.name] = value
    for name, value in kwargs.items():
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise FeedError(f"unknown input {name!r}; the program's inputs are: {known}")
        if name in feeds:
            raise TypeError(f"input {name!r} was given both by position and by name")
        feeds[name] = value
    missing = [s for s in signature if s.required and s.name not in feeds]
    if missing:
        raise FeedError(_missing_feeds(missing, updates))
    return {name: check_feed(by_name[name], value) for name, value in feeds.items()}


def _missing_feeds(missing, updates) -> str:
    """The message for the required inputs ``missing`` (InputSpecs); for those only the
    updates need, it names the updated parameters and ``updates=False``."""
    message = ("missing feed for input" + ("s " if len(missing) > 1 else " ")
               + ", ".join(repr(s.name) for s in missing))
    only = [s.name for s in missing if s.updates_only]
    if not only:
        return message
    updates = list(updates)
    shown = ", ".join(map(repr, updates[:4])) + (f" and {len(updates) - 4} more"
                                                 if len(updates) > 4 else "")
    return (f"{message}. Only the program's updates need "
            f"{', '.join(map(repr, only))}: the program assigns {shown or 'parameters'} "
            f"(optimizer updates, sg.assign), and every call applies them whatever it "
            f"fetches. To compute the fetches without updating the state (evaluation, "
            f"inference), compile with sg.compile(..., updates=False); to train, feed "
            f"{'it' if len(only) == 1 else 'them'}")


# --- symbolic dims ---------------------------------------------------------------------------
# One binding of a program's symbolic dims for compiled programs, sg.load and the runner (see
# symgrad.runtime.dims). A dim is written as symgrad.ir.dims.dim_to_json writes it: an int,
# {"name": "batch"}, {"anonymous": 0}, {"floordiv": [dim, k]} or {"sum": [[[dim...], c]...]};
# a symbol is known here by its text ("batch", "?0").
MAX_BOUND_SHAPES = 256   # distinct sets of fed shapes remembered as bound


def dim_size(dim, sizes):
    """The int ``dim`` (JSON form) is when each symbol has its size in ``sizes`` (by text);
    None when one has none. Recursion is over the expression's nesting only."""
    if type(dim) is int:
        return dim
    (kind, body), = dim.items()
    if kind == "name":
        return sizes.get(body)
    if kind == "anonymous":
        return sizes.get(f"?{body}")
    if kind == "floordiv":
        size = dim_size(body[0], sizes)
        return None if size is None else size // body[1]
    total = 0
    for atoms, coefficient in body:
        term = coefficient
        for atom in atoms:
            size = dim_size(atom, sizes)
            if size is None:
                return None
            term *= size
        total += term
    return total


class DimBinder:
    """``binder(feeds) -> {symbol text: size}``: binds every symbolic dim of the fed inputs
    once and checks what the program's ops assumed of them, before anything runs.

    ``inputs``: ``(input name, dims)`` with each dim an int or a symbol's text (``"batch"``,
    ``"?0"``); ``checks``: dicts ``left``, ``right`` (dims in JSON form, which must be equal),
    ``left_text``, ``right_text`` (how they print), ``op`` and ``loc`` (the op that assumed it
    and the line that built it, or None). A symbol fed two sizes, or a check that fails, is a
    FeedError. Each distinct set of fed shapes is bound once."""

    def __init__(self, inputs, checks):
        self.inputs = [(name, list(dims)) for name, dims in inputs]
        self.checks = list(checks)
        self.bound = {}

    def to_json(self) -> dict:
        return {"inputs": [[name, dims] for name, dims in self.inputs], "checks": self.checks}

    @classmethod
    def from_json(cls, obj):
        """The binder ``to_json`` wrote; a ValueError if malformed."""
        try:
            inputs = [(name, dims) for name, dims in obj["inputs"]]
            checks = list(obj["checks"])
            for name, dims in inputs:
                if not isinstance(name, str) or any(type(d) not in (int, str) for d in dims):
                    raise ValueError(f"input {name!r}")
            for check in checks:
                dim_size(check["left"], {}), dim_size(check["right"], {})
                if not all(isinstance(check[k], str) for k in ("left_text", "right_text", "op")):
                    raise ValueError("a check's texts")
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ValueError(f"malformed dims binding ({exc})") from None
        return cls(inputs, checks)

    def __call__(self, feeds) -> dict:
        key = tuple(getattr(feeds.get(name), "shape", None) for name, _ in self.inputs)
        sizes = self.bound.get(key)
        if sizes is None:
            sizes = self._bind(key)
            if len(self.bound) >= MAX_BOUND_SHAPES:
                self.bound.clear()
            self.bound[key] = sizes
        return sizes

    def _bind(self, shapes) -> dict:
        sizes, source = {}, {}
        for (name, dims), shape in zip(self.inputs, shapes):
            if shape is None or len(shape) != len(dims):
                continue
            for dim, size in zip(dims, shape):
                if type(dim) is not str:
                    continue
                size = int(size)
                if dim in sizes and sizes[dim] != size:
                    raise FeedError(f"dim {dim!r} is {size} in {name} but {sizes[dim]} in "
                                    f"{source[dim]}")
                sizes.setdefault(dim, size)
                source.setdefault(dim, name)
        for check in self.checks:
            left, right = dim_size(check["left"], sizes), dim_size(check["right"], sizes)
            if left is not None and right is not None and left != right:
                raise FeedError(_failed_check(check, left, right, source))
        return sizes


def binder_of(contents):
    """The DimBinder that the artifact's verified ``program.json`` records (None when the
    program has no symbolic dims); an ArtifactIntegrityError if it is malformed."""
    try:
        document = json.loads(listed(contents, PROGRAM_FILE, "program"))
        obj = document.get("dim_binding") if isinstance(document, dict) else None
        return None if obj is None else DimBinder.from_json(obj)
    except (ValueError, RecursionError) as exc:
        raise ArtifactIntegrityError(f"program.json: {exc}") from None


def _failed_check(check, left, right, source) -> str:
    where = f" (built at {check['loc']})" if check.get("loc") else ""

    def shown(text, size):
        return f"dim {text!r} ({size} in {source[text]})" if text in source else \
            f"dim {text!r} (= {size})"

    sides = [(check["left"], check["left_text"], left), (check["right"], check["right_text"],
                                                        right)]
    sides.sort(key=lambda side: type(side[0]) is int)
    (_, text, size), (other, other_text, other_size) = sides
    need = f"to be {other_size}" if type(other) is int else \
        f"and {shown(other_text, other_size)} to be equal"
    return (f"the fed shapes do not fit the program: op {check['op']}{where} needs "
            f"{shown(text, size)} {need} (a dim unknown when the program was built is never "
            f"broadcast)")


# --- program state ---------------------------------------------------------------------------
def _owner(array):
    """The array that owns ``array``'s memory (its ``.base`` chain followed to the end)."""
    while True:
        base = getattr(array, "base", None)
        if base is None:
            return array
        array = base


class ProgramState(Mapping):
    """The values of a program's parameters between calls: a mapping from parameter name to
    array (``fn.state``), which the program reads for every parameter not fed and which its
    assigns update after each successful call.

    ``state[name]`` returns the current array (read-only: the state changes by calls and by
    ``state[name] = value``, which stores a checked copy, or :meth:`update`). Arrays that a
    call writes in place are private buffers of the state: a buffer becomes the next call's
    output buffer again only while no one outside has seen it, so an array the caller was
    given (by ``state[name]``, or as a fetch) never changes afterwards.
    """

    def __init__(self):
        self._arrays = {}      # name -> current value
        self._checks = {}      # name -> check(value) -> array of the parameter's type
        self._private = set()  # names whose array is a buffer of ours that no one else holds
        self._spares = {}      # name -> a private buffer the next call may write into
        self.lock = threading.RLock()

    def add(self, name, value, check):
        """Hold parameter ``name`` starting from ``value`` (kept as it is: a read-only array);
        ``check(value)`` turns what ``state[name] = value`` is given into an array of the
        parameter's type, or raises."""
        self._arrays[name] = value
        self._checks[name] = check

    def __getitem__(self, name):
        array = self._arrays[name]
        if name in self._private:     # seen outside from now on: never written again
            self._private.discard(name)
            array.flags.writeable = False
        return array

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    def __contains__(self, name):
        return name in self._arrays

    def __setitem__(self, name, value):
        if name not in self._checks:
            raise KeyError(f"the state has no parameter {name!r}; it holds: "
                           f"{', '.join(self._arrays) or 'none'}")
        array = self._checks[name](value).copy()
        with self.lock:
            self._replace(name, array, private=isinstance(array, np.ndarray))

    def update(self, values=(), **more):
        """Set several parameters (``state[name] = value`` for each)."""
        for name, value in dict(values, **more).items():
            self[name] = value

    def __repr__(self):
        shown = ", ".join(f"{name}: {getattr(a, 'dtype', '?')}{list(getattr(a, 'shape', ()))}"
                          for name, a in self._arrays.items())
        return f"<ProgramState {{{shown}}}>"

    # --- what a call uses ---------------------------------------------------------------------
    def buffers(self, shapes, overwrites=(), empty=np.empty) -> dict:
        """An output buffer for each name of ``shapes`` (name -> (shape, dtype)): for a name
        of ``overwrites`` whose current array is private, that array itself (the call
        updates it in place); else a spare private buffer, else a new one."""
        arrays, private = self._arrays, self._private
        return {name: arrays[name] if name in private and name in overwrites
                else self._spares.pop(name) if name in self._spares
                else empty(shape, dtype) for name, (shape, dtype) in shapes.items()}

    def give_back(self, buffers) -> None:
        """Keep the output buffers of a call that failed (their contents do not matter; a
        parameter's own array given to be overwritten stays what it is)."""
        for name, buffer in buffers.items():
            if buffer is not self._arrays.get(name):
                self._spares.setdefault(name, buffer)

    def commit(self, names, values, outputs, feeds, buffers) -> None:
        """After a successful call: parameter ``names[i]`` now holds ``values[i]``.
        ``outputs`` are the arrays the caller gets, ``feeds`` what it fed, ``buffers`` the
        output buffers it was given. A new value is private only if it is the buffer given
        for its name and nothing else reaches it; one that is (a view of) a fed array is
        copied. An old private value no longer reachable becomes its name's spare buffer; a
        private array that an output reaches is seen (never written again)."""
        owners = [id(_owner(v)) for v in values]
        used = set(owners)
        reachable = {id(_owner(a)) for a in outputs}
        for name in [n for n in self._private if id(self._arrays[n]) in reachable]:
            self[name]   # a fetch of a parameter this call does not assign: seen from now on
        still_held = reachable | used
        shared = collections.Counter(owners) if len(used) < len(owners) else None
        fed = None
        self.give_back({n: b for n, b in buffers.items() if id(b) not in used})
        for name, value, owner in zip(names, values, owners):
            private = value is buffers.get(name) and owner not in reachable and (
                shared is None or shared[owner] == 1)
            if not private:
                if fed is None:
                    fed = {id(_owner(a)) for a in feeds.values()}
                if owner in fed:   # never keep a reference to the caller's array
                    value, private = value.copy(), isinstance(value, np.ndarray)
            self._replace(name, value, private, retire=id(self._arrays[name]) not in still_held)

    def _replace(self, name, array, private, retire=True) -> None:
        """Hold ``array`` for ``name``; the old array becomes the spare buffer when it was
        private and ``retire`` (nothing reaches it any more). An array others may hold is
        made read-only (a private one is seen by no one: it stays writable for reuse)."""
        old = self._arrays[name]
        if retire and name in self._private and old is not array:
            self._spares.setdefault(name, old)
        self._arrays[name] = array
        if private:
            self._private.add(name)
        else:
            self._private.discard(name)
            if isinstance(array, np.ndarray):
                array.flags.writeable = False


class StatefulCall:
    """One program run against a :class:`ProgramState`. ``reads``: the parameters the program
    reads; ``own``: name -> the program's own value of a parameter (not fed while the state
    holds exactly it); ``assigned``: the parameters whose new values the program returns after
    its ``outputs`` fetches, in order; ``in_place``: name -> (shape, dtype) of those it writes
    into an output buffer it is given; ``overwrites``: those of them whose buffer may be the
    parameter's current array (the program reads each element before writing it, and raises
    nothing after: see :mod:`symgrad.backends.host.state_buffers`)."""

    def __init__(self, state, reads, own, assigned, in_place, outputs, overwrites=()):
        self.state = state
        self.reads = list(reads)
        self.own = dict(own)
        self.assigned = list(assigned)
        self.in_place = dict(in_place)
        self.outputs = outputs
        self.overwrites = frozenset(overwrites)

    def __call__(self, run, feeds, commit=True, dims=None) -> list:
        """``run(feeds, buffers, dims)`` with the state's parameters fed (those not in
        ``feeds``; ``dims``: the binding of the symbolic dims, passed through); returns the
        fetches and, when it succeeds, updates the state (with ``commit``). A call
        that raises leaves the state as it was. Calls that update the state hold its lock;
        other calls take it only to read the state, and mark what they read as seen, so no
        update ever writes into an array a call still reads."""
        state = self.state
        if not (commit and self.assigned):
            if not self.reads:   # no parameter to read: nothing of the state's to lock
                return list(run(feeds, None, dims))[:self.outputs]
            with state.lock:
                full = self._feeds(feeds, seen=True)
            return list(run(full, None, dims))[:self.outputs]
        with state.lock:
            buffers = state.buffers(self.in_place, self.overwrites)
            try:
                results = list(run(self._feeds(feeds), buffers or None, dims))
            except BaseException:
                state.give_back(buffers)
                raise
            outputs = results[:self.outputs]
            state.commit(self.assigned, results[self.outputs:], outputs, feeds, buffers)
            return outputs

    def _feeds(self, feeds, seen=False) -> dict:
        """``feeds`` and the state's arrays of the parameters they do not give (where the
        program's own value would not do); ``seen``: read them as ``state[name]`` does."""
        arrays, own = self.state._arrays, self.own
        full = dict(feeds)
        for name in self.reads:
            if name not in feeds:
                array = self.state[name] if seen else arrays[name]
                if array is not own.get(name):
                    full[name] = array
        return full


# --- the entry points ------------------------------------------------------------------------
class Runner:
    """The artifact at ``root``, verified and ready: ``runner(*inputs, **feeds) -> list``.

    ``state`` (a :class:`ProgramState`) holds the parameters, starting from the values saved
    in the artifact; a program that assigns parameters (its module's ``STATE``) updates it
    after every successful call, so calls continue where the previous one stopped."""

    def __init__(self, root, key=None):
        files = DirectoryFiles(root)
        self.manifest = read_manifest(files, key)
        contents = verify_artifact(files, self.manifest)
        self.module, self._entry = load_entry(contents, self.manifest, files)
        # after the module ran: a bfloat16 input's dtype needs the ml_dtypes it imports
        self.inputs, outputs = signature_from_manifest(self.manifest)
        specs = {spec.name: spec for spec in self.inputs if spec.kind == "parameter"}
        own = {name: self.module.CONSTANTS[name] for name in specs
               if name in self.module.CONSTANTS}
        self.state = ProgramState()
        for name, value in own.items():
            self.state.add(name, value, lambda value, spec=specs[name]: check_feed(spec, value))
        in_place = {name: (specs[name].shape, specs[name].dtype)
                    for name in getattr(self.module, "IN_PLACE", ())}
        self._call = StatefulCall(self.state, own, own, getattr(self.module, "STATE", ()),
                                  in_place, len(outputs), getattr(self.module, "OVERWRITES", ()))
        self._dims = binder_of(contents)
        self._run = self._entry if self.manifest["format_version"] >= DIMS_FORMAT_VERSION \
            else self._run_older

    def _run_older(self, dims, buffers, **feeds):
        """The entry of an artifact older than :data:`DIMS_FORMAT_VERSION`."""
        if self._call.assigned:
            return self._entry(buffers, **feeds)
        return self._entry(**feeds)

    def _call_with(self, args, feeds, commit=True) -> list:
        """Check and bind the feeds, bind the symbolic dims, run (see :class:`StatefulCall`)."""
        feeds = bind_feeds(self.inputs, args, feeds, self._call.assigned)
        dims = self._dims(feeds) if self._dims is not None else None
        run = self._run
        return self._call(lambda fed, buffers, dims: run(dims, buffers, **fed), feeds, commit,
                          dims)

    def __call__(self, *args, **feeds) -> list:
        return self._call_with(args, feeds)

    def evaluate(self, *args, **feeds) -> list:
        """The fetches, as a call gives them, leaving the state as it is (the program's
        assigns are computed and dropped); calls of it run concurrently."""
        return self._call_with(args, feeds, commit=False)


def load(root, key=None) -> Runner:
    """Verify the artifact directory ``root`` (its signature too, with ``key``) and return
    its runner; nothing from the artifact runs before every check has passed."""
    return Runner(root, key)


_runner = None


def _own_runner() -> Runner:
    """The runner of the artifact this file belongs to (made on first use). With
    ``$SYMGRAD_ARTIFACT_KEY`` set, the artifact must be signed with that key."""
    global _runner
    if _runner is None:
        key = os.environ.get(KEY_VARIABLE) or None
        _runner = Runner(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), key)
    return _runner


def run(*args, **feeds) -> list:
    """Run the artifact this file belongs to; returns one array per fetch. A program with
    state goes on from the previous call (see :class:`Runner`)."""
    return _own_runner()(*args, **feeds)


def evaluate(*args, **feeds) -> list:
    """As :func:`run`, leaving the artifact's state as it is (see :meth:`Runner.evaluate`)."""
    return _own_runner().evaluate(*args, **feeds)


def state() -> ProgramState:
    """The parameters of the artifact this file belongs to: the values saved in it, as calls
    of :func:`run` have updated them."""
    return _own_runner().state
