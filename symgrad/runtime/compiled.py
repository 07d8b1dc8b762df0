"""``CompiledProgram``, the callable that :func:`symgrad.compile` returns, and
:func:`build_compiled`, which makes one (for ``compile`` and for the artifact loader)."""
from __future__ import annotations

from ..errors import FeedError
from ..ir.dims import dim_text, dim_to_json
from ..ir.graph import ancestors_of, walk_ops
from ..ops.state import assignments, mark_commits
from ..passes.peak_memory import peak_bytes
from .dims import binder_for_fetches
from .feeds import (InputSpec, OutputSpec, bind_feeds, build_signature, check_feed,
                    dims_signature, feedable_sources)
from .standalone import ProgramState, StatefulCall, dim_size


def build_compiled(program, fetches, chosen, options, *, updates=True, state=None,
                   saver=None):
    """The :class:`CompiledProgram` computing ``fetches`` (Values of ``program``) with
    backend ``chosen`` (a :class:`~symgrad.backends.Backend`) and ``options`` (see
    :func:`symgrad.compile` for ``updates`` and ``state``); ``saver(compiled, path,
    cubin_archs, key)`` writes its artifact (:func:`~.artifact.save`)."""
    fetches = list(fetches)
    assigned = assignments(program) if updates else {}
    count = len(fetches)
    for_fetches, for_updates = ancestors_of(fetches), ancestors_of(assigned.values())
    fetches += assigned.values()   # the state outputs, after the user's fetches
    needed = for_fetches | for_updates
    signature = build_signature(program, feedable_sources(for_fetches),
                                feedable_sources(for_updates))
    dim_check = binder_for_fetches(program, needed)   # before passes drop what they assumed

    copy, value_map = program.clone(keep=needed)   # pruned to the fetches as it is copied
    fetches = [value_map[v] for v in fetches]
    mark_commits(copy, fetches[count:])
    parameters = list(copy.parameters)
    stats = {"ops_before": sum(1 for _ in walk_ops(op for op in program.ops if op in needed))}
    passes = options.passes if options.passes is not None else chosen.default_passes
    ir = None
    if passes is None or passes:
        from ..passes import PassOptions, optimize

        pass_options = PassOptions.of(options, chosen.fusion_policy(options))
        copy, fetches, report = optimize(copy, fetches, pass_options, passes)
        stats.update(report.stats)
        ir = lambda: report.ir  # noqa: E731  (the IR text is built when first read)
    executable = chosen.build(copy, fetches, options)
    stats.setdefault("ops_after", len(getattr(executable, "ops", copy.ops)))
    return CompiledProgram(executable, signature, output_specs(fetches[:count]), copy, options,
                           stats=stats, ir=ir, fetches=fetches, dim_check=dim_check,
                           parameters=parameters, assigned=[p.name for p in assigned],
                           state=state, saver=saver)





