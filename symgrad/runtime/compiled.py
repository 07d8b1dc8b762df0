"""``CompiledProgram``: the callable that :func:`symgrad.compile` returns."""
from __future__ import annotations

from .feeds import OutputSpec, StepCounter, bind_feeds


class CompiledProgram:
    """A program compiled for one backend and one fetch list.

    Call it with feeds by name or positionally (in ``data`` order); it returns a **list** with
    one array per fetch. Attributes: ``source`` (the generated module, or the IR text for the
    interpreter), ``kernels`` (CUDA kernels by name), ``ir`` (the optimized program's text,
    fusion groups marked), ``stats`` (op counts before/after passes, ``fused_groups`` and
    ``single_op_groups``, ``group_functions`` written by the NumPy backend, planned peak bytes,
    ``cache_hit``), ``signature`` and ``outputs`` (input/output specs), ``program`` (the optimized
    program), ``fetches`` (the fetched Values of ``program``) and ``backend``.
    """

    def __init__(self, executable, signature, outputs, program, options, stats=None, ir=None,
                 fetches=(), dim_check=None):
        self._executable = executable
        self._dim_check = dim_check   # runtime.dims.DimCheck, or None: no unknown dims
        self.fetches = list(fetches)
        self.signature = signature
        self.outputs = outputs
        self.program = program
        self.options = options
        self.backend = executable.backend
        self.stats = dict(stats or {})
        self.stats.update(getattr(executable, "stats", {}))
        self._ir = ir
        self._steps = StepCounter(signature)

    @property
    def ir(self) -> str:
        """The optimized program's text (fusion groups marked); ``ir`` given to the
        constructor may be the text or a function returning it (called once, on first use)."""
        if callable(self._ir):
            self._ir = self._ir()
        return self._ir if self._ir is not None else str(self.program)

    @property
    def source(self) -> str:
        return self._executable.source

    @property
    def sources(self) -> dict:
        """Every generated source by file suffix (``{".c": ..., ".py": host}`` for the C
        backend); the main one is ``source``."""
        return getattr(self._executable, "sources", None) or {".py": self.source}

    @property
    def kernels(self) -> dict:
        return getattr(self._executable, "kernels", {})

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.signature if s.kind == "data"]

    def __call__(self, *args, **feeds):
        """Run with feeds by name or position; the random ops' ``rng_step`` advances after
        each call that does not feed it (:class:`~.feeds.StepCounter`)."""
        feeds = bind_feeds(self.signature, args, feeds)
        if self._dim_check is not None:
            self._dim_check(feeds)
        return self._steps.run(self._executable.run, feeds)

    def save(self, path, cubin_archs=None, key=None):
        """Write an AOT artifact at ``path`` (a directory, or a zip if the path ends in
        ``.zip``) and return the path. For CUDA programs ``cubin_archs`` (``["sm_90"]``...)
        chooses the architectures whose compiled cubins are saved beside the ``.cu`` source
        (default: the current GPU's, if there is one). ``key`` (bytes or str) signs the
        artifact (HMAC-SHA256); load it with the same key. See ``docs/aot-cli.md``."""
        from .artifact import save

        return save(self, path, cubin_archs, key)

    def __repr__(self):
        names = ", ".join(self.input_names)
        return (f"<CompiledProgram backend={self.backend} inputs=({names}) "
                f"outputs={len(self.outputs)}>")


def output_specs(fetches):
    return [OutputSpec(v.name, v.shape, v.dtype) for v in fetches]
