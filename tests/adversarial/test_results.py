"""No silent wrong results (issue #12): the compile cache is verified, unknown dims are
checked against what the program assumed, backends agree with the interpreter on special
values, and gradient edge cases follow JAX and PyTorch."""
import glob
import marshal
import os

import numpy as np
import pytest

import symgrad as sg
from tests.backends.cuda_emulation import library as emulation
from tests.backends.cuda_emulation.device import EmulatedDevice
from symgrad import ir_backward


def _tanh_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.tanh(x)
    return prog, [y]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    return tmp_path


def _edit(path, change):
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(change(data))


_OTHER_CODE = marshal.dumps(compile("def run(**feeds):\n    return [feeds['x'] * 0]\n", "x",
                                   "exec"))
# (cached file, how it is damaged): the module itself, then the compiled code beside it
DAMAGE = {
    "module edited": ("*.py", lambda d: d.replace(b"np.tanh", b"np.sinh")),
    "module truncated": ("*.py", lambda d: d[:len(d) // 2]),
    "module emptied": ("*.py", lambda d: b""),
    "code truncated": ("*.code", lambda d: d[:len(d) // 2]),
    "code garbage": ("*.code", lambda d: os.urandom(len(d))),
    "code of other source": ("*.code", lambda d: d[:79] + _OTHER_CODE),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_cache_file_is_never_used(cache, case):
    pattern, damage = DAMAGE[case]
    prog, fetches = _tanh_program()
    x = np.array([0.5, 1.0, 2.0])
    sg.compile(prog, fetches)(x)
    [path] = glob.glob(os.path.join(cache, pattern))
    original = open(path, "rb").read()
    _edit(path, damage)
    fn = sg.compile(prog, fetches)
    np.testing.assert_array_equal(fn(x)[0], np.tanh(x))
    assert fn.stats["cache_hit"] == (pattern == "*.code")
    if pattern == "*.py":
        assert open(path, "rb").read() == original


# --- unknown dims ---------------------------------------------------------------------------------
def test_an_unknown_dim_fed_as_1_where_the_graph_assumed_no_broadcast():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        b = sg.data("b", [5], "float64")
        gx, = ir_backward.grad(sg.sum(x * b), [x])
    for backend in ("interpreter", "numpy"):
        fn = sg.compile(prog, [gx], backend=backend)
        with pytest.raises(sg.FeedError, match="op multiply .*never broadcast"):
            fn(x=np.ones(1), b=np.ones(5))
        np.testing.assert_array_equal(fn(x=np.ones(5), b=np.arange(5.0))[0], np.arange(5.0))


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
def test_batch_dims_that_disagree_at_run_time(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        y = sg.data("y", [None, 3], "float32")
        z = sg.sum(sg.exp(x) + sg.tanh(y))
    fn = sg.compile(prog, [z], backend=backend)
    with pytest.raises(sg.FeedError, match=r"op add .*needs dim '\?0' \(100000 in x\) and "
                                           r"dim '\?1' \(90000 in y\) to be equal"):
        fn(x=np.ones((100000, 3), "float32"), y=np.ones((90000, 3), "float32"))


def test_dims_are_checked_once_per_shape_set():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        y = sg.sum(x * sg.data("w", [3], "float32"))
    fn = sg.compile(prog, [y])
    for rows in (4, 4, 7):
        fn(x=np.ones((rows, 3), "float32"), w=np.ones(3, "float32"))
    assert len(fn._dim_check.bound) == 2


# --- backends agree with the interpreter --------------------------------------------------------
@pytest.mark.parametrize("axis", [0, None])
def test_chunked_prod_with_a_minus_inf_row(axis):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2], "float32")
        y = sg.prod(x * 2.0, axis=axis)
    xs = np.full((100000, 2), 0.25, "float32")
    xs[5, 0] = -np.inf
    expected = sg.compile(prog, [y], backend="interpreter")(x=xs)[0]
    assert np.asarray(expected).ravel()[0] == -np.inf
    for threads in (1, 2):
        got = sg.compile(prog, [y], chunk_size=1024, threads=threads)(x=xs)[0]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("reduce", [sg.max, sg.min])
@pytest.mark.parametrize("axis", [0, None])
def test_max_and_min_over_zero_rows_raise_as_the_interpreter_does(reduce, axis):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        y = reduce(x * 2.0, axis=axis)
    empty = np.ones((0, 3), "float32")
    with pytest.raises(ValueError, match="zero-size array") as reference:
        sg.compile(prog, [y], backend="interpreter")(x=empty)
    for threads in (1, 2):
        with pytest.raises(ValueError, match="zero-size array") as got:
            sg.compile(prog, [y], chunk_size=8, threads=threads)(x=empty)
        assert str(got.value) == str(reference.value)


@pytest.mark.skipif(emulation.compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("reduce", [sg.max, sg.min])
def test_cuda_max_and_min_over_zero_rows_raise_as_the_interpreter_does(reduce, tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float32")
        y = reduce(sg.tanh(x), axis=0)
    compiled = sg.compile(prog, [y], backend="cuda")
    device = EmulatedDevice(emulation.Library([compiled._executable.cuda_source],
                                              cache_dir=tmp_path))
    empty = np.ones((0, 3), "float32")
    with pytest.raises(ValueError, match="zero-size array") as reference:
        sg.compile(prog, [y], backend="interpreter")(x=empty)
    with pytest.raises(ValueError, match="zero-size array") as got:
        device.run(compiled, {"x": empty})
    assert str(got.value) == str(reference.value)
    filled = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
    expected = np.tanh(filled).max(0) if reduce is sg.max else np.tanh(filled).min(0)
    np.testing.assert_allclose(device.run(compiled, {"x": filled})[0], expected, rtol=1e-6)


def test_pow_gradient_at_zero_to_the_zero():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        y = sg.data("y", [None], "float64")
        gx, gy = ir_backward.grad(sg.sum(x ** y), [x, y], create_graph=True)
        ggx, = ir_backward.grad(sg.sum(gx), [x])
    xs, ys = np.array([0.0, 0.0, 2.0, 0.0]), np.array([0.0, 1.0, 3.0, 2.0])
    for backend in ("interpreter", "numpy"):
        got_gx, got_gy, got_ggx = sg.compile(prog, [gx, gy, ggx], backend=backend)(x=xs, y=ys)
        np.testing.assert_array_equal(got_gx, [0.0, 1.0, 12.0, 0.0])   # JAX and PyTorch
        np.testing.assert_array_equal(got_gy, [0.0, 0.0, 8 * np.log(2.0), 0.0])
        assert np.all(np.isfinite(got_ggx))


def test_retain_grad_with_grad_inputs_stores_the_offset():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        offset = sg.data("offset", [3], "float64")
        h = x * 2.0
        g, = ir_backward.grad(sg.sum(h * h), [x], grad_inputs=[offset], retain_grad=True)
    assert x.grad is g
    xs, off = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    stored, returned = sg.compile(prog, [x.grad, g], backend="interpreter")(x=xs, offset=off)
    np.testing.assert_array_equal(stored, 8 * xs + off)
    np.testing.assert_array_equal(stored, returned)


def test_the_grad_table_says_chainer_propagates_grad_inputs_upstream():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "grad.md").read_text()
    [row] = [line for line in page.splitlines() if line.startswith("| `grad_inputs` | — |")]
    chainer = row.split(" | ")[2]
    assert "propagated upstream" in chainer and "initial" in chainer
