"""The C backend's native ops (matmul, conv2d and pooling with their gradients: C entry points
calling NumPy's BLAS) against the interpreter: the registry's nn samples with their
gradients in float32 and float64, a dynamic batch dim fed at several sizes, ties and NaN in
max pooling, run-time dims that disagree, transposed matmul operands read in place, and the
NumPy fallback without a BLAS; a CNN step and a training batch_norm with its gradients
computed wholly in C (the host only allocates and makes views)."""
import ctypes
import functools
import re
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends import c_backend
from symgrad.backends.c_backend import blas, compiler, native_ops
from symgrad.backends.c_backend.lowering import CNativeOp, LOWERINGS
from symgrad.ir.graph import walk_ops
from symgrad.ops.core import bind, get_op
from tests.backends.c_backend.native_calls import native_pairs, native_products
from tests.ops.samples_nn import SAMPLES

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

NATIVE = [s for s in SAMPLES if isinstance(LOWERINGS.rule(get_op(s.op)), CNativeOp)]
NATIVE_OPS = {name for name, rule in LOWERINGS.rules.items() if isinstance(rule, CNativeOp)}
DTYPES = ["float32", "float64"]
TOLERANCE = {"float64": 1e-9, "float32": 2e-4}
RNG = np.random.default_rng(11)


@functools.lru_cache(maxsize=None)
def _compiled_samples():
    """Every native sample's program with its gradients, per dtype, compiled in one batch."""
    built = {}
    with c_backend.deferred():
        for s in NATIVE:
            for dtype in DTYPES:
                prog, fetches = s.program(dtype, with_grad=True)
                built[s.id, dtype] = prog, fetches, sg.compile(prog, fetches, backend="c")
    return built


def _assert_matches(prog, fetches, compiled, feeds, dtype):
    rtol = TOLERANCE[dtype]
    with np.errstate(all="ignore"):
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
        got = compiled(**feeds)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * 10)


def test_the_native_samples_cover_every_native_op():
    assert NATIVE_OPS == {s.op for s in NATIVE}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sample", NATIVE, ids=[s.id for s in NATIVE])
def test_sample_and_its_gradients_match_the_interpreter(sample, dtype):
    prog, fetches, compiled = _compiled_samples()[sample.id, dtype]
    _assert_matches(prog, fetches, compiled, sample.feeds(dtype), dtype)
    native = [op for op in walk_ops(compiled.program.ops) if op.opdef.name in NATIVE_OPS
              and LOWERINGS.rule(op.opdef).kind(op) is not None]
    assert native_products(compiled) >= min(1, len(native))
    if sample.op != "matmul":   # a matmul of broadcast operands stays on NumPy
        assert native


def _cnn(x, w1, w2, dense, labels):
    """The issue's small CNN (narrower), with avg pooling, groups and stride on the way."""
    h = nn.max_pool2d(nn.relu(nn.conv2d(x, w1, padding=1)), 2, 2, 0)
    h = nn.avg_pool2d(nn.relu(nn.conv2d(h, w2, stride=1, padding=2, dilation=2, groups=2)),
                      3, 2, 1)
    logits = sg.reshape(h, [-1, 4 * 2 * 2]) @ dense
    loss = sg.mean(nn.softmax_cross_entropy(logits, labels))
    return [loss, *ir_backward.grad(loss, [x, w1, w2, dense])]


@functools.lru_cache(maxsize=None)
def _cnn_program(dtype):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 8, 8], dtype)
        w1 = sg.data("w1", [4, 2, 3, 3], dtype)
        w2 = sg.data("w2", [4, 2, 3, 3], dtype)
        dense = sg.data("dense", [16, 3], dtype)
        labels = sg.data("labels", [None], "int64")
        fetches = _cnn(x, w1, w2, dense, labels)
    return prog, fetches, sg.compile(prog, fetches, backend="c")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_cnn_step_with_a_dynamic_batch_matches_the_interpreter(dtype):
    prog, fetches, compiled = _cnn_program(dtype)
    assert native_products(compiled) >= 8
    for batch in (5, 1, 3):
        feeds = {"x": RNG.standard_normal((batch, 2, 8, 8)).astype(dtype),
                 "w1": RNG.standard_normal((4, 2, 3, 3)).astype(dtype),
                 "w2": RNG.standard_normal((4, 2, 3, 3)).astype(dtype),
                 "dense": RNG.standard_normal((16, 3)).astype(dtype),
                 "labels": RNG.integers(0, 3, batch)}
        _assert_matches(prog, fetches, compiled, feeds, dtype)


