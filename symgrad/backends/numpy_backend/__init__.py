"""The NumPy backend: one generated module per program, cached on disk and imported.

``build(program, fetches, options)`` returns a :class:`NumpyExecutable` whose ``run(feeds)``
calls the module's ``run(**feeds)``. See :mod:`.codegen` for the module contract and
:mod:`.group` for how fused groups become chunked loops.
"""
from __future__ import annotations

import concurrent.futures
import threading

import numpy as np

from ...passes import gc_paused
from ...runtime import cache
from .codegen import TEMPLATE_VERSION, generate, template_sources
from .names import sanitize

BACKEND = "numpy"


def _canonical_attr(value) -> str:
    if isinstance(value, np.ndarray):
        if value.ndim == 0:   # inlined into the source: its exact value matters
            return f"scalar<{value.dtype.str}:{value.tobytes().hex()}>"
        return f"array<{value.dtype.str}{value.shape}>"   # read from CONSTANTS at run time
    if hasattr(value, "outputs") and hasattr(value, "captures"):   # a fused body
        return "body<" + ",".join(str(v.id) for v in value.outputs) + ">"
    if isinstance(value, float):
        return f"float<{value.hex()}>"
    return repr(value)


def canonical_text(program, fetches) -> str:
    """Everything about the program that the generated source depends on, as text."""
    from ...ir.printer import format_op_head

    lines = []
    stack = [(op, 0) for op in reversed(program.ops)]
    while stack:
        op, depth = stack.pop()
        attrs = ";".join(f"{k}={_canonical_attr(v)}" for k, v in sorted(op.attrs.items()))
        results = ",".join(f"{v.id}:{v.name!r}:{v.dtype.str}{v.shape}" for v in op.results)
        head = format_op_head(op.forward_op) if op.forward_op is not None else ""
        lines.append(f"{depth}|{op.name}|{[v.id for v in op.inputs]}|{results}|{attrs}|{head}")
        for block in reversed(op.blocks):
            stack.extend((inner, depth + 1) for inner in reversed(block.ops))
    lines.append("fetch " + ",".join(str(v.id) for v in fetches))
    lines.append("params " + ",".join(repr(v.name) for v in program.parameters))
    return "\n".join(lines)


def signature_literals(program, fetches):
    """The ``INPUTS``/``OUTPUTS`` literals of the module."""
    inputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name, "kind": kind}
              for kind, values in (("data", program.inputs), ("parameter", program.parameters))
              for v in values]
    outputs = [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name} for v in fetches]
    return inputs, outputs


_shared_pool = None
_shared_pool_lock = threading.Lock()


def shared_pool() -> concurrent.futures.ThreadPoolExecutor:
    """One worker pool for every generated module of the process (its threads start only as
    chunked loops need them), so compiling many programs never piles up idle threads."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=32, thread_name_prefix="symgrad")
    return _shared_pool


class NumpyExecutable:
    """A loaded generated module: ``run(feeds_by_name) -> list of arrays``; ``source``,
    ``module``, ``constants`` (name -> array, the module's ``CONSTANTS``), ``path`` (the
    cached file), ``kernels`` (always empty) and ``stats`` (``cache_hit``...)."""

    backend = BACKEND

    def __init__(self, module, path, source, constants, stats):
        self.module = module
        self.path = path
        self.source = source
        self.constants = constants
        self.kernels = {}
        self.stats = stats

    def run(self, feeds):
        return self.module.run(**feeds)


def build(program, fetches, options):
    import symgrad

    inputs, outputs = signature_literals(program, fetches)
    key = cache.cache_key(BACKEND, canonical_text(program, fetches), options.key(),
                          TEMPLATE_VERSION, template_sources(), symgrad.__version__,
                          np.__version__)
    first = fetches[0].name if fetches and fetches[0].name else "program"
    prefix = f"{BACKEND}_{sanitize(first)}_{len(program.ops)}ops"
    with gc_paused():
        generated = generate(program, fetches, options, inputs, outputs)
    path = cache.lookup(prefix, key, options)
    hit = path is not None
    if hit:
        source = cache.read(path)
    else:
        source = generated.source
        path = cache.store(prefix, key, source, options)
    cache.dump(prefix, key, source)
    module = cache.load_module(path)
    module.CONSTANTS.update(generated.constants)
    if hasattr(module, "_POOL"):
        module._POOL = shared_pool()
    stats = {"cache_hit": hit, "source_lines": source.count("\n")}
    return NumpyExecutable(module, path, source, dict(generated.constants), stats)
