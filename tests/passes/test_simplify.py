import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ops.shape import broadcast_like
from tests.passes.helpers import apply, op_names, run_both

PIPE = ["simplify", "dce"]


def _compile(build, shape=(3, 4), dtype="float64"):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", list(shape), dtype)
        y = build(x)
    return prog, x, y


@pytest.mark.parametrize("build", [
    lambda x: x * 1.0, lambda x: 1.0 * x, lambda x: x + -0.0, lambda x: -0.0 + x,
    lambda x: x - 0.0, lambda x: x / 1.0, lambda x: -(-x),
    lambda x: x - sg.zeros([3, 4], "float64"), lambda x: sg.ones_like(x) * x,
    lambda x: sg.reshape(x, [3, 4]), lambda x: sg.transpose(sg.transpose(x)),
    lambda x: sg.broadcast_to(x, [3, 4]),
], ids=["mul1", "1mul", "add-0", "-0add", "sub0", "div1", "negneg", "subzeros", "seed",
        "reshape-same", "transpose-twice", "broadcast-same"])
def test_identities_vanish(build):
    prog, x, y = _compile(build)
    new, fetches, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data"]
    assert fetches[0].op.name == "data"
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


@pytest.mark.parametrize("build", [lambda x: x + 0.0, lambda x: 0.0 + x,
                                   lambda x: x + sg.zeros([3, 4], "float64"),
                                   lambda x: x - (-0.0)], ids=["add0", "0add", "addzeros", "sub-0"])
@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_adding_a_positive_zero_is_kept_since_it_turns_a_negative_zero_positive(build, backend):
    prog, x, y = _compile(build)
    new, _, _ = apply(prog, [y], PIPE)
    assert len(op_names(new)) > 1
    xs = np.array([[-0.0, 0.0, 1.0, -1.0]] * 3)
    want = sg.compile(prog, [y], backend="interpreter")(x=xs)[0]
    got = sg.compile(prog, [y], backend=backend)(x=xs)[0]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert not np.signbit(want[0, 0])


def test_identity_that_broadcasts_is_kept():
    prog, x, y = _compile(lambda x: x * sg.ones([2, 3, 4], "float64"))
    new, fetches, _ = apply(prog, [y], PIPE)
    assert fetches[0].shape == (2, 3, 4)
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


def test_chains_collapse():
    prog, x, y = _compile(lambda x: sg.transpose(sg.reshape(sg.reshape(x, [4, 3]), [2, 6]))
                          - 0.0)
    new, _, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data", "reshape", "transpose"]
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


def test_transpose_composition():
    prog, x, y = _compile(lambda x: sg.transpose(sg.transpose(x, [1, 2, 0]), [1, 2, 0]),
                          shape=(2, 3, 4))
    new, fetches, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data", "transpose"]
    assert fetches[0].op.attrs["axes"] == (2, 0, 1)
    run_both(prog, [y], PIPE, {"x": np.random.rand(2, 3, 4)})


def test_constant_folding():
    prog, x, y = _compile(lambda x: x * (sg.constant(2.0, "float64") * 3.0 + sg.exp(
        sg.constant([1.0, 2.0, 3.0, 4.0], "float64"))))
    new, _, report = apply(prog, [y], PIPE)
    assert op_names(new) == ["data", "constant", "multiply"]
    assert report.stats["simplified"] >= 3
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


def test_uniform_values_fold_to_a_broadcast_scalar():
    prog, x, y = _compile(lambda x: x * (sg.ones([3, 4], "float64") * 3.0))
    new, _, _ = apply(prog, [y], PIPE)
    assert "full" not in op_names(new)
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


def test_dynamic_shapes_and_named_values_survive():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.tanh(x) * 1.0
        y.name = "result"
    new, fetches, _ = apply(prog, [y], PIPE)
    assert fetches[0].name == "result" and fetches[0].op.name == "tanh"
    run_both(prog, [y], PIPE, {"x": np.random.rand(5, 4)})


def test_gradient_seed_of_ones_is_removed():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [8], "float64")
        loss = sg.sum(sg.sin(x))
        g, = ir_backward.grad(loss, [x])
    before = len(apply(prog, [g], ["prune"])[0].ops)
    new, _, _ = apply(prog, [g], ["prune", "simplify", "dce"])
    assert len(new.ops) < before
    assert op_names(new).count("cos") == 1
    run_both(prog, [g], ["prune", "simplify", "dce"], {"x": np.random.rand(8)})


def test_simplify_is_linear_on_long_chains():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4], "float64")
        y = x
        for _ in range(3000):
            y = -(y * 1.0)
    new, _, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data"]


