"""On-disk cache of generated sources and what is built from them.

A generated file is stored as ``<dir>/<prefix>_<hash><suffix>``: ``prefix`` is a readable name
(backend and program summary), ``hash`` the first hex digits of the sha256 cache key that the
backend computes from everything its sources depend on (:func:`store_sources`). Files are written atomically (a
temporary file in the same directory, then ``os.replace``), so concurrent compiles never see a
half-written module. Modules are imported from their real path, so tracebacks and pdb show
the generated lines. ``SYMGRAD_DUMP=<dir>`` also copies every module compiled to that
directory, and ``SYMGRAD_LOG=output_code`` prints it to stderr.

Nothing in the cache is trusted blindly: a backend always generates the source first, and a
cached file is used only when it holds exactly that source (:func:`cached_source`; an edited,
truncated or corrupted file is rewritten). The compiled code kept beside it (``.code``) is
used only when its header names the sha256 of that source and of its own payload
(:func:`load_module`); otherwise the source is compiled again. A binary built from a source
(the C backend's shared libraries) is kept with a record written when it was built
(:func:`seal_binary`): its sha256 and the CPU features it needs. It is loaded only when both
check out (:func:`check_binary`); a truncated, empty, garbage, replaced or foreign binary is
reported once (a :class:`CacheWarning`) and built again, never handed to the dynamic loader.
The cache directory must still be private to the user, like ``site-packages``: whoever can
write there can also replace symgrad itself.

The directory is ``options.cache_dir``, else ``$SYMGRAD_CACHE_DIR``, else ``~/.cache/symgrad``.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import marshal
import os
import re
import sys
import tempfile
import types
import warnings

from ..ir.location import user_stacklevel

HASH_CHARS = 24
_module_ids = itertools.count()


class CacheWarning(UserWarning):
    """A file in the compile cache was damaged, foreign or made for another CPU, and is made
    again (shown once per file and problem in a process)."""


_warned: set = set()


def warn_once(what: str, problem: str) -> None:
    """Say, once per process for each ``what`` and ``problem``, that ``what`` (a cache file)
    is not used because of ``problem`` and is made again."""
    if (what, problem) not in _warned:
        _warned.add((what, problem))
        warnings.warn(f"symgrad cache: {what} {problem}; making it again", CacheWarning,
                      stacklevel=user_stacklevel())


def cache_dir(options=None) -> str:
    path = getattr(options, "cache_dir", None) or os.environ.get("SYMGRAD_CACHE_DIR") \
        or os.path.join(os.path.expanduser("~"), ".cache", "symgrad")
    os.makedirs(path, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def library_fingerprint() -> str:
    """sha256 of the source of every symgrad module (read once per process): a key part that
    makes any change to the code generators, passes or lowering tables miss the cache."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def cache_key(*parts: str) -> str:
    """sha256 (hex) of the parts, each length-prefixed so that boundaries matter, and of the
    library's own source (:func:`library_fingerprint`)."""
    parts = parts + (library_fingerprint(),)
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        digest.update(f"{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def file_name(prefix: str, key: str, suffix: str = ".py") -> str:
    prefix = re.sub(r"[^A-Za-z0-9_]", "_", prefix)[:48].strip("_") or "module"
    return f"{prefix}_{key[:HASH_CHARS]}{suffix}"


def write_atomic(path: str, data) -> None:
    """Write ``data`` (text, or bytes) to ``path`` through a temporary file in the same
    directory, so no reader ever sees it half written."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-",
                                         suffix=os.path.splitext(path)[1])
    try:
        if isinstance(data, bytes):
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
        else:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def cached_source(prefix: str, key: str, text: str, options=None,
                  suffix: str = ".py") -> tuple[str, bool]:
    """``(path, hit)``: the cache file for ``key``, made to hold exactly ``text``. ``hit`` is
    True when it already did; a file holding anything else is rewritten (never used)."""
    path = os.path.join(cache_dir(options), file_name(prefix, key, suffix))
    try:
        with open(path, "rb") as stream:
            hit = stream.read() == text.encode("utf-8")
    except OSError:
        hit = False
    if not hit:
        write_atomic(path, text)
    return path, hit


def store_sources(backend: str, prefix: str, texts: dict, options=None):
    """Cache the generated ``texts`` of one program (file suffix -> text, e.g. ``{".py":
    module}``) under one key made from all of them and the backend's name
    (:func:`cached_source`), and show each as it is compiled (:func:`dump`). Returns
    ``(key, {suffix: path}, hit)``; ``hit``: every file already held its text."""
    key = cache_key(backend, *texts.values())
    paths, hit = {}, True
    for suffix, text in texts.items():
        paths[suffix], found = cached_source(prefix, key, text, options, suffix)
        hit = hit and found
        dump(prefix, key, text, suffix)
    return key, paths, hit


def dump(prefix: str, key: str, text: str, suffix: str = ".py") -> str | None:
    """Show a generated source as it is compiled: copy it to ``$SYMGRAD_DUMP`` when that is set
    (returns the path written), and print it to stderr when ``$SYMGRAD_LOG`` (a comma-separated
    list, as PyTorch's ``TORCH_LOGS``) names ``output_code``."""
    name = file_name(prefix, key, suffix)
    if "output_code" in os.environ.get("SYMGRAD_LOG", "").replace(" ", "").split(","):
        ending = "" if text.endswith("\n") else "\n"
        sys.stderr.write(f"# ---- symgrad output_code: {name} ----\n{text}{ending}")
    directory = os.environ.get("SYMGRAD_DUMP")
    if not directory:
        return None
    path = os.path.join(directory, name)
    write_atomic(path, text)
    return path


CODE_MAGIC = b"symgrad-code-1\n"


def _verified_payload(data: bytes, source_digest: bytes) -> bytes | None:
    """The marshalled code in a ``.code`` file's ``data`` (magic, sha256 of the source, sha256
    of the payload, payload) when both digests match, else None."""
    magic, digests = len(CODE_MAGIC), len(CODE_MAGIC) + 64
    payload = data[digests:]
    if data[:magic] != CODE_MAGIC or data[magic:magic + 32] != source_digest or \
            hashlib.sha256(payload).digest() != data[magic + 32:digests]:
        return None
    return payload


def _code(path: str, source: str):
    """The code object of ``source`` (the module at ``path``), from the marshalled copy kept
    beside it (``<path>.<python tag>.code``) when its header holds the sha256 of ``source``
    and of the payload, so a cache hit skips compiling even where Python writes no bytecode;
    else compiled from ``source`` and the copy rewritten (atomically)."""
    code_path = f"{path}.{sys.implementation.cache_tag}.code"
    source_digest = hashlib.sha256(source.encode("utf-8")).digest()
    try:
        with open(code_path, "rb") as stream:
            payload = _verified_payload(stream.read(), source_digest)
        if payload is not None:
            return marshal.loads(payload)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = compile(source, path, "exec", dont_inherit=True)
    payload = marshal.dumps(code)
    try:
        write_atomic(code_path,
                     CODE_MAGIC + source_digest + hashlib.sha256(payload).digest() + payload)
    except OSError:   # a read-only cache still runs the code
        pass
    return code


def load_module(path: str, source: str, package: str | None = None):
    """Import ``source``, the module cached at ``path`` (see :func:`cached_source`), as a
    fresh module object (never shared between loads, so each compiled program has its own
    ``CONSTANTS``). Its code keeps ``path`` as file name, so tracebacks and pdb show the
    generated lines. ``package`` is the package its relative imports resolve in."""
    module = types.ModuleType(f"symgrad_generated_{next(_module_ids)}")
    module.__file__ = path
    module.__package__ = package
    exec(_code(path, source), module.__dict__)  # noqa: S102  (our own generated source)
    return module


# --- binaries: a record of what each was built as ---------------------------------------------
_checked: dict = {}   # path -> (device, inode, size, mtime, recorded sha256) last found sound


def record_path(path: str) -> str:
    """The record kept beside the binary at ``path``."""
    return path + ".json"


def _sha256_of(stream) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def seal_binary(built: str, path: str, needs) -> None:
    """Move the binary just built at ``built`` to ``path`` (atomically), with its record: its
    file name, its sha256 and ``needs``, the features (strings) a machine must have to load
    it."""
    with open(built, "rb") as stream:
        record = {"name": os.path.basename(path), "sha256": _sha256_of(stream),
                  "needs": sorted(needs)}
    write_atomic(record_path(path), json.dumps(record))
    os.replace(built, path)


def _sound_record(record, path) -> bool:
    """Whether ``record`` is a record :func:`seal_binary` writes, of the binary at ``path``."""
    return isinstance(record, dict) and set(record) == {"name", "sha256", "needs"} and \
        record["name"] == os.path.basename(path) and isinstance(record["sha256"], str) and \
        isinstance(record["needs"], list) and all(isinstance(f, str) for f in record["needs"])


def _binary_problem(path: str, have) -> str | None:
    """Why the binary at ``path`` must not be loaded on a machine with the features ``have``,
    or None. Its sha256 is computed once per version of the file in a process."""
    try:
        with open(record_path(path), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return "has no readable build record"
    if not _sound_record(record, path):
        return "has a build record that is not its own or not one symgrad writes"
    missing = sorted(set(record["needs"]) - set(have))
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6
                                          else "")
        return f"was built for another machine (this one lacks {shown})"
    with open(path, "rb") as stream:
        status = os.fstat(stream.fileno())
        stamp = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
                 record["sha256"])
        if _checked.get(path) == stamp:
            return None
        if _sha256_of(stream) != record["sha256"]:
            return ("does not match the sha256 recorded when it was built (truncated, "
                    "damaged or replaced)")
    _checked[path] = stamp
    return None


def check_binary(path: str, have) -> bool:
    """Whether the binary at ``path`` may be loaded on a machine with the features ``have``:
    it is there, its record (:func:`seal_binary`) is sound, holds its sha256 and needs
    nothing but ``have``. A binary that is there but fails is reported once
    (:func:`warn_once`) and False returned: the caller builds it again."""
    if not os.path.exists(path):
        return False
    try:
        problem = _binary_problem(path, have)
    except FileNotFoundError:   # removed since
        return False
    if problem is not None:
        warn_once(f"the cached binary {path}", problem)
    return problem is None


def discard_binary(path: str) -> None:
    """Remove the binary at ``path`` and its record from the cache, as far as it can (what
    is gone already, or cannot be removed, is no error: it is checked again before use)."""
    for name in (path, record_path(path)):
        try:
            os.unlink(name)
        except OSError:
            pass
    _checked.pop(path, None)
