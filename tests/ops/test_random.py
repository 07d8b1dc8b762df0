"""Random numbers: Philox known answers, the numbers against an independent reference, the
step counter, streams, loops, dropout and dropout2d and their gradients, errors."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.errors import DTypeError, ShapeError
from symgrad.ops.random import RNG_STEP, _sg_philox
from tests.ops import random_reference as ref
from tests.ops.samples_random import SAMPLES

# Random123's known-answer vectors for philox4x32-10: counter, key, output
KNOWN_ANSWERS = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]
DTYPES = ["float64", "float32", "float16", "bfloat16"]


@pytest.mark.parametrize("counter,key,expected", KNOWN_ANSWERS)
def test_philox_known_answers(counter, key, expected):
    assert ref.philox4x32_10(counter, key) == expected
    words = _sg_philox(np.array([counter[0]]), *counter[1:], key[0] | key[1] << 32)
    assert [int(w[0]) for w in words] == expected


def _compile(build, backend="interpreter", **options):
    prog = sg.Program()
    with sg.program_guard(prog):
        out = build()
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return prog, outs, sg.compile(prog, outs, backend=backend, **options)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numbers_match_the_reference(dtype):
    shape = (3, 7)   # 21 numbers: the last block is partly used

    def build():
        return [sg.random.uniform(shape, dtype=dtype, seed=2 ** 33 + 5),
                sg.random.normal(shape, 0.5, 2.0, dtype=dtype, seed=9),
                sg.random.uniform(shape, -2.0, 3.0, dtype=dtype, seed=1)]
    _, _, fn = _compile(build)
    uniform, normal, ranged = fn(rng_step=4)
    np.testing.assert_array_equal(uniform, ref.uniform(shape, dtype, seed=2 ** 33 + 5, step=4))
    np.testing.assert_array_equal(
        ranged, ref.uniform(shape, dtype, seed=1, stream=2, step=4, low=-2.0, high=3.0))
    want = ref.normal(shape, dtype, seed=9, stream=1, step=4, mean=0.5, std=2.0)
    rtol = 1e-13 if dtype == "float64" else 1e-2 if dtype.endswith("16") else 1e-6
    np.testing.assert_allclose(normal.astype(np.float64), want.astype(np.float64), rtol=rtol)
    assert uniform.dtype == normal.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_sample_forward_matches_the_reference(sample, dtype):
    prog, fetches = sample.program(dtype)
    feeds = sample.feeds(dtype)
    got, = sg.compile(prog, fetches)(**feeds)
    want = sample.expected(*[feeds[f"in{i}"] for i in range(len(sample.inputs))])
    assert got.dtype == want.dtype
    if sample.op == "random_normal":   # the reference takes math.log/cos/sin: a few ulps apart
        np.testing.assert_allclose(got, want, rtol=1e-13 if dtype == "float64" else 1e-3)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_distributions(dtype):
    n = 20000
    _, _, fn = _compile(lambda: [sg.random.uniform([n], dtype=dtype),
                                 sg.random.normal([n], dtype=dtype)])
    u, z = (a.astype(np.float64) for a in fn())
    assert 0.0 <= u.min() and u.max() < 1.0   # [0, 1) in every dtype
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.02


def test_interpreter_and_numpy_backend_are_bit_identical():
    def build():
        x = sg.data("x", [None, 5], "float32")
        return [sg.random.uniform(x, seed=3), sg.random.normal(x, dtype="float64", seed=3),
                sg.random.normal([4, 3], dtype="float16"),
                sg.random.uniform([6], 1.0, 2.0, dtype="bfloat16"),
                sg.nn.dropout(x * 2.0, 0.25, seed=4)]
    prog, outs, interpreted = _compile(build)
    x = np.random.default_rng(0).standard_normal((70, 5)).astype(np.float32)
    for options in ({}, {"fusion": False}, {"chunk_size": 32}):
        compiled = sg.compile(prog, outs, backend="numpy", **options)
        for step in (0, 1, 2 ** 40 + 3):
            for want, got in zip(interpreted(x, rng_step=step), compiled(x, rng_step=step)):
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)


def test_step_advances_after_each_call_and_feeding_it_replays():
    _, _, fn = _compile(lambda: sg.random.uniform([5]))
    first, second, third = (fn()[0] for _ in range(3))
    assert not np.array_equal(first, second) and not np.array_equal(second, third)
    np.testing.assert_array_equal(fn(rng_step=1)[0], second)    # replays call 1,
    np.testing.assert_array_equal(fn()[0], third)               # and goes on from there
    assert fn.state["rng_step"] == 3


def test_a_failed_call_does_not_advance_the_step():
    _, _, fn = _compile(lambda: sg.random.uniform(sg.data("x", [None]), seed=1))
    first = fn(np.zeros(3))[0]
    with pytest.raises(sg.FeedError):
        fn(np.zeros((3, 2)))
    second = fn(np.zeros(3))[0]
    np.testing.assert_array_equal(fn(np.zeros(3), rng_step=1)[0], second)
    assert not np.array_equal(first, second)


def test_step_is_an_int64_parameter_of_the_program_and_artifacts_advance_it(tmp_path):
    prog, outs, fn = _compile(lambda: sg.random.normal([4], seed=5), backend="numpy")
    step, = [v for v in prog.parameters if v.name == RNG_STEP]
    assert step.shape == () and step.dtype == np.int64 and step.stop_gradient
    assert "rng_step" in str(prog)
    loaded = sg.load(fn.save(tmp_path / "artifact"))
    for _ in range(2):
        np.testing.assert_array_equal(loaded()[0], fn()[0])


def test_every_random_op_draws_its_own_stream():
    def build():
        return [sg.random.uniform([8]), sg.random.uniform([8]), sg.random.normal([8])]
    prog, outs, fn = _compile(build)
    a, b, _ = fn()
    assert not np.array_equal(a, b)
    assert [op.attrs["stream"] for op in prog.ops if op.name.startswith("random")] == [0, 1, 2]
    clone, _ = prog.clone()
    with sg.program_guard(clone):
        more = sg.random.uniform([8])
    assert more.op.attrs["stream"] == 3


def test_shape_known_at_run_time_and_from_a_value():
    def build():
        x = sg.data("x", [None, 3])
        u = sg.random.uniform(x, seed=2)
        assert u.shape == (None, 3)
        return u
    _, _, fn = _compile(build, backend="numpy")
    small, = fn(np.zeros((2, 3)), rng_step=0)
    large, = fn(np.zeros((5, 3)), rng_step=0)
    np.testing.assert_array_equal(small.reshape(-1), large.reshape(-1)[:6])   # same stream


def test_loop_bodies_need_a_counter_and_draw_new_numbers_each_iteration():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [3])
        with pytest.raises(ValueError, match="inside a loop body, pass counter="):
            sg.scan(lambda c, _: (c + sg.random.uniform([3]), None), x, length=2)
        with pytest.raises(ValueError, match="inside a loop body"):
            sg.while_loop(lambda v: sg.sum(v) < 3.0, lambda v: [v + sg.random.uniform([3])],
                          [x])
        chosen = sg.cond(sg.sum(x) > 0, lambda: sg.random.uniform([3]), lambda: x)

        def step(carry, _):
            return carry + np.int64(1), sg.random.normal([3], counter=carry)
        _, drawn = sg.scan(step, sg.constant(np.int64(0)), length=4)
        looped = sg.fori_loop(0, 2, lambda i, v: v + sg.random.uniform([3], counter=i), x)
        fn = sg.compile(x.program, [chosen, drawn, looped], backend="numpy")
    chosen_v, drawn_v, looped_v = fn(np.ones(3, "float32"), rng_step=2)
    assert len({row.tobytes() for row in drawn_v}) == 4
    assert not np.array_equal(chosen_v, np.ones(3))
    np.testing.assert_array_equal(drawn_v[1], ref.normal((3,), seed=0, stream=1, step=2,
                                                         counter=1).astype(np.float32))
    assert looped_v.shape == (3,)


def _dropout_program(p, dynamic=True):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None if dynamic else 50, 40], "float64")
        r = sg.data("r", [None if dynamic else 50, 40], "float64")
        y = sg.nn.dropout(x, p, seed=6)
        g, = ir_backward.grad(y, [x], grad_outputs=[r], create_graph=True)
        h, = ir_backward.grad(sg.sum(g * g), [x], allow_unused=True, unused="zeros")
    return prog, [y, g, h]


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_scales_kept_values_and_its_gradient_uses_the_same_mask(p):
    prog, outs = _dropout_program(p)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 1.5, (50, 40))
    r = rng.standard_normal((50, 40))
    for backend in ("interpreter", "numpy"):
        y, g, h = sg.compile(prog, outs, backend=backend)(x=x, r=r, rng_step=3)
        keep = y != 0
        assert abs(keep.mean() - (1 - p)) < 0.05
        np.testing.assert_allclose(y[keep], x[keep] / (1 - p))
        np.testing.assert_allclose(g, np.where(keep, r / (1 - p), 0.0))
        np.testing.assert_array_equal(h, np.zeros_like(x))   # linear in x


def test_dropout_is_the_identity_when_not_training_and_zero_at_p_one():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [4])
        assert sg.nn.dropout(x, 0.5, training=False) is x
        assert sg.nn.dropout(x, 0.0) is x
        y = sg.nn.dropout(x, 1.0)
        g, = ir_backward.grad(sg.sum(y), [x])
        out = sg.compile(x.program, [y, g])(np.ones(4, "float32"))
    np.testing.assert_array_equal(out[0], np.zeros(4))
    np.testing.assert_array_equal(out[1], np.zeros(4))


@pytest.mark.parametrize("backend", ["interpreter", "numpy", "c"])
def test_dropout2d_zeroes_whole_channels_and_its_gradient_uses_the_same_mask(backend):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 30, 2, 3], "float64")
        r = sg.data("r", [None, 30, 2, 3], "float64")
        y = sg.nn.dropout2d(x, 0.25, seed=3)
        g, = ir_backward.grad(y, [x], grad_outputs=[r], create_graph=True)
        h, = ir_backward.grad(sg.sum(g * g), [x], allow_unused=True, unused="zeros")
    rng = np.random.default_rng(2)
    x_v, r_v = rng.uniform(0.5, 1.5, (20, 30, 2, 3)), rng.standard_normal((20, 30, 2, 3))
    fn = sg.compile(prog, [y, g, h], backend=backend)
    y_v, g_v, h_v = fn(x=x_v, r=r_v, rng_step=5)
    keep = ref.uniform((20, 30, 1, 1), "float32", seed=3, step=5) >= np.float32(0.25)
    assert abs(keep.mean() - 0.75) < 0.05
    np.testing.assert_allclose(y_v, np.where(keep, x_v / 0.75, 0.0))
    np.testing.assert_allclose(g_v, np.where(keep, r_v / 0.75, 0.0))
    np.testing.assert_array_equal(h_v, np.zeros_like(x_v))   # linear in x
    again, _, _ = fn(x=x_v, r=r_v, rng_step=5)                # deterministic per step,
    np.testing.assert_array_equal(again, y_v)
    assert not np.array_equal(fn(x=x_v, r=r_v)[0], y_v)       # a new mask at the next step


def test_dropout2d_is_the_identity_when_not_training_and_zero_at_p_one():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [2, 3, 4, 4])
        assert sg.nn.dropout2d(x, 0.5, training=False) is x
        assert sg.nn.dropout2d(x, 0.0) is x
        y = sg.nn.dropout2d(x, 1.0)
        out, = sg.compile(x.program, [y])(np.ones((2, 3, 4, 4), "float32"))
    np.testing.assert_array_equal(out, np.zeros((2, 3, 4, 4)))


def test_random_ops_carry_no_gradient():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [3])
        u = sg.random.uniform(x) * 2.0
        g, = ir_backward.grad(sg.sum(u), [x], allow_unused=True)
    assert g is None
    assert sg.REGISTRY["random_uniform"].vjp is None


@pytest.mark.parametrize("call,error,match", [
    (lambda: sg.random.uniform([2], seed=-1), ValueError, r"seed must be an int in \[0, 2\*\*64\)"),
    (lambda: sg.random.normal([2], seed=2 ** 64), ValueError, "seed"),
    (lambda: sg.random.uniform([2], dtype="int32"), DTypeError, "floating dtype"),
    (lambda: sg.random.uniform([2, -1]), ShapeError, "shape must be a sequence"),
    (lambda: sg.random.normal([2], mean=sg.constant(1.0)), TypeError, "mean must be"),
    (lambda: sg.random.uniform([2], counter=sg.constant(1.5)), DTypeError,
     "random_uniform: the counter must be an int scalar"),
    (lambda: sg.nn.dropout(sg.constant(np.ones(2)), 1.5), ValueError, r"p must be"),
    (lambda: sg.nn.dropout2d(sg.constant(np.ones((1, 2, 2, 2))), -0.1), ValueError,
     r"dropout2d: p must be a number in \[0, 1\], got -0.1"),
    (lambda: sg.nn.dropout2d(sg.data("x", [2, 3, 4])), ShapeError,
     r"dropout2d: needs a 4-D NCHW input, got float32\[2, 3, 4\]"),
    (lambda: sg.nn.dropout2d(sg.data("i", [1, 2, 2, 2], "int32")), DTypeError,
     "dropout2d: needs a floating input"),
])
def test_errors(call, error, match):
    with sg.program_guard(sg.Program()):
        with pytest.raises(error, match=match):
            call()
