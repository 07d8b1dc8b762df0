"""symgrad: a symbolic static-graph compiler for gradient programs.

Build a program of typed Values, append its backward with ``ir_backward.grad``, compile the
whole program to fused NumPy or CUDA source, run it, read it, save it.
"""
from . import ops
from .errors import (ArtifactError, ComparisonError, DTypeError, FeedError, FeedTypeError,
                     GradError, IndexOutOfRangeError, ProgramMismatchError, PromotionWarning,
                     ScopeError, ShapeError, SymgradError,
                     VerificationError)
from .ir import Block, Operation, Program, Value, default_main_program, program_guard
from .ops import *  # noqa: F401,F403  (one front-end function per op)
from .ops import REGISTRY, Algebra, OpDef, initializers
from .runtime import CompileOptions, CompiledProgram, Executor, compile

from .version import __version__  # noqa: E402

from . import random  # noqa: E402
from . import nn  # noqa: E402
from . import optimizer  # noqa: E402
from . import autodiff  # noqa: E402
from .autodiff import ir_backward  # noqa: E402
from .autodiff.vmap import vmap  # noqa: E402
from .registry import custom_op, register_vjp, show_registry  # noqa: E402


def load(path, backend=None, key=None, check_generated=True):
    """Load an AOT artifact saved with ``CompiledProgram.save``: checks its signature (with
    ``key``), format, files and hashes, and that its generated files are what this symgrad
    generates from its ``program.json`` (``check_generated=False`` skips that comparison, for
    an artifact of another symgrad version), then runs code that symgrad generates from its
    ``program.json`` (never the artifact's own files). ``backend``: None (the one it was saved
    for; a CUDA artifact falls back to NumPy with a warning where CuPy or a GPU is missing),
    ``"numpy"``, ``"cuda"`` or ``"interpreter"``. See ``symgrad.runtime.artifact.load``."""
    from .runtime.artifact import load as _load

    return _load(path, backend=backend, key=key, check_generated=check_generated)


__all__ = [
    *ops.__all__,
    "Algebra", "ArtifactError", "Block", "ComparisonError", "CompileOptions", "CompiledProgram",
    "DTypeError", "Executor", "FeedError", "FeedTypeError", "GradError", "IndexOutOfRangeError",
    "OpDef", "Operation",
    "Program", "ProgramMismatchError", "PromotionWarning", "REGISTRY", "ScopeError", "ShapeError",
    "SymgradError", "Value",
    "VerificationError", "autodiff", "compile", "custom_op", "default_main_program",
    "initializers", "ir_backward", "load", "nn", "optimizer", "program_guard", "random",
    "register_vjp", "show_registry", "vmap",
]
