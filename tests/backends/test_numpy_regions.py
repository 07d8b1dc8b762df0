"""Control flow in generated code (``backends/host/regions.py``, also the C and CUDA hosts,
which build on it): regions nested deeper than Python nests blocks are written as functions."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.host.regions import MAX_NESTED_REGIONS


def _one(kind, v, w, inner):
    """One region of ``kind`` around ``inner(v)``, reading the captured ``w``."""
    if kind == "cond":
        return sg.cond(sg.sum(v) > -100.0, lambda a: inner(a) + 1.0, lambda a: a - w, v)
    if kind == "scan":
        return sg.scan(lambda c, _: (inner(c) * 0.5, None), v, length=1)[0]
    return sg.while_loop(lambda n, c: n < 1, lambda n, c: [n + 1, inner(c) * 0.5],
                         [sg.constant(np.int64(0)), v])[1]


def nested(kind, depth, with_grad=False):
    """``(program, fetches)``: ``depth`` regions of ``kind`` nested in one another around
    ``x * w`` (and the gradients with respect to ``x`` and ``w``)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        w = sg.data("w", [3], "float64")
        inner = lambda v: v * w   # noqa: E731
        for _ in range(depth):
            inner = (lambda f: lambda v: _one(kind, v, w, f))(inner)
        y = inner(x)
        fetches = [y] + (ir_backward.grad(sg.sum(y), [x, w]) if with_grad else [])
    return prog, fetches


FEEDS = {"x": np.array([0.5, 1.0, 2.0]), "w": np.array([1.5, -0.5, 0.25])}

# Python compiles at most 100 indentation levels and 20 nested loops in one function; the
# backward of nested conds nests as deep as the forward
DEEP = [("cond", 100, False), ("cond", 24, True), ("scan", 30, False), ("while_loop", 30, False)]


def _host_source(compiled) -> str:
    """The Python module of a compiled program (the C backend's ``source`` is its C file)."""
    return getattr(compiled._executable, "host_source", compiled.source)


def _check_shallow(source, depth) -> None:
    assert source.count("\ndef _region") >= depth // MAX_NESTED_REGIONS
    indents = [len(line) - len(line.lstrip(" ")) for line in source.splitlines()]
    assert max(indents) <= 4 * (MAX_NESTED_REGIONS + 4)


# (the C host lowers regions with the NumPy generator: two cases, to keep compile time down)
CASES = [pytest.param(kind, depth, with_grad, backend,
                      id=f"{kind}-{depth}{'-grad' if with_grad else ''}-{backend}")
         for backend in ("numpy", "c") for kind, depth, with_grad in DEEP
         if backend == "numpy" or not with_grad and kind != "while_loop"]


@pytest.mark.parametrize("kind,depth,with_grad,backend", CASES)
def test_regions_nested_deeper_than_python_nests_blocks_compile_and_run(kind, depth,
                                                                       with_grad, backend):
    prog, fetches = nested(kind, depth, with_grad)
    expected = sg.compile(prog, fetches, backend="interpreter")(**FEEDS)
    compiled = sg.compile(prog, fetches, backend=backend)
    for got, want in zip(compiled(**FEEDS), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    _check_shallow(_host_source(compiled), depth)


def test_the_cuda_host_module_of_deep_regions_compiles():
    prog, fetches = nested("cond", 100)
    source = sg.compile(prog, fetches, backend="cuda").source
    compile(source, "cuda_host.py", "exec")
    _check_shallow(source, 100)


def test_shallow_regions_are_written_inline():
    prog, fetches = nested("cond", MAX_NESTED_REGIONS, with_grad=True)
    assert "_region" not in sg.compile(prog, fetches, backend="numpy").source
