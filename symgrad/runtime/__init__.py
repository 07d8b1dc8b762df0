"""Runtime: ``compile``, ``CompiledProgram``, ``Executor``, feeds, the cache and artifacts."""
from .compile import Executor, compile
from .compiled import CompiledProgram
from .options import CompileOptions

__all__ = ["CompileOptions", "CompiledProgram", "Executor", "compile"]
