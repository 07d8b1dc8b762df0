"""Fed indices out of range for a gather (take, take_along_axis, embedding, integer-array
indexing) or for the scatter of its gradient raise one error on every backend: an
:class:`~symgrad.errors.IndexOutOfRangeError` (an ``IndexError``) naming the op, the index, the
axis and its size, and the user's line that built the op; indices at both ends of the range
give the interpreter's results. (Artifacts and their standalone runner:
tests/runtime/test_artifact_index_range.py.)"""
import functools

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import c_backend
from symgrad.errors import IndexOutOfRangeError
from tests.backends.cuda_emulation import library as emulation
from tests.backends.cuda_emulation.device import EmulatedDevice

ROWS = 4   # x is [ROWS, 3] float64; i and j are fed int64 indices ([n] and [ROWS, 1])


def _grad(y, x, g):
    """The gradient alone: seeded with the fed ``g``, it does not need the forward gather."""
    return ir_backward.grad(y, [x], grad_outputs=[g])


# name -> (build(x, i, j, g) -> fetches, written on one line: the line every op names; the op
# the error names; the axis and its size as the error names them)
CASES = {
    "take": (lambda x, i, j, g: [sg.take(x, i, axis=0) * 2.0], "take", "axis 0 with size 4"),
    "take-flat": (lambda x, i, j, g: [sg.take(x, i)], "take", "the flattened input with size 12"),
    "take-grad-only": (lambda x, i, j, g: _grad(sg.take(x, i, axis=0), x, g),
                       "take_grad (backward of take", "axis 0 with size 4"),
    "take_along_axis": (lambda x, i, j, g: [sg.take_along_axis(x, j, axis=0) * 2.0],
                        "take_along_axis", "axis 0 with size 4"),
    "take_along_axis-grad-only": (lambda x, i, j, g: _grad(sg.take_along_axis(x, j, 0), x, g),
                                  "take_along_axis_grad (backward of take_along_axis",
                                  "axis 0 with size 4"),
    "embedding": (lambda x, i, j, g: [sg.nn.embedding(i, x)], "take", "axis 0 with size 4"),
    "getitem": (lambda x, i, j, g: [sg.exp(x[1:, None][i])], "take", "axis 0 with size 3"),
    "getitem-in-a-branch": (lambda x, i, j, g: [sg.cond(sg.sum(x) > 0, lambda: x[i],
                                                        lambda: -x[i])],
                            "take", "axis 0 with size 4"),
}
BAD = [(np.array([0, 12]), 12), (np.array([-13, 1, 2]), -13)]   # (fed i, the index named)


def _program(name):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [ROWS, 3], "float64")
        i = sg.data("i", [None], "int64")
        j = sg.data("j", [ROWS, 1], "int64")
        g = sg.data("g", [None, 3], "float64")
        fetches = CASES[name][0](x, i, j, g)
    return prog, fetches


def _feeds(name, i, j):
    rows = len(i) if name.startswith("take-") else ROWS   # the gathered rows: g's shape
    return {"x": np.arange(ROWS * 3.0).reshape(ROWS, 3) - 5.0, "i": i, "j": j,
            "g": np.linspace(-1.0, 1.0, rows * 3).reshape(rows, 3)}


@functools.lru_cache(maxsize=None)
def _compiled(backend):
    """Every case compiled for ``backend`` ("cuda" runs on the emulated device)."""
    programs = {name: _program(name) for name in CASES}
    if backend == "c":
        with c_backend.deferred():
            return {name: sg.compile(p, f, backend="c") for name, (p, f) in programs.items()}
    return {name: sg.compile(p, f, backend=backend) for name, (p, f) in programs.items()}


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    if emulation.compiler() is None:
        pytest.skip("g++ is not installed")
    sources = [fn._executable.cuda_source for fn in _compiled("cuda").values()]
    cache_dir = emulation.session_cache_dir(tmp_path_factory)
    return EmulatedDevice(emulation.Library(sources, cache_dir=cache_dir))


def _runner(backend, request):
    if backend != "cuda":
        return lambda fn, feeds: fn(**feeds)
    device = request.getfixturevalue("device")
    return lambda fn, feeds: [np.asarray(a) for a in device.run(fn, feeds)]


BACKENDS = ["interpreter", "numpy", "c", "cuda"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_fed_indices_out_of_range_name_the_op_and_its_line(backend, name, request):
    run = _runner(backend, request)
    build, op, axis = CASES[name]
    fn = _compiled(backend)[name]
    site = f"{op}{', ' if '(' in op else ' ('}built at {__file__}:{build.__code__.co_firstlineno})"
    for indices, bad in BAD:
        j = np.array([[0], [1], [bad], [2]])
        with pytest.raises(IndexOutOfRangeError) as caught:
            run(fn, _feeds(name, indices, j))
        assert isinstance(caught.value, IndexError)
        assert str(caught.value) == f"{site}: index {bad} is out of bounds for {axis}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_indices_at_the_ends_of_the_range_match_the_interpreter(backend, name, request):
    run = _runner(backend, request)
    n = int(CASES[name][2].rsplit(" ", 1)[1])   # the size of the indexed axis
    indices = np.array([-n, n - 1, 0, -1, n - 1])
    feeds = _feeds(name, indices, np.array([[-ROWS], [ROWS - 1], [0], [-1]]))
    expected = _compiled("interpreter")[name](**feeds)
    got = run(_compiled(backend)[name], feeds)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-12)
