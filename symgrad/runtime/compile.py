"""``symgrad.compile`` and the Paddle-style ``Executor``: the user's entry points, checking
what they are given; :func:`~.compiled.build_compiled` does the work, and the programs made
here save themselves with :func:`~.artifact.save` (the one module that imports both: runtime's
imports run one way, compile -> artifact -> compiled)."""
from __future__ import annotations

from ..backends import get_backend
from ..errors import ProgramMismatchError
from ..ir.program import Program
from ..ir.value import Value
from ..ops.core import default_program_hint
from .artifact import save as save_artifact
from .compiled import build_compiled
from .options import CompileOptions
from .standalone import ProgramState


def normalize_fetch_list(program, fetch_list) -> list[Value]:
    if isinstance(fetch_list, (Value, str)):
        fetch_list = [fetch_list]
    if not isinstance(fetch_list, (list, tuple)):
        raise TypeError(f"fetch_list must be a Value or a list of Values, "
                        f"got {type(fetch_list).__name__}")
    fetches = []
    for index, item in enumerate(fetch_list):
        if isinstance(item, str):
            item = program.find(item)
        if not isinstance(item, Value):
            raise TypeError(f"fetch_list[{index}] must be a Value, got {type(item).__name__}")
        if item.program is not program:
            raise ProgramMismatchError(
                f"fetch_list[{index}] {item!r} belongs to program #{item.program.uid}, not to "
                f"the compiled program #{program.uid}"
                + default_program_hint(item.program, program))
        fetches.append(item)
    return fetches


def compile(program, fetch_list, backend="numpy", options=None, *, updates=True, state=None,
            **option_changes):
    """Compile ``program`` to compute ``fetch_list`` with ``backend`` ("numpy", "c", "cuda"
    or "interpreter"). Options are a :class:`CompileOptions` and/or options as keywords
    (``passes=[...]``, ``fusion=False``, ``threads=1``...): an unknown keyword is a
    ``TypeError`` that suggests the option meant (``chunksize=`` -> ``chunk_size``). The program is copied: appending more ops to it
    later does not change the compiled callable.

    State: the compiled program's ``state`` holds the parameters it reads; every call reads
    the ones not fed from it and, when ``updates`` (default), the program's assignments
    (``sg.assign``, optimizer updates) run with every call, whatever ``fetch_list`` asks for,
    and update it. ``updates=False`` compiles the fetches alone (an evaluation program that
    leaves the state as it is). ``state``: share the state of another compiled program (its
    ``fn.state``; parameters are matched by name) instead of starting from the inits."""
    if not isinstance(program, Program):
        raise TypeError(f"compile expects a symgrad.Program, got {type(program).__name__}")
    if state is not None and not isinstance(state, ProgramState):
        raise TypeError(f"compile: state must be the state of a compiled program (fn.state) "
                        f"or an Executor, got {type(state).__name__}")
    chosen = get_backend(backend)
    if options is not None and not isinstance(options, CompileOptions):
        raise TypeError(f"compile: options must be a CompileOptions, got "
                        f"{type(options).__name__}")
    options = options or CompileOptions()
    options = options.replace(**option_changes) if option_changes else options
    return build_compiled(program, normalize_fetch_list(program, fetch_list), chosen, options,
                          updates=updates, state=state, saver=save_artifact)


class Executor:
    """Paddle-style runner: ``Executor("numpy").run(prog, feed={...}, fetch_list=[...])``.
    Compiled programs are cached per (program state, fetch list). ``state`` holds the
    parameters of every program the executor runs, by name (Paddle's scope): programs that
    name a parameter alike share it, and each run updates it with the program's assigns."""

    def __init__(self, backend="numpy", **options):
        self.backend = backend
        self.options = options
        self._cache: dict = {}
        self.state = ProgramState()

    def run(self, program, feed=None, fetch_list=None, return_numpy=True):
        """Paddle's ``Executor.run``: compile ``program`` for ``fetch_list`` (once per program
        state and fetch list), run it on ``feed`` (``{name: array}``) and return the fetches
        (NumPy arrays with ``return_numpy``, else the backend's arrays)."""
        fetches = normalize_fetch_list(program, fetch_list or [])
        key = (program.uid, program.num_ops, program._next_id, tuple(id(v) for v in fetches))
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = compile(program, fetches, backend=self.backend, state=self.state,
                               **self.options)
            self._cache[key] = compiled
        results = compiled(**(feed or {}))
        return get_backend(self.backend).host_arrays(results) if return_numpy else results
