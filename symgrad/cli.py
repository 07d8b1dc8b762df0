"""The ``symgrad`` command line (also ``python -m symgrad``).

::

    symgrad dump FILE.py[:builder] [--backend B] [--ir] [--out DIR]
    symgrad compile FILE.py[:builder] -o ARTIFACT [--backend B] [--key-file KEY]
    symgrad run ARTIFACT --input x=x.npy ... [--names a,b] [--output out.npz] [--backend B]
                [--key-file KEY]
    symgrad inspect ARTIFACT [--key-file KEY]
    symgrad export FILE.py[:builder] --target c-library -o DIR [--name NAME] [--embed-parameters]
                   [--blas FLAGS]
    symgrad ops
    symgrad --version

A builder is a function of the user's file that takes no arguments and returns
``(program, fetch_list)``; its default name is ``build`` (:data:`BUILDER_HELP` is the text
``--help`` shows). Errors go to stderr; the exit status is 2 for usage errors, 1 for failures
and 0 on success.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import traceback
import warnings

import numpy as np

from .version import __version__


class CLIError(Exception):
    """A failure reported as ``symgrad: error: ...`` with exit status 1."""


BUILDER_HELP = """\
FILE.py[:builder] names a Python file and a function in it (default: build).
The builder takes no arguments and returns (program, fetch_list): a symgrad.Program
and the list of Values (or Value names) to compute. The file is imported with its
own folder on sys.path. Example (model.py; `symgrad dump model.py`):

    import symgrad as sg

    def build():
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [None, 3], "float32")
            y = sg.tanh(x) * 2.0
        return prog, [y]
"""


# --- builders --------------------------------------------------------------------------------
def parse_target(target: str):
    """``"file.py:fn"`` -> ``("file.py", "fn")``; the builder defaults to ``build``."""
    path, sep, name = target.rpartition(":")
    if sep and path and name.isidentifier():
        return path, name
    return target, "build"


def _user_error(what, path):
    lines = traceback.format_exc().splitlines()
    return CLIError(f"{what} {path}:\n" + "\n".join(lines[-12:]))


def build_program(target: str):
    """Run the builder named by ``target``; returns ``(program, fetch_list, builder_name)``."""
    from .ir.program import Program

    path, name = parse_target(target)
    if not os.path.isfile(path):
        raise CLIError(f"no such file: {path}")
    module_name = "symgrad_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, os.path.abspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception:
        raise _user_error("error while importing", path) from None
    finally:
        sys.path.pop(0)
    builder = getattr(module, name, None)
    if not callable(builder):
        raise CLIError(f"{path} defines no function {name!r} (name it with FILE.py:function)")
    try:
        result = builder()
    except Exception:
        raise _user_error(f"error in {name}() of", path) from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Program)):
        raise CLIError(f"{name}() in {path} must return (program, fetch_list), "
                       f"got {type(result).__name__}")
    return result[0], result[1], name


def compile_target(target: str, backend: str):
    from .runtime.compile import compile as compile_program

    program, fetch_list, name = build_program(target)
    try:
        compiled = compile_program(program, fetch_list, backend=backend)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("symgrad.backends."):
            raise CLIError(f"the {backend} backend is not available in this installation") \
                from None
        raise
    return compiled, name


# --- commands --------------------------------------------------------------------------------
def cmd_dump(args):
    compiled, name = compile_target(args.target, args.backend)
    if args.ir:
        texts = {f"{name}.ir": compiled.ir}
    else:
        texts = {f"{name}_{args.backend}{suffix}": text
                 for suffix, text in compiled.sources.items()}
        program_cu = getattr(compiled._executable, "cuda_source", None)
        if program_cu is not None:   # the one .cu CuPy compiles: prelude and every kernel
            texts[f"{name}.cu"] = program_cu
    if args.out is None:
        for filename, text in texts.items():
            if len(texts) > 1:
                print(f"# ---- {filename} ----")
            print(text.rstrip("\n"))
        return
    os.makedirs(args.out, exist_ok=True)
    for filename, text in texts.items():
        path = os.path.join(args.out, filename)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
        print(path)


def _key(args):
    """The signing key in ``--key-file`` (its bytes, a trailing newline dropped), or None."""
    if not args.key_file:
        return None
    try:
        with open(args.key_file, "rb") as handle:
            key = handle.read().rstrip(b"\r\n")
    except OSError as exc:
        raise CLIError(f"cannot read the key file: {exc}") from None
    if not key:
        raise CLIError(f"the key file {args.key_file} is empty")
    return key


def cmd_compile(args):
    compiled, _ = compile_target(args.target, args.backend)
    print(compiled.save(args.output, key=_key(args)))


NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"


def _not_npy_message(head: bytes) -> str:
    """Why a file whose first bytes are ``head`` is not an ``.npy`` array, and the fix."""
    if head.startswith(ZIP_MAGIC):
        return ("it is a zip archive (an .npz?); --input takes one .npy array per input: "
                "save each with numpy.save('x.npy', array)")
    fix = "write arrays with numpy.save('x.npy', array)"
    if _looks_like_text(head):
        return (f"it is a text file, not a NumPy .npy array; {fix}, or convert the text with "
                f"numpy.save('x.npy', numpy.loadtxt('x.txt', dtype='float32'))")
    return f"it is not a NumPy .npy array (those start with \\x93NUMPY); {fix}"


def _looks_like_text(head: bytes) -> bool:
    """UTF-8 without NUL bytes (a character cut at the end of ``head`` allowed)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return b"\0" not in head and exc.start >= len(head) - 3
    return b"\0" not in head


