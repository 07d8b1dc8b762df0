"""The ``symgrad`` command line (also ``python -m symgrad``).

::

    symgrad dump FILE.py[:builder] [--backend numpy|cuda] [--ir] [--out DIR]
    symgrad compile FILE.py[:builder] -o ARTIFACT [--backend numpy] [--key-file KEY]
    symgrad run ARTIFACT --input x=x.npy ... [--output out.npz] [--backend B] [--key-file KEY]
    symgrad inspect ARTIFACT [--key-file KEY]
    symgrad ops

A builder is a function of the user's file that takes no arguments and returns
``(program, fetch_list)``; its default name is ``build``. Errors go to stderr; the exit status
is 2 for usage errors, 1 for failures and 0 on success.
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


class CLIError(Exception):
    """A failure reported as ``symgrad: error: ...`` with exit status 1."""


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
        texts = {f"{name}_{args.backend}.py": compiled.source}
        texts.update({f"{kernel}.cu": source for kernel, source in compiled.kernels.items()})
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


def _parse_inputs(parser, items):
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"--input expects NAME=FILE.npy, got {item!r}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CLIError(f"cannot read input {name!r} from {path}: {exc}") from None
    return feeds


_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def output_keys(outputs) -> list[str]:
    """A name per output for printing and for ``.npz`` members: the output's name when it is
    a plain file name (letters, digits, ``_.-``, at most 64 characters) used once, else
    ``output_<index>`` (an npz member name never comes raw from an artifact)."""
    names = [spec.name for spec in outputs]
    keys = []
    for index, name in enumerate(names):
        plain = isinstance(name, str) and _MEMBER_NAME.match(name) and names.count(name) == 1 \
            and not re.fullmatch(r"output_[0-9]+", name)
        keys.append(name if plain else f"output_{index}")
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
    results = program(**feeds)
    keys = output_keys(program.outputs)
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


def _format_spec(spec):
    shape = ", ".join("?" if d is None else str(d) for d in spec.get("shape", ()))
    return printable(f"{spec.get('name') or '-'}: {spec.get('dtype')}[{shape}]")


def _table(manifest, name) -> dict:
    value = manifest.get(name, {})
    return value if isinstance(value, dict) else {}


def cmd_inspect(args):
    from .runtime.artifact import inspect

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
    from .autodiff.registry import show_registry

    show_registry()


# --- entry point -----------------------------------------------------------------------------
KEY_HELP = "a file holding the signing key (HMAC-SHA256)"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symgrad", description="Dump, compile, run and inspect symgrad programs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = commands.add_parser("dump", help="print the generated source of a program")
    dump.add_argument("target", metavar="FILE.py[:builder]")
    dump.add_argument("--backend", choices=["numpy", "cuda"], default="numpy")
    dump.add_argument("--ir", action="store_true", help="print the optimized IR instead")
    dump.add_argument("--out", metavar="DIR", help="write one file per module / kernel")
    dump.set_defaults(handler=cmd_dump)

    comp = commands.add_parser("compile", help="compile a program into an AOT artifact")
    comp.add_argument("target", metavar="FILE.py[:builder]")
    comp.add_argument("-o", "--output", required=True, metavar="ARTIFACT",
                      help="artifact directory (or .zip)")
    comp.add_argument("--backend", choices=["numpy", "cuda", "interpreter"], default="numpy")
    comp.add_argument("--key-file", metavar="KEY", help=KEY_HELP + " to sign the artifact with")
    comp.set_defaults(handler=cmd_compile)

    run = commands.add_parser("run", help="run an artifact on .npy inputs")
    run.add_argument("artifact")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--output", metavar="OUT.npz",
                     help="write the outputs to an .npz (members named after the outputs when "
                          "their names are plain file names, else output_<index>)")
    run.add_argument("--backend", choices=["numpy", "cuda", "interpreter"], default=None,
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
