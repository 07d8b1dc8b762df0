"""Segments of loop groups, native ops and row ops (backends/c_backend/segments.py, host.py,
views.py): programs mixing matmuls, convolutions, pooling, softmax cross-entropy and
elementwise groups, with a static or a dynamic batch, agree with the interpreter and make one
segment call (the generated host read back); a broadcast members read is computed in the
segment, and a transposed matrix or stack is read by the GEMM in place; a host op runs after a
segment when no later member reads it, and ends it otherwise; a view read by the host stays a
view; a label outside the classes and a process without the GEMM are errors raised from the
segment."""
from __future__ import annotations

import re

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends.c_backend import blas
from symgrad.backends.c_backend import host as c_host
from symgrad.ops.nn_ops import one_hot
from tests.backends.c_backend.native_calls import native_products

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

TOLERANCE = {"float64": 1e-9, "float32": 2e-4}
RNG = np.random.default_rng(5)


def _run_source(compiled) -> str:
    source = compiled.sources[".py"]
    return source[source.index("def run("):]


def _c_calls(compiled) -> list:
    """The C entry points the host's ``run`` calls, in order (``s``: a segment)."""
    return re.findall(r"_sg_(\w+?)\d*\(\(", _run_source(compiled))


def _assert_matches(prog, fetches, compiled, feeds, dtype):
    with np.errstate(all="ignore"):   # NumPy's BLAS may flag a product of one row
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for got, want in zip(compiled(**feeds), expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def _mlp(batch, dtype):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 6], dtype)
        w1, b1 = sg.data("w1", [6, 5], dtype), sg.data("b1", [5], dtype)
        w2 = sg.data("w2", [5, 3], dtype)
        y = sg.tanh(x @ w1 + b1) @ w2
        loss = sg.sum(y * y)
        fetches = [loss, *ir_backward.grad(loss, [x, w1, b1, w2])]
    return prog, fetches


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [4, None], ids=["static", "dynamic"])
def test_an_mlp_step_of_matmuls_and_loop_groups_is_one_segment_call(batch, dtype):
    """The forward and backward matmuls (their transposed operands read in place) and the
    fused groups between them are one C call: the host makes no view and no matmul."""
    prog, fetches = _mlp(batch, dtype)
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"]
    assert not re.search(r"np\.(transpose|matmul|reshape)\(", _run_source(compiled))
    assert native_products(compiled) == 6   # 2 forward, 4 backward
    for rows in ([4] if batch else [4, 1, 7]):
        feeds = {"x": RNG.standard_normal((rows, 6)), "w1": RNG.standard_normal((6, 5)),
                 "b1": RNG.standard_normal(5), "w2": RNG.standard_normal((5, 3))}
        feeds = {name: array.astype(dtype) for name, array in feeds.items()}
        _assert_matches(prog, fetches, compiled, feeds, dtype)


