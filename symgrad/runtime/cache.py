"""On-disk cache of generated modules.

A generated module is stored as ``<dir>/<prefix>_<hash>.py``: ``prefix`` is a readable name
(backend and program summary), ``hash`` the first hex digits of the sha256 cache key that the
backend computes from everything its source depends on. Files are written atomically (a
temporary file in the same directory, then ``os.replace``), so concurrent compiles never see a
half-written module. Modules are imported from their real path, so tracebacks and pdb show
the generated lines. ``SYMGRAD_DUMP=<dir>`` also copies every module compiled to that
directory, and ``SYMGRAD_LOG=output_code`` prints it to stderr.

The directory is ``options.cache_dir``, else ``$SYMGRAD_CACHE_DIR``, else ``~/.cache/symgrad``.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import marshal
import os
import re
import sys
import tempfile
import types

HASH_CHARS = 24
_module_ids = itertools.count()


def cache_dir(options=None) -> str:
    path = getattr(options, "cache_dir", None) or os.environ.get("SYMGRAD_CACHE_DIR") \
        or os.path.join(os.path.expanduser("~"), ".cache", "symgrad")
    os.makedirs(path, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def library_fingerprint() -> str:
    """sha256 of the source of every symgrad module (read once per process): a key part that
    makes any change to the code generators, passes or op emitters miss the cache."""
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


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def lookup(prefix: str, key: str, options=None) -> str | None:
    """Path of the cached module for ``key``, or None."""
    path = os.path.join(cache_dir(options), file_name(prefix, key))
    return path if os.path.exists(path) else None


def store(prefix: str, key: str, text: str, options=None) -> str:
    """Write ``text`` as the module for ``key``; returns its path."""
    path = os.path.join(cache_dir(options), file_name(prefix, key))
    write_atomic(path, text)
    return path


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


def _code(path: str):
    """The code object of the module at ``path``, from a marshalled copy kept beside it
    (``<path>.<python tag>.code``; written atomically, rebuilt when older than the source) so
    that a cache hit skips compiling the source even where Python writes no bytecode."""
    code_path = f"{path}.{sys.implementation.cache_tag}.code"
    try:
        if os.stat(code_path).st_mtime_ns >= os.stat(path).st_mtime_ns:
            with open(code_path, "rb") as stream:
                return marshal.load(stream)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = compile(read(path), path, "exec")
    directory = os.path.dirname(code_path)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".code")
    try:
        with os.fdopen(handle, "wb") as stream:
            marshal.dump(code, stream)
        os.replace(temporary, code_path)
    except OSError:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return code


def load_module(path: str, package: str | None = None):
    """Import the module at ``path`` as a fresh module object (never shared between loads,
    so each compiled program has its own ``CONSTANTS``). Its code keeps ``path`` as file
    name, so tracebacks and pdb show the generated lines. ``package`` is the package its
    relative imports resolve in."""
    module = types.ModuleType(f"symgrad_generated_{next(_module_ids)}")
    module.__file__ = path
    module.__package__ = package
    exec(_code(path), module.__dict__)  # noqa: S102  (our own generated module)
    return module


def read(path: str) -> str:
    with open(path, encoding="utf-8") as stream:
        return stream.read()