def test_max_pooling_with_ties_and_nan_matches_the_interpreter():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 1, 4, 4], "float64")
        g = sg.data("g", [None, 1, 2, 2], "float64")
        h = sg.data("h", [None, 1, 4, 4], "float64")
        attrs = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}
        fetches = [nn.max_pool2d(x, 3, 2, 1), bind("max_pool2d_grad", [x, g], attrs),
                   bind("max_pool2d_select", [x, h], attrs)]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 3
    x = np.array([[1, 1, 0, 2], [1, np.nan, 2, 2], [0, 0, -np.inf, -np.inf],
                  [3, 0, -np.inf, -np.inf]], float).reshape(1, 1, 4, 4)
    feeds = {"x": np.concatenate([x, -x]), "g": RNG.standard_normal((2, 1, 2, 2)),
             "h": RNG.standard_normal((2, 1, 4, 4))}
    _assert_matches(prog, fetches, compiled, feeds, "float64")


def test_matmul_of_stacks_and_arrays_that_disagree_with_the_entry_are_an_error():
    prog = sg.Program()
    with sg.program_guard(prog):
        a = sg.data("a", [2, None, 3], "float32")
        b = sg.data("b", [2, 3, None], "float32")
        m = sg.data("m", [None, None], "float32")
        fetches = [a @ b, m @ sg.data("n", [None, 5], "float32")]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 2
    feeds = {"a": RNG.standard_normal((2, 4, 3), "float32"),
             "b": RNG.standard_normal((2, 3, 6), "float32"),
             "m": RNG.standard_normal((7, 2), "float32"),
             "n": RNG.standard_normal((2, 5), "float32")}
    _assert_matches(prog, fetches, compiled, feeds, "float32")
    # the feeds are checked before the run; the segment's entry (both matmuls) checks its
    # arrays again, against the sizes the binding gives (after the arrays: a's rows, b's
    # columns, m's two dims, then n's rows)
    assert compiled._executable.stats["c_segments"] == 1
    entry = compiled._executable.module._sg_s0
    arrays = [feeds[name] for name in "abmn"]
    results = [np.empty((2, 4, 6), "float32"), np.empty((7, 5), "float32")]
    with pytest.raises(ValueError, match="1 elements along axis 0 where the program needs 2"):
        entry((*arrays[:3], feeds["n"][:1], *results, 4, 6, 7, 2, 2))
    with pytest.raises(ValueError, match="6 elements along axis 0 where the program needs 7"):
        entry((*arrays[:2], feeds["m"][:6], feeds["n"], *results, 4, 6, 7, 2, 2))
    with pytest.raises(TypeError, match="items of 8 bytes"):
        entry((*arrays[:3], feeds["n"].astype("float64"), *results, 4, 6, 7, 2, 2))