@pytest.mark.parametrize("batch", [4, None], ids=["static", "dynamic"])
def test_a_step_with_dropout_is_one_segment_call_after_its_random_draw(batch):
    """The dropout mask's draw reads the program's step and only the shape of the
    activation (``Algebra.shape_only``), so the host draws it before the call and the step
    stays one C call; the numbers are the interpreter's (the same draw), and the next call
    draws new ones."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 6], "float64")
        w = sg.parameter("w", [6, 6], "float64", init=RNG.standard_normal((6, 6)))
        h = nn.dropout(sg.tanh(x @ w), 0.5)
        loss = sg.sum(h @ w)
        fetches = [loss, h, *ir_backward.grad(loss, [x, w])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"]
    run = _run_source(compiled)
    assert run.index("_sg_random_uniform(") < run.index("_sg_s0((")
    reference = sg.compile(prog, fetches, backend="interpreter")
    feeds = {"x": RNG.standard_normal((4, 6))}
    masks = []
    for _ in range(2):       # each compiled program advances its own step
        got, want = compiled(**feeds), reference(**feeds)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        masks.append(got[1] == 0)
    assert not np.array_equal(*masks)


@pytest.mark.parametrize("reduce", ["mean", "sum"])
@pytest.mark.parametrize("batch", [7, None], ids=["static", "dynamic"])
def test_a_classifier_step_with_its_mean_cross_entropy_is_one_segment_call(batch, reduce):
    """W1's shape: the softmax cross-entropy and its mean or sum (the batch size hoisted
    before the call: ``size`` reads no data), then its gradient, one row op, and the matmuls
    of the backward. With a dynamic batch, the loss's cotangent broadcast over the rows
    (``broadcast_like``) is computed in the segment for the gradient's row function: the host
    makes no view and the step is one call (with a static batch, it is a constant). A label
    outside the classes is the NumPy backend's error, before anything is written."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 6], "float32")
        labels = sg.data("labels", [batch], "int64")
        w1, w2 = sg.data("w1", [6, 5], "float32"), sg.data("w2", [5, 3], "float32")
        loss = getattr(sg, reduce)(nn.softmax_cross_entropy(sg.tanh(x @ w1) @ w2, labels))
        fetches = [loss, *ir_backward.grad(loss, [w1, w2])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"]
    heading = _run_source(compiled).split("# C segment 0:")[1].split("\n")[0]
    assert ("broadcast_like" in heading) == (batch is None)
    assert not re.search(r"np\.broadcast_to\(", _run_source(compiled))
    for rows in ([7] if batch else [7, 1, 4]):
        feeds = {"x": RNG.standard_normal((rows, 6)).astype("float32"),
                 "labels": RNG.integers(0, 3, rows),
                 "w1": RNG.standard_normal((6, 5)).astype("float32"),
                 "w2": RNG.standard_normal((5, 3)).astype("float32")}
        _assert_matches(prog, fetches, compiled, feeds, "float32")
    with pytest.raises(ValueError, match=r"class index 3 is outside \[0, 3\)"):
        compiled(**dict(feeds, labels=np.array([0, 1, 3, 2, 1, 0, 9])[:len(feeds["x"])]))


@pytest.mark.parametrize("fetched", [False, True], ids=["member", "fetched"])
def test_a_broadcast_read_by_members_is_computed_in_the_segment(fetched):
    """A bias row broadcast over a matrix's rows (stride 0 along them), read by a row op and
    by a matmul, is a member of the segment; fetched too, it stays the host's view, which the
    segment reads as an input (copied: it is not C-contiguous)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        b = sg.data("b", [3], "float64")
        w = sg.data("w", [3, 2], "float64")
        wide = sg.broadcast_to(b, [4, 3])
        fetches = [sg.sum(nn.softmax(wide) @ w + wide @ w)] + ([wide] if fetched else [])
    compiled = sg.compile(prog, fetches, backend="c")
    source = _run_source(compiled)
    assert _c_calls(compiled) == ["s"]
    assert ("np.broadcast_to(" in source) == fetched
    _assert_matches(prog, fetches, compiled, {"b": RNG.standard_normal(3),
                                              "w": RNG.standard_normal((3, 2))}, "float64")


@pytest.mark.parametrize("batch", [3, None], ids=["static", "dynamic"])
def test_a_convolution_step_with_pooling_and_a_dense_layer_is_one_segment_call(batch):
    """conv2d, relu, max pooling, a flattening reshape (absorbed: the matmul reads the pooled
    buffer) and a dense layer, with the gradients of the input, the kernel and the weights."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 2, 6, 6], "float64")
        w = sg.data("w", [3, 2, 3, 3], "float64")
        dense = sg.data("dense", [27, 4], "float64")
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, w, padding=1)), 2, 2, 0)
        loss = sg.sum(sg.tanh(sg.reshape(h, [-1, 27]) @ dense))
        fetches = [loss, *ir_backward.grad(loss, [x, w, dense])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"]
    assert not re.search(r"np\.(transpose|matmul|reshape)\(", _run_source(compiled))
    for rows in ([3] if batch else [3, 1, 5]):
        feeds = {"x": RNG.standard_normal((rows, 2, 6, 6)),
                 "w": RNG.standard_normal((3, 2, 3, 3)), "dense": RNG.standard_normal((27, 4))}
        _assert_matches(prog, fetches, compiled, feeds, "float64")


def test_a_broadcast_of_integer_labels_read_by_one_hot_is_computed_in_the_segment():
    """Labels broadcast over rows (int64, stride 0 along them), one-hot encoded by the row op
    and flattened (an absorbed reshape) for a matmul: one call."""
    prog = sg.Program()
    with sg.program_guard(prog):
        labels = sg.data("labels", [3], "int64")
        w = sg.data("w", [5, 2], "float64")
        encoded = one_hot(sg.broadcast_to(labels, [4, 3]), 5, "float64")
        fetches = [sg.sum(sg.tanh(sg.reshape(encoded, [12, 5]) @ w))]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"] and "np.broadcast_to(" not in _run_source(compiled)
    _assert_matches(prog, fetches, compiled, {"labels": np.array([0, 4, 2]),
                                              "w": RNG.standard_normal((5, 2))}, "float64")


@pytest.mark.parametrize("batch", [2, None], ids=["static", "dynamic"])
def test_attention_with_transposed_stacks_is_one_segment_call(batch):
    """``q @ k^T`` over a batch of sequences, and the backward's transposes of stacks (each
    matrix of a stack transposed, read by a product of two stacks) are read by the GEMMs with
    their transpose flags: one call, no ``np.transpose`` on the host."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 4, 6], "float64")
        wq, wk, wv = (sg.data(name, [6, 6], "float64") for name in ("wq", "wk", "wv"))
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = nn.softmax(q @ sg.transpose(k, (0, 2, 1)) * 0.5, axis=-1)
        loss = sg.sum(sg.tanh(scores @ v))
        fetches = [loss, *ir_backward.grad(loss, [x, wq, wk, wv])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert _c_calls(compiled) == ["s"]
    assert not re.search(r"np\.(transpose|matmul)\(", _run_source(compiled))
    for rows in ([2] if batch else [2, 1, 3]):
        feeds = {"x": RNG.standard_normal((rows, 4, 6)),
                 **{name: RNG.standard_normal((6, 6)) for name in ("wq", "wk", "wv")}}
        _assert_matches(prog, fetches, compiled, feeds, "float64")


def _with_concatenate(read_by_member):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        w = sg.data("w", [4, 3], "float64")
        y = sg.tanh(x @ w)
        both = sg.concatenate([y, y], axis=1)   # computed by the host (NumPy)
        later = both @ sg.data("w3", [6, 2], "float64") if read_by_member else \
            y @ sg.data("w2", [3, 2], "float64")
        fetches = [both, sg.sum(sg.exp(later))]
    return prog, fetches


@pytest.mark.parametrize("read_by_member", [False, True], ids=["deferred", "ending"])
def test_an_op_of_the_host_runs_after_the_segment_unless_a_later_member_reads_it(
        read_by_member):
    prog, fetches = _with_concatenate(read_by_member)
    compiled = sg.compile(prog, fetches, backend="c")
    source = _run_source(compiled)
    assert _c_calls(compiled) == (["s", "s"] if read_by_member else ["s"])
    assert source.index("_sg_s0((") < source.index("np.concatenate(")
    feeds = {"x": RNG.standard_normal((5, 4)), "w": RNG.standard_normal((4, 3))}
    feeds.update({"w3": RNG.standard_normal((6, 2))} if read_by_member else
                 {"w2": RNG.standard_normal((3, 2))})
    _assert_matches(prog, fetches, compiled, feeds, "float64")


def test_a_transpose_the_host_reads_stays_a_view_that_the_segment_copies():
    """A transpose that is also fetched is made by the host; the matmul's segment gets the
    F-contiguous view and reads a copy."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.data("w", [3, 4], "float32")
        t = sg.transpose(w)
        fetches = [t, sg.tanh(x @ t)]
    compiled = sg.compile(prog, fetches, backend="c")
    assert "np.transpose(" in _run_source(compiled) and _c_calls(compiled) == ["s"]
    feeds = {"x": RNG.standard_normal((5, 4)).astype("float32"),
             "w": RNG.standard_normal((3, 4)).astype("float32")}
    _assert_matches(prog, fetches, compiled, feeds, "float32")


def test_a_segment_whose_process_has_no_gemm_raises_naming_the_cause(monkeypatch):
    """The C code looks the GEMM up by name when its first native op runs: names that no
    loaded library exports are the RuntimeError that points at NumPy's wheel."""
    monkeypatch.setattr(c_host, "SYMBOLS", (("sg_absent_sgemm", "sg_absent_dgemm", True),))
    prog, fetches = _mlp(None, "float64")
    compiled = sg.compile(prog, fetches, backend="c")
    feeds = {"x": np.ones((2, 6)), "w1": np.ones((6, 5)), "b1": np.ones(5),
             "w2": np.ones((5, 3))}
    with pytest.raises(RuntimeError, match="no BLAS GEMM found among the loaded libraries"):
        compiled(**feeds)