class CompiledProgram:
    """A program compiled for one backend and one fetch list.

    Call it with feeds by name or positionally (in ``data`` order); it returns a **list** with
    one array per fetch. Attributes: ``source`` (the generated module, or the IR text for the
    interpreter), ``kernels`` (CUDA kernels by name), ``ir`` (the optimized program's text,
    fusion groups marked), ``stats`` (op counts before/after passes, ``fused_groups`` and
    ``single_op_groups``, ``group_functions`` written by the NumPy backend, planned peak bytes,
    ``cache_hit``), ``signature`` and ``outputs`` (input/output specs), ``program`` (the optimized
    program), ``fetches`` (the fetched Values of ``program``: the user's, then the state
    outputs), ``backend``, ``state`` and ``assigned``.

    ``state`` (a :class:`~symgrad.runtime.standalone.ProgramState`, a mapping) holds the
    parameters the program reads, by name, starting from their inits: a call reads every
    parameter it is not fed from it, and after each successful call it holds the new values
    of the ``assigned`` parameters (``sg.assign``, optimizer updates). A fed parameter
    overrides the state for that call only; when the program assigns it, the state then holds
    the update computed from the fed value. A call that raises leaves the state unchanged.
    ``state[name] = array`` sets a value (a checked copy).
    """

    def __init__(self, executable, signature, outputs, program, options, stats=None, ir=None,
                 fetches=(), dim_check=None, parameters=None, assigned=(), state=None,
                 saver=None):
        self._executable = executable
        self._saver = saver           # artifact.save, given by whoever built this
        self._dim_check = dim_check   # a standalone.DimBinder, or None: no symbolic dims
        self.fetches = list(fetches)
        self.signature = signature
        self.outputs = outputs
        self.program = program
        self.options = options
        self.backend = executable.backend
        self.stats = dict(stats or {})
        self.stats.update(getattr(executable, "stats", {}))
        self._ir = ir
        self.assigned = list(assigned)
        parameters = program.parameters if parameters is None else parameters
        self.state = ProgramState() if state is None else state
        own = {p.name: p.op.attrs["init"] for p in parameters}
        for param in parameters:
            _hold(self.state, param)
        types = {p.name: (p.shape, p.dtype) for p in parameters}
        self._call = StatefulCall(self.state, [p.name for p in program.parameters], own,
                                  self.assigned,
                                  {name: types[name] for name in executable.in_place},
                                  len(outputs), getattr(executable, "overwrites", ()))

    @property
    def ir(self) -> str:
        """The optimized program's text (fusion groups marked); ``ir`` given to the
        constructor may be the text or a function returning it (called once, on first use)."""
        if callable(self._ir):
            self._ir = self._ir()
        return self._ir if self._ir is not None else str(self.program)

    @property
    def source(self) -> str:
        """The generated source, as it runs (the host module for C; the IR text for the
        interpreter)."""
        return self._executable.source

    @property
    def sources(self) -> dict:
        """Every generated source by file suffix (``{".c": ..., ".py": host}`` for the C
        backend); the main one is ``source``."""
        return getattr(self._executable, "sources", None) or {".py": self.source}

    @property
    def kernels(self) -> dict:
        """``{name: source}`` of the CUDA kernels (empty for the other backends)."""
        return getattr(self._executable, "kernels", {})

    @property
    def input_names(self) -> list[str]:
        """The ``data`` inputs' names, in positional feed order."""
        return [s.name for s in self.signature if s.kind == "data"]

    def __call__(self, *args, **feeds):
        """Run with feeds by name or position (see the class docstring for the state)."""
        feeds = bind_feeds(self.signature, args, feeds, self.assigned)
        dims = self._dim_check(feeds) if self._dim_check is not None else None
        return self._call(self._executable.run, feeds, dims=dims)

    def memory(self, **shapes) -> int:
        """The planned peak bytes of one call with inputs of ``shapes`` (``x=(32, 784)``):
        what the program's Values occupy at once at worst, loops and checkpointing included
        (the model of :mod:`symgrad.passes.peak_memory`; the caller's feeds and parameters not
        counted). Inputs whose dims are all static need no shape. A ValueError names an
        unknown input, or a Value whose size the shapes do not determine (a while loop's
        stacked values, sized by a trip count known only at run time)."""
        names = {spec.name for spec in self.signature}
        for name in shapes:
            if name not in names:
                raise ValueError(f"memory: no input named {name!r} (inputs: "
                                 f"{sorted(names)})")
        sizes = {}
        if self._dim_check is not None:
            sizes = self._dim_check({name: _Shaped(tuple(int(d) for d in shape))
                                     for name, shape in shapes.items()})

        def size_of(dim):
            size = None if dim is None else dim_size(dim_to_json(dim), sizes)
            if size is None:
                raise ValueError(f"dim {'?' if dim is None else dim_text(dim)} is unbound")
            return size

        return peak_bytes(self.program, self.fetches, size_of)

    def changed_state(self) -> dict:
        """``{name: array}`` of the state's parameters that no longer hold the program's own
        initial value (assigned by calls, or set): what a run elsewhere from the inits has
        to be fed. Reading them marks them seen (see ``state``)."""
        own = self._call.own
        with self.state.lock:
            return {name: self.state[name] for name in own
                    if self.state._arrays[name] is not own[name]}

    def save(self, path, cubin_archs=None, key=None):
        """Write an AOT artifact at ``path`` (a directory, or a zip if the path ends in
        ``.zip``) and return the path. For CUDA programs ``cubin_archs`` (``["sm_90"]``...)
        chooses the architectures whose compiled cubins are saved beside the ``.cu`` source
        (default: the current GPU's, if there is one). ``key`` (bytes or str) signs the
        artifact (HMAC-SHA256); load it with the same key. See ``docs/aot-cli.md``."""
        if self._saver is None:
            raise TypeError("this CompiledProgram was built without an artifact writer; "
                            "compile it with symgrad.compile to save it")
        return self._saver(self, path, cubin_archs, key)

    def export_c(self, path, name="program", embed_parameters=False, blas=None, native=False):
        """Write this program as a C library that needs no Python into the folder ``path``
        (``lib<name>.so``, ``lib<name>.a``, ``<name>.h``, the sources, a Makefile and
        CMakeLists.txt, ``<name>.params`` and ``manifest.json``) and return ``path``; the
        state is exported as it is now. Only for ``backend="c"``; an op the library cannot
        compute in C is refused by name. The library is built for any CPU of this machine's
        architecture, or with ``native=True`` for this machine's CPU (``-march=native``, as
        the C backend builds: the same numbers as the C backend). See ``docs/c-library.md``."""
        from .export_c import export_c

        return export_c(self, path, name, embed_parameters, blas, native)

    def __repr__(self):
        names = ", ".join(self.input_names)
        return (f"<CompiledProgram backend={self.backend} inputs=({names}) "
                f"outputs={len(self.outputs)}>")


class _Shaped:
    """A stand-in for a fed array: only its shape (what binding dims reads)."""

    def __init__(self, shape):
        self.shape = shape


def _hold(state, param) -> None:
    """Make ``state`` hold ``param``, starting from its init; a state shared with other
    programs may hold it already, with the same type."""
    spec = InputSpec(param.name, param.shape, param.dtype, "parameter", False)
    if param.name not in state:
        state.add(param.name, param.op.attrs["init"], lambda value: check_feed(spec, value))
        return
    held = state._arrays[param.name]
    if tuple(held.shape) != param.shape or held.dtype != param.dtype:
        raise FeedError(f"the shared state holds parameter {param.name!r} as "
                        f"{held.dtype}{list(held.shape)}, but this program's {param.name!r} is "
                        f"{param.type_str}; give the programs different parameter names or "
                        f"separate states")


def output_specs(fetches):
    return [OutputSpec(v.name, v.shape, v.dtype, dims_signature(v)) for v in fetches]