def load_npy(name: str, path: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` (input ``name``); anything else is a
    :class:`CLIError` that says what the file is and how to make an ``.npy`` of it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(NPY_MAGIC))
            if not head.startswith(NPY_MAGIC):
                head += handle.read(64)
                raise CLIError(f"cannot read input {name!r} from {path}: "
                               f"{_not_npy_message(head)}")
            handle.seek(0)
            return np.load(handle, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read input {name!r} from {path}: {exc}") from None


def _parse_inputs(parser, items):
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"--input expects NAME=FILE.npy, got {item!r}")
        feeds[name] = load_npy(name, path)
    return feeds


_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def output_keys(outputs, names=None) -> list[str]:
    """One key per output, for printing and for ``.npz`` members: ``names`` (a comma-separated
    string from ``--names``) when given; else the output's name when it is a plain file name
    (letters, digits, ``_.-``, at most 64 characters) used once, else ``output_<index>`` (an
    npz member name never comes raw from an artifact)."""
    if names is None:
        given = [spec.name for spec in outputs]
        keys = []
        for index, name in enumerate(given):
            plain = isinstance(name, str) and _MEMBER_NAME.match(name) \
                and given.count(name) == 1 and not re.fullmatch(r"output_[0-9]+", name)
            keys.append(name if plain else f"output_{index}")
        return keys
    keys = [key.strip() for key in names.split(",")]
    if len(keys) != len(outputs):
        raise CLIError(f"--names gives {len(keys)} name(s) ({', '.join(keys)}) for "
                       f"{len(outputs)} output(s); give one name per output, in order")
    bad = [key for key in keys if not key.isidentifier()]
    if bad:
        raise CLIError(f"--names: {', '.join(map(repr, bad))} is not a valid name "
                       f"(letters, digits and _, not starting with a digit)")
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise CLIError(f"--names: {', '.join(map(repr, repeated))} given more than once")
    return keys


def printable(value) -> str:
    """``value`` as text safe for a terminal: control and non-ASCII characters escaped."""
    text = str(value)
    return "".join(c if c.isprintable() and c.isascii() else
                   c.encode("unicode_escape").decode("ascii") for c in text)


def cmd_run(args, parser):
    from .runtime.artifact import ArtifactFallbackWarning, load

    feeds = _parse_inputs(parser, args.input)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ArtifactFallbackWarning)
        program = load(args.artifact, backend=args.backend, key=_key(args))
    for warning in caught:
        print(f"symgrad: warning: {printable(warning.message)}", file=sys.stderr)
    keys = output_keys(program.outputs, args.names)
    results = program(**feeds)
    dims = program.bound_dims(**feeds)   # bound (and cached) by the call
    if program.assigned:
        print(printable(f"symgrad: note: the program updates its state "
                        f"({', '.join(program.assigned)}); this run started from the values "
                        f"saved in the artifact and did not write the updated values back "
                        f"(load it with symgrad.load, call it and save it to keep them)"),
              file=sys.stderr)
    if args.output:
        with open(args.output, "wb") as handle:
            np.savez(handle, **dict(zip(keys, [np.asarray(r) for r in results])))
        print(args.output)
        return
    for key, array in zip(keys, results):
        array = np.asarray(array)
        line = f"{key}: {array.dtype}{list(array.shape)}"
        if array.size and array.dtype.kind in "biuf":
            line += f"  min={array.min():.6g} max={array.max():.6g} mean={array.mean():.6g}"
        print(line)
        if array.size <= 16:
            print("  " + np.array2string(array, separator=", ").replace("\n", "\n  "))
    if dims:   # how the inputs bound the symbolic dims
        print(printable("dims: " + ", ".join(f"{name}={size}" for name, size in dims.items())))


def _format_spec(spec):
    """``name: dtype[dims]``: the symbolic signature (``[batch, 784]``) where the manifest
    records one, else the shape with ``?`` for a run-time dim."""
    dims = spec.get("dims")
    if not isinstance(dims, list):
        dims = ["?" if d is None else d for d in spec.get("shape", ())]
    shape = ", ".join(map(str, dims))
    return printable(f"{spec.get('name') or '-'}: {spec.get('dtype')}[{shape}]")


def _table(manifest, name) -> dict:
    value = manifest.get(name, {})
    return value if isinstance(value, dict) else {}


def cmd_export(args):
    compiled, _ = compile_target(args.target, "c")
    print(compiled.export_c(args.output, name=args.name, embed_parameters=args.embed_parameters,
                            blas=args.blas, native=args.native))


def inspect_export(path):
    """``symgrad inspect`` of a C library export (``symgrad export``)."""
    from .runtime.export_c import inspect_export as verified

    manifest, sizes = verified(path)
    library = _table(manifest, "library")
    versions = ", ".join(f"{k} {v}" for k, v in _table(manifest, "versions").items() if v)
    print(printable(f"C library export {path} (format {manifest.get('format_version')}, "
                    f"name {manifest.get('name')}; {versions})"))
    print(printable(f"entry: {library.get('entry')}"))
    print("inputs:")
    for spec in manifest.get("inputs", []):
        print(f"  {_format_spec(spec)}")
    print("outputs:")
    for index, spec in enumerate(manifest.get("outputs", [])):
        print(f"  {index}. {_format_spec(spec) if isinstance(spec, dict) else printable(spec)}")
    state = manifest.get("state")
    if isinstance(state, list) and state:
        print(printable(f"state (parameters each call updates): {', '.join(map(str, state))}"))
    print(printable(f"BLAS: {library.get('blas')}"))
    cpu = "this machine's CPU (-march=native)" if library.get("native") else \
        "any CPU of its architecture"
    print(printable(f"built for: {cpu}; CFLAGS {' '.join(map(str, library.get('cflags', [])))}"))
    print("files (size and sha256 verified):")
    for rel, size in sorted(sizes.items()):
        print(f"  {size:>10}  {printable(rel)}")


def cmd_inspect(args):
    from .runtime.artifact import inspect
    from .runtime.export_c import is_export

    if is_export(args.artifact):
        return inspect_export(args.artifact)
    manifest, sizes = inspect(args.artifact, key=_key(args))
    versions = ", ".join(f"{k} {v}" for k, v in _table(manifest, "versions").items() if v)
    signed = "signed, signature verified" if args.key_file else "unsigned or not checked"
    print(printable(f"artifact {args.artifact} (format {manifest['format_version']}, backend "
                    f"{manifest.get('backend')}; {versions}; {signed})"))
    print("inputs:")
    for spec in manifest["inputs"]:
        extra = "" if spec.get("required") or spec.get("kind") == "parameter" else ", unused"
        print(f"  {_format_spec(spec)}  ({printable(spec.get('kind'))}{extra})")
    print("outputs:")
    for index, spec in enumerate(manifest["outputs"]):
        print(f"  {index}. {_format_spec(spec) if isinstance(spec, dict) else printable(spec)}")
    state = manifest.get("state")
    if isinstance(state, list) and state:
        print(printable(f"state (parameters each call updates): {', '.join(map(str, state))}"))
    standalone = _table(manifest, "standalone")
    print(printable(f"standalone entry: {standalone.get('module')}:"
                    f"{standalone.get('function')}"))
    print("stats:")
    for key, value in _table(manifest, "stats").items():
        print(printable(f"  {key}: {value}"))
    print("files (size and sha256 verified):")
    for rel, size in sorted(sizes.items()):
        print(f"  {size:>10}  {printable(rel)}")


def cmd_ops(args):
    from .registry import show_registry

    show_registry()


# --- entry point -----------------------------------------------------------------------------
KEY_HELP = "a file holding the signing key (HMAC-SHA256)"


def _version_text() -> str:
    return f"symgrad {__version__} (NumPy {np.__version__}, Python {sys.version.split()[0]})"


def make_parser() -> argparse.ArgumentParser:
    text_help = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="symgrad", formatter_class=text_help,
        description="Dump, compile, run and inspect symgrad programs.", epilog=BUILDER_HELP)
    parser.add_argument("--version", action="version", version=_version_text())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from .backends import available_backends, get_backend

    backends = available_backends()
    code_generators = [name for name in backends if get_backend(name).generates_code]

    def add_target(command):
        command.add_argument("target", metavar="FILE.py[:builder]",
                             help="the file and its builder function (default: build); "
                                  "see below")

    dump = commands.add_parser("dump", help="print the generated source of a program",
                               formatter_class=text_help, epilog=BUILDER_HELP)
    add_target(dump)
    dump.add_argument("--backend", choices=code_generators, default="numpy")
    dump.add_argument("--ir", action="store_true", help="print the optimized IR instead")
    dump.add_argument("--out", metavar="DIR", help="write one file per module / kernel")
    dump.set_defaults(handler=cmd_dump)

    comp = commands.add_parser("compile", help="compile a program into an AOT artifact",
                               formatter_class=text_help, epilog=BUILDER_HELP)
    add_target(comp)
    comp.add_argument("-o", "--output", required=True, metavar="ARTIFACT",
                      help="artifact directory (or .zip)")
    comp.add_argument("--backend", choices=backends, default="numpy")
    comp.add_argument("--key-file", metavar="KEY", help=KEY_HELP + " to sign the artifact with")
    comp.set_defaults(handler=cmd_compile)

    run = commands.add_parser("run", help="run an artifact on .npy inputs")
    run.add_argument("artifact")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="feed input NAME from an .npy file (numpy.save); repeat per input")
    run.add_argument("--names", metavar="NAME[,NAME...]",
                     help="names for the outputs, one per output in order (default: the "
                          "fetched Values' names when they are plain file names, else "
                          "output_0, output_1...)")
    run.add_argument("--output", metavar="OUT.npz",
                     help="write the outputs to an .npz, keyed by output name")
    run.add_argument("--backend", choices=backends, default=None,
                     help="what runs it (default: the backend it was saved for; a CUDA "
                          "artifact falls back to NumPy, with a warning, without CuPy or a GPU)")
    run.add_argument("--key-file", metavar="KEY", help=KEY_HELP + "; the artifact must be "
                                                          "signed with it")
    run.set_defaults(handler=lambda args: cmd_run(args, run))

    insp = commands.add_parser("inspect", help="show an artifact's signature, stats and files")
    insp.add_argument("artifact")
    insp.add_argument("--key-file", metavar="KEY", help=KEY_HELP + "; the artifact must be "
                                                           "signed with it")
    insp.set_defaults(handler=cmd_inspect)

    export = commands.add_parser("export", help="export a program as a C library (no Python)",
                                 formatter_class=text_help, epilog=BUILDER_HELP)
    add_target(export)
    export.add_argument("--target", dest="export_target", choices=["c-library"], required=True,
                        help="what to export: c-library (lib<name>.so/.a, <name>.h, sources, "
                             "Makefile, parameters; docs/c-library.md)")
    export.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="the folder to write")
    export.add_argument("--name", default="program",
                        help="the C name of the library (a C identifier; default: program)")
    export.add_argument("--embed-parameters", action="store_true",
                        help="compile the parameters into the library as well")
    export.add_argument("--blas", metavar="FLAGS", default=None,
                        help="linker flags of the CBLAS to link, or 'numpy' for the OpenBLAS "
                             "NumPy bundles (default: found on this machine)")
    export.add_argument("--native", action="store_true",
                        help="build for this machine's CPU (-march=native, as the C backend "
                             "does) instead of any CPU of its architecture")
    export.set_defaults(handler=cmd_export)

    ops = commands.add_parser("ops", help="list the registered ops")
    ops.set_defaults(handler=cmd_ops)
    return parser


def main(argv=None) -> int:
    from .errors import SymgradError

    args = make_parser().parse_args(argv)
    try:
        args.handler(args)
    except BrokenPipeError:  # e.g. `symgrad ops | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (CLIError, SymgradError, OSError, ValueError, TypeError) as exc:
        # text from an artifact (file names, manifest fields) is never printed raw
        shown = printable(exc) if args.command in ("inspect", "run") else exc
        print(f"symgrad: error: {shown}", file=sys.stderr)
        return 1
    return 0