def test_without_a_blas_the_native_ops_run_on_numpy(monkeypatch):
    monkeypatch.setattr(native_ops.blas, "available", lambda: False)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 6, 6], "float32")
        w = sg.data("w", [3, 2, 3, 3], "float32")
        fetches = [nn.max_pool2d(nn.conv2d(x, w), 2, 2, 0)]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 0
    feeds = {"x": RNG.standard_normal((2, 2, 6, 6), "float32"),
             "w": RNG.standard_normal((3, 2, 3, 3), "float32")}
    _assert_matches(prog, fetches, compiled, feeds, "float32")


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_entries_compile_without_warnings(dtype, tmp_path):
    """-Wall finds nothing in the C of the CNN step (every native kind but matmul stacks)."""
    tools = compiler.toolchain()
    path = tmp_path / "cnn.c"
    path.write_text(_cnn_program(dtype)[2]._executable.source)
    flags = [flag for flag in tools.flags if flag != "-shared"]
    result = subprocess.run([tools.compiler, *flags, "-Wall", "-Werror", "-fsyntax-only",
                             str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_convolutions_of_large_planes_match_the_interpreter():
    """Planes of 53 x 53 (im2col columns of 404 kB a sample, the GEMM's n 2809)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 53, 53], "float64")
        w = sg.data("w", [3, 2, 3, 3], "float64")
        y = nn.conv2d(x, w, padding=1)
        loss = sg.sum(y * y)
        fetches = [y, *ir_backward.grad(loss, [x, w])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 3
    feeds = {"x": RNG.standard_normal((5, 2, 53, 53)), "w": RNG.standard_normal((3, 2, 3, 3))}
    _assert_matches(prog, fetches, compiled, feeds, "float64")


@pytest.mark.parametrize("threads", [1, 2])
def test_pooling_over_many_planes_runs_on_threads_and_gives_the_same_bytes(threads):
    """2^18 input elements: the planes are split into 16 chunks that the pool's threads share;
    each plane is computed alone, so one thread and two give the same bytes."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16, 16, 16], "float64")
        pooled = [nn.max_pool2d(x, 3, 2, 1), nn.avg_pool2d(x, 2, 2, 0)]
        loss = sg.sum(pooled[0] * pooled[0]) + sg.sum(pooled[1] * pooled[1])
        fetches = [*pooled, *ir_backward.grad(loss, [x])]
    compiled = sg.compile(prog, fetches, backend="c", threads=threads)
    source = compiled._executable.source
    assert native_products(compiled) == 4
    assert len(re.findall(r"sg_parallel\(sg_n_\w+_part", source)) == 4
    feeds = {"x": np.random.default_rng(3).standard_normal((64, 16, 16, 16))}
    _assert_matches(prog, fetches, compiled, feeds, "float64")
    serial = sg.compile(prog, fetches, backend="c", threads=1)
    for got, alone in zip(compiled(**feeds), serial(**feeds)):
        assert got.tobytes() == alone.tobytes()


def test_matmuls_of_transposed_operands_are_native_and_read_them_in_place():
    """A transposed matrix operand is absorbed by the segment: the GEMM reads the operand's
    buffer with its transpose flag, on either side, so the host makes no view; a fed operand
    of other strides (a slice, an F-order array) is copied. Every matmul is a native call,
    all of them in one segment."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.data("w", [4, 3], "float32")
        v = sg.data("v", [3, 4], "float32")
        u = sg.data("u", [4, 5], "float32")
        fetches = [x @ w, x @ sg.transpose(v), sg.transpose(u) @ w,
                   sg.transpose(u) @ sg.transpose(v), sg.transpose(x) @ x]
    compiled = sg.compile(prog, fetches, backend="c")
    assert "np.matmul" not in compiled.sources[".py"]
    assert "np.transpose" not in compiled.sources[".py"]
    assert native_products(compiled) == len(fetches)
    assert compiled._executable.stats["c_segments"] == 1
    feeds = {"x": RNG.standard_normal((5, 4)).astype("float32"),
             "w": RNG.standard_normal((4, 3)).astype("float32"),
             "v": RNG.standard_normal((3, 4)).astype("float32"),
             "u": RNG.standard_normal((4, 5)).astype("float32")}
    _assert_matches(prog, fetches, compiled, feeds, "float32")
    strided = dict(feeds, x=RNG.standard_normal((5, 8)).astype("float32")[:, ::2],
                   w=np.asfortranarray(feeds["w"]))   # a copy; a fed F-order array
    _assert_matches(prog, fetches, compiled, strided, "float32")
    single = dict(feeds, x=feeds["x"][:1])   # a 1-row operand and its transpose
    _assert_matches(prog, fetches, compiled, single, "float32")


# allocation, views and the fetches' dtype: the host's only NumPy calls in a program C computes
# whole (each op else is a segment, a row op or a native op; the mean's cotangent, broadcast
# over the batch for softmax_cross_entropy_grad's row op, is computed in the segment)
_HOST_ONLY = {"empty", "reshape", "asarray", "transpose"}


def _numpy_calls(compiled) -> set:
    """The NumPy functions the host module's ``run`` calls."""
    source = compiled.sources[".py"]
    return set(re.findall(r"\bnp\.(\w+)\(", source[source.index("def run("):]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_cnn_step_computes_every_op_in_c(dtype):
    """The host only allocates results and makes views around its one C call: no conv,
    pooling, matmul, elementwise op or broadcast returns to NumPy."""
    _, _, compiled = _cnn_program(dtype)
    assert _numpy_calls(compiled) <= _HOST_ONLY
    assert len(re.findall(r"_sg_s\d+\(\(", compiled.sources[".py"])) == 1


@functools.lru_cache(maxsize=None)
def _batch_norm_program(dtype):
    """A training batch_norm (batch statistics, running statistics assigned) after a conv,
    with the gradients of its input, weight and bias; the batch dim unknown."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3, 5, 6], dtype)
        k = sg.data("k", [4, 3, 3, 3], dtype)
        weight, bias = sg.data("weight", [4], dtype), sg.data("bias", [4], dtype)
        running = nn.batch_norm_stats("bn", 4, dtype)
        h = nn.conv2d(x, k, padding=1)
        y = nn.relu(nn.batch_norm(h, *running, weight, bias, training=True))
        loss = sg.mean(y * y)
        fetches = [loss, *ir_backward.grad(loss, [x, k, weight, bias])]
    return prog, fetches, sg.compile(prog, fetches, backend="c")


@pytest.mark.parametrize("dtype", DTYPES)
def test_training_batch_norm_and_its_gradients_run_in_c_and_match_the_interpreter(dtype):
    """The batch statistics, the normalization, the running statistics' update and the
    gradients are C segments (fused loops and reductions); the host only allocates and
    reshapes. Results match the interpreter at several batch sizes, the state too."""
    prog, fetches, compiled = _batch_norm_program(dtype)
    assert _numpy_calls(compiled) <= _HOST_ONLY
    reference = sg.compile(prog, fetches, backend="interpreter")
    for batch in (4, 1, 7):
        feeds = {"x": RNG.standard_normal((batch, 3, 5, 6)).astype(dtype),
                 "k": RNG.standard_normal((4, 3, 3, 3)).astype(dtype),
                 "weight": RNG.standard_normal(4).astype(dtype),
                 "bias": RNG.standard_normal(4).astype(dtype)}
        for got, want in zip(compiled(**feeds), reference(**feeds)):
            np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype],
                                       atol=TOLERANCE[dtype] * 10)
        for name in ("bn.running_mean", "bn.running_var"):
            np.testing.assert_allclose(compiled.state[name], reference.state[name],
                                       rtol=TOLERANCE[dtype])


@pytest.mark.parametrize("kernel, stride", [(2, 2), (3, 1), (2, (1, 2))])
def test_max_pooling_inside_the_plane_with_ties_nan_and_infinities(kernel, stride):
    """Windows that lie inside the plane run a row of windows at a time (loops along the row
    that the compiler vectorizes): tiling windows (2, 2) write the gradient without clearing,
    overlapping ones (3, 1) add into it; ties share the gradient, a NaN wins its window."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 4, 6], "float32")
        pooled = nn.max_pool2d(x, kernel, stride, 0)
        g = sg.data("g", [None, 2, *pooled.shape[2:]], "float32")
        h = sg.data("h", [None, 2, 4, 6], "float32")
        attrs = {"kernel_size": (kernel, kernel),
                 "stride": stride if isinstance(stride, tuple) else (stride, stride),
                 "padding": (0, 0)}
        fetches = [pooled, bind("max_pool2d_grad", [x, g], attrs),
                   bind("max_pool2d_select", [x, h], attrs)]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 3
    assert compiled._executable.source.count("a row of windows at a time") == 3
    plane = np.array([[1, 1, 0, 2, 5, 5], [1, np.nan, 2, 2, 5, 5],
                      [0, 0, -np.inf, -np.inf, np.inf, 1], [3, 0, -np.inf, -np.inf, 2, np.inf]])
    x = np.stack([plane, -plane]).astype("float32")[None]
    feeds = {"x": np.concatenate([x, RNG.standard_normal((2, 2, 4, 6)).astype("float32")]),
             "g": RNG.standard_normal((3, 2, *pooled.shape[2:])).astype("float32"),
             "h": RNG.standard_normal((3, 2, 4, 6)).astype("float32")}
    feeds["g"][0, 0, 0, 0] = np.inf
    _assert_matches(prog, fetches, compiled, feeds, "float32")


@pytest.mark.parametrize("batch", [1, 24, 40])
def test_convolutions_on_threads_give_the_bytes_of_one_thread(batch):
    """The samples run in chunks on the pool, each GEMM on one thread; the weight gradient
    adds one partial per chunk in chunk order: two threads give one thread's bytes (groups,
    stride, dilation, a 1x1 kernel that reads the input in place; the first conv's batch of 24
    and 40 is 16 chunks, of 1 one chunk)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 32, 32], "float32")
        w1 = sg.data("w1", [6, 2, 3, 3], "float32")
        w2 = sg.data("w2", [3, 6, 1, 1], "float32")
        h = nn.conv2d(x, w1, stride=2, padding=2, dilation=2, groups=2)
        y = nn.conv2d(nn.relu(h), w2)
        loss = sg.sum(y * y)
        fetches = [y, *ir_backward.grad(loss, [x, w1, w2])]
    feeds = {"x": RNG.standard_normal((batch, 4, 32, 32)).astype("float32"),
             "w1": RNG.standard_normal((6, 2, 3, 3)).astype("float32"),
             "w2": RNG.standard_normal((3, 6, 1, 1)).astype("float32")}
    two = sg.compile(prog, fetches, backend="c", threads=2)
    assert native_products(two) == 6 and "sg_conv sg_c" in two._executable.source
    _assert_matches(prog, fetches, two, feeds, "float32")
    one = sg.compile(prog, fetches, backend="c", threads=1)
    for got, alone in zip(two(**feeds), one(**feeds)):
        assert got.tobytes() == alone.tobytes()


def _blas_thread_calls():
    """(get, set) of the thread count of NumPy's BLAS, or None."""
    for path in blas._candidates():
        library = ctypes.CDLL(path)
        for get, put in blas.THREAD_SYMBOLS:
            if hasattr(library, get) and hasattr(library, put):
                return getattr(library, get), getattr(library, put)
    return None


def test_a_convolution_leaves_the_blas_thread_count_as_it_found_it():
    """The convolution makes NumPy's BLAS single-threaded while its GEMMs run on symgrad's
    pool, then puts the count back."""
    calls = _blas_thread_calls()
    if calls is None:
        pytest.skip("the BLAS has no thread count calls")
    get, put = calls
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 32, 32], "float32")
        w = sg.data("w", [8, 4, 3, 3], "float32")
        fetches = [nn.conv2d(x, w, padding=1)]
    compiled = sg.compile(prog, fetches, backend="c", threads=2)
    before = get()
    try:
        put(2)
        compiled(x=np.ones((16, 4, 32, 32), "float32"), w=np.ones((8, 4, 3, 3), "float32"))
        assert get() == 2
    finally:
        put(before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_matmuls_run_in_blocks_on_the_pool_and_give_the_bytes_of_one_thread(dtype):
    """A product too large for one thread, or one of few columns and many rows (``x @ v``),
    runs as blocks of its rows or of its columns (whichever dim is longer; either operand read
    transposed, a stack folded into the rows) on
    symgrad's pool, the BLAS on one thread meanwhile: the blocks depend on the shape and the
    CPUs only, so ``threads=2`` gives the bytes of ``threads=1``, and the BLAS's thread count
    is put back."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 96], dtype)
        w = sg.data("w", [96, 300], dtype)
        s = sg.data("s", [3, 70, 96], dtype)
        v = sg.data("v", [96, 12], dtype)
        fetches = [x @ w, sg.transpose(w) @ sg.transpose(x), s @ w, sg.transpose(x) @ x, x @ v]
    feeds = {"x": RNG.standard_normal((260, 96)).astype(dtype),
             "w": RNG.standard_normal((96, 300)).astype(dtype),
             "v": RNG.standard_normal((96, 12)).astype(dtype),
             "s": RNG.standard_normal((3, 70, 96)).astype(dtype)}
    one = sg.compile(prog, fetches, backend="c", threads=1)
    two = sg.compile(prog, fetches, backend="c", threads=2)
    assert native_products(two) == len(fetches)
    assert native_pairs(two) == 2   # independent neighbours: side by side when of equal work
    calls = _blas_thread_calls()
    before = calls[0]() if calls else None
    for g, e in zip(two(**feeds), one(**feeds)):
        np.testing.assert_array_equal(g, e)
    if calls:
        assert calls[0]() == before
    _assert_matches(prog, fetches, two, feeds, dtype)


@pytest.mark.parametrize("kernel, taps", [((5, 6), False), ((3, 2), True)])
def test_convolutions_of_few_and_many_taps_match_the_interpreter(kernel, taps):
    """The input gradient of a kernel of at most native_ops.UNROLLED_TAPS taps gets col2im
    blocks of constant bounds per tap; a larger one runs the run-time loops of
    c/native.h.j2."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 11, 9], "float64")
        w = sg.data("w", [3, 2, *kernel], "float64")
        y = nn.conv2d(x, w, stride=(2, 1), padding=(2, 1), dilation=(1, 2))
        loss = sg.sum(y * y)
        fetches = [y, *ir_backward.grad(loss, [x, w])]
    compiled = sg.compile(prog, fetches, backend="c")
    assert native_products(compiled) == 3
    assert ("sg_col2im_double(" in compiled._executable.source) != taps
    feeds = {"x": RNG.standard_normal((3, 2, 11, 9)), "w": RNG.standard_normal((3, 2, *kernel))}
    _assert_matches(prog, fetches, compiled, feeds, "float64")


def test_a_layers_input_and_weight_gradients_run_side_by_side(dtype="float32"):
    """The two gradients of a linear layer, ``g @ w.T`` and ``x.T @ g``, are independent GEMMs
    of equal work: one member computes both, side by side on the pool when large (each one
    GEMM on two CPUs), one after the other when small (a batch of 3) or of unequal work (the
    two forward products of different widths); a product reading the other's result is not
    paired. The pairing depends on the shapes and the CPUs only: ``threads=2`` gives the
    bytes of ``threads=1``. (Float64 pairs: the large matmuls' test above.)"""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 96], dtype)
        w = sg.data("w", [96, 128], dtype)
        v = sg.data("v", [96, 40], dtype)
        u = sg.data("u", [128, 32], dtype)
        h = sg.tanh(x @ w)
        loss = sg.sum((h @ u) ** 2) + sg.sum(sg.tanh(x @ v))
        fetches = [loss, *ir_backward.grad(loss, [x, w])]
    one = sg.compile(prog, fetches, backend="c", threads=1)
    two = sg.compile(prog, fetches, backend="c", threads=2)
    assert native_products(two) == 7
    # x @ w beside x @ v (unequal work), and the two gradients of x @ w; h @ u reads x @ w
    assert native_pairs(two) == 2
    for batch in (300, 3):
        feeds = {"x": RNG.standard_normal((batch, 96)), "w": RNG.standard_normal((96, 128)),
                 "v": RNG.standard_normal((96, 40)), "u": RNG.standard_normal((128, 32))}
        feeds = {name: array.astype(dtype) for name, array in feeds.items()}
        for g, e in zip(two(**feeds), one(**feeds)):
            np.testing.assert_array_equal(g, e)
        _assert_matches(prog, fetches, two, feeds, dtype)