def test_multiplying_by_minus_one_is_a_negation():
    prog, x, y = _compile(lambda x: -(sg.sin(x) * -1.0))
    new, _, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data", "sin"]
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 4)})


def test_fourth_derivative_of_sin_is_sin():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [5], "float64")
        g = sg.sin(x)
        for _ in range(4):
            g, = ir_backward.grad(sg.sum(g), [x], create_graph=True)
    new, _, _ = apply(prog, [g], ["prune", "cse", "simplify", "dce"])
    assert op_names(new) == ["data", "sin"]


def test_user_op_declaring_an_identity_takes_part():
    def shifted(x, y):
        return x + y

    shift = sg.custom_op("shift_by_test_algebra", shifted, lambda a, b: a, None,
                         category="elementwise", algebra=sg.Algebra(identity=(0, (1,))))
    prog, x, y = _compile(lambda x: shift(x, sg.zeros([3, 4], "float64")))
    new, fetches, _ = apply(prog, [y], PIPE)
    assert op_names(new) == ["data"]
    prog, x, y = _compile(lambda x: shift(sg.zeros([3, 4], "float64"), x))   # not declared
    new, fetches, _ = apply(prog, [y], PIPE)
    assert "shift_by_test_algebra" in op_names(new)


def test_elementwise_op_reads_a_scalar_under_data_movement_directly():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        s = sg.sum(x) * 0.5                      # 0-d, not known statically
        spread = sg.expand_dims(broadcast_like(s, sg.sum(x, axis=1)), 1)   # [None, 1]
        y = x * spread
    new, fetches, _ = apply(prog, [y], PIPE)
    assert "expand_dims" not in op_names(new) and "broadcast_like" not in op_names(new)
    run_both(prog, [y], PIPE, {"x": np.random.rand(5, 4)})


def test_data_movement_of_a_non_scalar_is_kept():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3, 3], "float64")
        y = x * sg.transpose(x)                  # same type, different values: must stay
    new, fetches, _ = apply(prog, [y], PIPE)
    assert "transpose" in op_names(new)
    run_both(prog, [y], PIPE, {"x": np.random.rand(3, 3)})


def test_math_on_a_broadcast_scalar_runs_on_the_scalar():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        s = sg.sum(x)                                   # 0-d, known at run time only
        spread = broadcast_like(s, sg.exp(x))           # [None, 4]
        y = sg.sin(x) * ((spread * 0.3) - s)            # scalar math, then one broadcast
    new, fetches, _ = apply(prog, [y], PIPE)
    assert "broadcast_like" not in op_names(new) and "exp" not in op_names(new)
    run_both(prog, [y], PIPE, {"x": np.random.rand(5, 4)})


def test_sum_gradient_fetched_with_the_loss_fuses_into_one_loop():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float32")
        loss = sg.sum(sg.exp(-x * x) * 0.3 + sg.sin(x))
        gx, = ir_backward.grad(loss, [x])
    new, fetches, report = apply(prog, [loss, gx], None)
    assert report.stats["fused_groups"] == 1 and "broadcast_like" not in op_names(new)
    run_both(prog, [loss, gx], None, {"x": np.random.rand(100).astype("float32")}, rtol=1e-5)


def test_inputs_read_for_their_shape_read_the_earliest_value_of_that_shape():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        b = sg.data("b", [3], "float64")
        h = sg.tanh(x + b)
        loss = sg.mean(h * h)                   # mean's gradient reads size(h * h)
        gb, = ir_backward.grad(loss, [b])
    new, fetches, _ = apply(prog, [loss, gb], PIPE)
    [size] = [op for op in new.ops if op.name == "size"]
    assert size.inputs[0].op.name == "data" and size.inputs[0].name == "x"
    run_both(prog, [loss, gb], None, {"x": np.random.rand(5, 3), "b": np.random.rand(3)})


def test_an_operand_that_may_stretch_is_no_shape_source():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        y = sg.data("y", [None, 3], "float64")      # either may be 1 along dim 0 at run time
        gx, gy = ir_backward.grad(sg.mean(x * y), [x, y])
    new, fetches, _ = apply(prog, [gx, gy], PIPE)
    [size] = [op for op in new.ops if op.name == "size"]
    assert size.inputs[0].op.name == "multiply"
    run_both(prog, [gx, gy], None, {"x": np.random.rand(4, 3), "y": np.random.rand(4, 3)})
    # a stretched unknown dim is refused when the program runs (the gradients assume none)
    for rows in [(1, 4), (4, 1)]:
        with pytest.raises(sg.FeedError, match="never broadcast"):
            sg.compile(prog, [gx, gy], backend="interpreter")(
                x=np.random.rand(rows[0], 3), y=np.random.rand(rows[1], 3))
