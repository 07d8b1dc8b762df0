"""The ``symgrad`` command line (also ``python -m symgrad``).

::

    symgrad dump FILE.py[:builder] [--backend numpy|cuda] [--ir] [--out DIR]
    symgrad compile FILE.py[:builder] -o ARTIFACT [--backend numpy]
    symgrad run ARTIFACT --input x=x.npy ... [--output out.npz]
    symgrad inspect ARTIFACT
    symgrad ops

A builder is a function of the user's file that takes no arguments and returns
``(program, fetch_list)``; its default name is ``build``. Errors go to stderr; the exit status
is 2 for usage errors, 1 for failures and 0 on success.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback

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


def cmd_compile(args):
    compiled, _ = compile_target(args.target, args.backend)
    print(compiled.save(args.output))


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


def _output_key(spec, index):
    return spec.name or f"output_{index}"


def cmd_run(args, parser):
    from .runtime.artifact import load

    feeds = _parse_inputs(parser, args.input)
    program = load(args.artifact)
    results = program(**feeds)
    keys = [_output_key(spec, i) for i, spec in enumerate(program.outputs)]
    if args.output:
        with open(args.output, "wb") as handle:
            np.savez(handle, **dict(zip(keys, results)))
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
    shape = ", ".join("?" if d is None else str(d) for d in spec["shape"])
    return f"{spec.get('name') or '-'}: {spec['dtype']}[{shape}]"


def cmd_inspect(args):
    from .runtime.artifact import inspect

    manifest, sizes = inspect(args.artifact)
    versions = ", ".join(f"{k} {v}" for k, v in manifest.get("versions", {}).items() if v)
    print(f"artifact {args.artifact} (format {manifest['format_version']}, backend "
          f"{manifest.get('backend')}; {versions})")
    print("inputs:")
    for spec in manifest["inputs"]:
        extra = "" if spec.get("required") or spec.get("kind") == "parameter" else ", unused"
        print(f"  {_format_spec(spec)}  ({spec.get('kind')}{extra})")
    print("outputs:")
    for index, spec in enumerate(manifest["outputs"]):
        print(f"  {index}. {_format_spec(spec)}")
    standalone = manifest.get("standalone", {})
    print(f"standalone entry: {standalone.get('module')}:{standalone.get('function')}")
    print("stats:")
    for key, value in manifest.get("stats", {}).items():
        print(f"  {key}: {value}")
    print("files (sha256 verified):")
    for rel, size in sorted(sizes.items()):
        print(f"  {size:>10}  {rel}")


def cmd_ops(args):
    from .autodiff.registry import show_registry

    show_registry()


# --- entry point -----------------------------------------------------------------------------
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
    comp.set_defaults(handler=cmd_compile)

    run = commands.add_parser("run", help="run an artifact on .npy inputs")
    run.add_argument("artifact")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--output", metavar="OUT.npz", help="write the outputs to an .npz")
    run.set_defaults(handler=lambda args: cmd_run(args, run))

    insp = commands.add_parser("inspect", help="show an artifact's signature, stats and files")
    insp.add_argument("artifact")
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
        print(f"symgrad: error: {exc}", file=sys.stderr)
        return 1
    return 0
