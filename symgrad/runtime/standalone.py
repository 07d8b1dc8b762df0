"""Standalone runner of symgrad AOT artifacts. Needs only NumPy and the standard library.

symgrad copies this file into every artifact as ``numpy/standalone.py`` (the manifest's
``standalone`` entry point). Where symgrad is not installed, load an artifact with it::

    import runpy
    runner = runpy.run_path("runner.py")            # a copy of this file that you trust
    model = runner["load"]("my_artifact", key=KEY)  # key: the bytes the artifact was signed with
    outputs = model(x=x_array)                      # feeds by name (or by position)

``load`` checks, before any code of the artifact runs: the HMAC-SHA256 signature of
``manifest.json`` when a key is given (an unsigned or re-signed artifact is refused), the
format version, that the artifact holds no file the manifest does not list (a
``__pycache__`` folder included: Python's import system would run cached bytecode from it),
each file's declared size (before reading it) and sha256 (read in chunks); then it executes
the verified bytes of the generated module (never a cached ``.pyc``; the helper modules it
imports, ``entry_points.numpy.imports``, become members of a package of its own; for an
artifact of the C backend, its host module, which calls the artifact's compiled library
through ctypes, or the NumPy module where that library does not load), fills its
``CONSTANTS`` from ``constants/*.npy`` (``allow_pickle=False``) and checks each feed against
the signature (name, rank, known dims, dtype kind) before calling the module's entry function.

Trust: the artifact's own copy of this file is part of the artifact, so running it
(``runpy.run_path("my_artifact/numpy/standalone.py")["run"](x=...)``) trusts the artifact,
like unpickling does; an unsigned artifact's hashes catch corruption, not tampering. Against
tampering, sign the artifact (``fn.save(path, key=KEY)``) and load it with a copy of this
file taken from your symgrad installation, as above. ``symgrad.load`` never runs the
artifact's code at all (it regenerates the module from ``program.json``).

``symgrad.runtime.artifact`` imports the checking helpers from here, so ``symgrad.load`` and
the standalone runner enforce the same rules.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import io
import json
import linecache
import os
import platform
import sys
import tempfile
import threading
import types
from collections.abc import Mapping

import numpy as np

FORMAT_NAME = "symgrad-artifact"
FORMAT_VERSION = 3            # the newest format this runner reads
STATE_FORMAT_VERSION = 3      # artifacts of programs with state (module STATE, manifest "state")
MANIFEST = "manifest.json"
SIGNATURE = "manifest.hmac"          # hex HMAC-SHA256 of manifest.json's bytes, when signed
MAX_MANIFEST_BYTES = 64 << 20
CHUNK = 1 << 20
KEY_VARIABLE = "SYMGRAD_ARTIFACT_KEY"   # run(): the key, when the environment sets it


class ArtifactIntegrityError(ValueError):
    """The artifact is missing, modified, unsigned, malformed or of an unsupported format."""


class MissingFile(ArtifactIntegrityError):
    """A file the manifest lists (or the manifest itself) is not in the artifact."""


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
    sizes = manifest.get("sizes", {})
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
    if manifest["format_version"] >= 2 and set(sizes) != set(files):
        raise ArtifactIntegrityError("manifest.json is malformed: 'sizes' must give the size "
                                     "of every listed file")


def check_listing(files, manifest) -> None:
    """Refuse any entry of the artifact that the manifest does not list."""
    allowed = set(manifest["files"]) | {MANIFEST, SIGNATURE}
    for rel in manifest["files"]:   # the folders holding listed files (zip folder entries)
        parts = rel.split("/")
        allowed.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    for rel in sorted(files.entries()):
        if rel in allowed:
            continue
        hint = (" (Python's import system writes cached bytecode there, and would run it: load "
                "artifacts with symgrad.load or runpy.run_path, and delete that folder)"
                if "__pycache__" in rel.split("/") else "")
        raise ArtifactIntegrityError(f"{rel!r} is in the artifact but not listed in its "
                                     f"manifest{hint}")


def verify_files(files, manifest, keep=True) -> dict:
    """Check every listed file's declared size (before reading it) and sha256 (reading in
    chunks); returns ``{path: bytes}`` (``{path: size}`` when ``keep`` is false)."""
    contents = {}
    sizes = manifest.get("sizes")
    for rel, digest in manifest["files"].items():
        actual = files.size(rel)
        declared = actual if sizes is None else sizes[rel]
        if actual != declared:
            raise ArtifactIntegrityError(f"file {rel!r} was modified after the artifact was "
                                         f"saved (it has {actual} bytes, the manifest declares "
                                         f"{declared})")
        data = files.read(rel, declared)
        if sha256_hex(data) != digest.lower():
            raise ArtifactIntegrityError(
                f"file {rel!r} was modified after the artifact was saved (sha256 mismatch)")
        contents[rel] = data if keep else len(data)
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
    function. Call only after :func:`verify_files`."""
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
    if entry.get("machine") not in (None, platform.machine()):
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
    :func:`verify_files`."""
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
    missing = [spec for spec in inputs if spec["required"] and spec["name"] not in named]
    if missing:
        only = [repr(spec["name"]) for spec in missing if spec.get("updates_only")]
        raise ValueError(f"missing feed for input(s) "
                         f"{', '.join(repr(spec['name']) for spec in missing)}"
                         + (f" (only the program's updates need {', '.join(only)}, and they "
                            f"are compiled in; to evaluate without them, save a program "
                            f"compiled with sg.compile(..., updates=False))" if only else ""))
    return {name: check_feed(by_name[name], value) for name, value in named.items()}


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
    def buffers(self, shapes, empty=np.empty) -> dict:
        """An output buffer for each name of ``shapes`` (name -> (shape, dtype)): a spare
        private buffer, else a new one."""
        return {name: self._spares.pop(name, None) if name in self._spares
                else empty(shape, dtype) for name, (shape, dtype) in shapes.items()}

    def give_back(self, buffers) -> None:
        """Keep the output buffers of a call that failed (their contents do not matter)."""
        for name, buffer in buffers.items():
            self._spares.setdefault(name, buffer)

    def commit(self, names, values, outputs, feeds, buffers) -> None:
        """After a successful call: parameter ``names[i]`` now holds ``values[i]``.
        ``outputs`` are the arrays the caller gets, ``feeds`` what it fed, ``buffers`` the
        output buffers it was given. A new value is private only if it is the buffer given
        for its name and nothing else reaches it; one that is (a view of) a fed array is
        copied. An old private value no longer reachable becomes its name's spare buffer."""
        owners = [id(_owner(v)) for v in values]
        used = set(owners)
        reachable = {id(_owner(a)) for a in outputs}
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
    into an output buffer it is given."""

    def __init__(self, state, reads, own, assigned, in_place, outputs):
        self.state = state
        self.reads = list(reads)
        self.own = dict(own)
        self.assigned = list(assigned)
        self.in_place = dict(in_place)
        self.outputs = outputs

    def __call__(self, run, feeds, commit=True) -> list:
        """``run(feeds, buffers)`` with the state's parameters fed (those not in ``feeds``);
        returns the fetches and, when it succeeds, updates the state (with ``commit``). A call
        that raises leaves the state as it was. Calls that update the state hold its lock;
        other calls take it only to read the state, and mark what they read as seen, so no
        update ever writes into an array a call still reads."""
        state = self.state
        if not (commit and self.assigned):
            if not self.reads:   # no parameter to read: nothing of the state's to lock
                return list(run(feeds, None))[:self.outputs]
            with state.lock:
                full = self._feeds(feeds, seen=True)
            return list(run(full, None))[:self.outputs]
        with state.lock:
            buffers = state.buffers(self.in_place)
            try:
                results = list(run(self._feeds(feeds), buffers or None))
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
        check_listing(files, self.manifest)
        contents = verify_files(files, self.manifest)
        self.inputs = self.manifest["inputs"]
        self.module, self._entry = load_entry(contents, self.manifest, files)
        specs = {spec["name"]: spec for spec in self.inputs if spec.get("kind") == "parameter"}
        own = {name: self.module.CONSTANTS[name] for name in specs
               if name in self.module.CONSTANTS}
        self.state = ProgramState()
        for name, value in own.items():
            self.state.add(name, value, lambda value, spec=specs[name]: check_feed(spec, value))
        in_place = {name: (tuple(specs[name]["shape"]), np.dtype(specs[name]["dtype"]))
                    for name in getattr(self.module, "IN_PLACE", ())}
        self._call = StatefulCall(self.state, own, own, getattr(self.module, "STATE", ()),
                                  in_place, len(self.manifest["outputs"]))

    def _run(self, feeds, buffers):
        if self._call.assigned:
            return self._entry(buffers, **feeds)
        return self._entry(**feeds)

    def __call__(self, *args, **feeds) -> list:
        return self._call(self._run, check_feeds(self.inputs, args, feeds))

    def evaluate(self, *args, **feeds) -> list:
        """The fetches, as a call gives them, leaving the state as it is (the program's
        assigns are computed and dropped); calls of it run concurrently."""
        return self._call(self._run, check_feeds(self.inputs, args, feeds), commit=False)


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
