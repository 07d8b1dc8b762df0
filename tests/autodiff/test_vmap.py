"""sg.vmap: in_axes/out_axes as JAX defines them, nesting, composition with grad in both
orders, program size independent of the batch size, and the errors that name the argument."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.ir.graph import walk_ops

R = np.random.default_rng(7)


def _run(prog, fetches, **feeds):
    return sg.compile(prog, fetches, backend="interpreter")(**feeds)


def _mlp_loss(w1, w2, x, y):
    h = sg.tanh(x @ w1)
    return sg.mean((h @ w2 - y) ** 2)


def _np_mlp_grads(w1, w2, x, y):
    h = np.tanh(x @ w1)
    r = h @ w2 - y
    dr = 2 * r / r.size
    g2 = np.outer(h, dr)
    dh = (w2 @ dr) * (1 - h ** 2)
    return np.outer(x, dh), g2


def test_in_axes_and_out_axes():
    a, b = R.normal(size=(3, 5)).astype("float32"), R.normal(size=(3,)).astype("float32")
    with sg.program_guard(sg.Program()) as prog:
        x, v = sg.data("x", [3, 5]), sg.data("v", [3])
        f = sg.vmap(lambda col, vec: (col * vec, sg.sum(vec)), in_axes=(1, None),
                    out_axes=(1, None))
        prod, total = f(x, v)
        pair = sg.vmap(lambda p: p[0] - p[1], in_axes=((0, 1),))((x, sg.transpose(x)))
    assert prod.shape == (3, 5) and total.shape == () and pair.shape == (3, 5)
    got = _run(prog, [prod, total, pair], x=a, v=b)
    np.testing.assert_allclose(got[0], a * b[:, None], rtol=1e-6)
    np.testing.assert_allclose(got[1], b.sum(), rtol=1e-6)
    np.testing.assert_allclose(got[2], 0 * a, atol=0)


def test_shared_result_is_broadcast_and_negative_out_axes():
    with sg.program_guard(sg.Program()) as prog:
        x, c = sg.data("x", [4, 2]), sg.data("c", [3])
        shared, moved = sg.vmap(lambda row: (c * 2.0, row * 1.0), out_axes=(0, -1))(x)
    assert shared.shape == (4, 3) and moved.shape == (2, 4)
    a = R.normal(size=(4, 2)).astype("float32")
    got = _run(prog, [shared, moved], x=a, c=np.arange(3, dtype="float32"))
    np.testing.assert_array_equal(got[0], np.tile(np.arange(3) * 2.0, (4, 1)))
    np.testing.assert_array_equal(got[1], a.T)


def test_nested_vmap_is_an_outer_product_of_maps():
    a, b = R.normal(size=(3,)).astype("float32"), R.normal(size=(4,)).astype("float32")
    with sg.program_guard(sg.Program()) as prog:
        x, y = sg.data("x", [3]), sg.data("y", [4])
        table = sg.vmap(lambda s: sg.vmap(lambda t: s * t + 1.0)(y))(x)
    assert table.shape == (3, 4)
    np.testing.assert_allclose(_run(prog, [table], x=a, y=b)[0], np.outer(a, b) + 1, rtol=1e-6)


def test_per_example_gradients_vmap_of_grad():
    w1v, w2v = R.normal(size=(3, 4)), R.normal(size=(4, 2))
    xs, ys = R.normal(size=(5, 3)), R.normal(size=(5, 2))
    with sg.program_guard(sg.Program()) as prog:
        w1 = sg.data("w1", [3, 4], "float64")
        w2 = sg.data("w2", [4, 2], "float64")
        x, y = sg.data("x", [5, 3], "float64"), sg.data("y", [5, 2], "float64")

        def example_grads(xi, yi):
            return ir_backward.grad(_mlp_loss(w1, w2, xi, yi), [w1, w2])

        g1, g2 = sg.vmap(example_grads)(x, y)
    assert g1.shape == (5, 3, 4) and g2.shape == (5, 4, 2)
    assert not any(op.name == "scan" for op in prog.ops)   # every op has a rule
    got = _run(prog, [g1, g2], w1=w1v, w2=w2v, x=xs, y=ys)
    for i in range(5):
        e1, e2 = _np_mlp_grads(w1v, w2v, xs[i], ys[i])
        np.testing.assert_allclose(got[0][i], e1, rtol=1e-10)
        np.testing.assert_allclose(got[1][i], e2, rtol=1e-10)


def test_grad_through_vmap():
    a = R.normal(size=(4, 3))
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4, 3], "float64")
        y = sg.vmap(lambda row: sg.sum(sg.sin(row) * row))(x)
        g, = ir_backward.grad(sg.sum(y), [x])
    np.testing.assert_allclose(_run(prog, [g], x=a)[0], np.cos(a) * a + np.sin(a),
                               rtol=1e-12)


def _chain(row, w):
    """About 50 ops per example: seven rounds of matmul, tanh, a multiply, softmax, mean and
    the adds."""
    for _ in range(7):
        row = sg.tanh(row @ w) * 0.5 + sg.nn.softmax(row) - sg.mean(row)
    return row


def _added_ops(batch):
    with sg.program_guard(sg.Program()) as prog:
        x, w = sg.data("x", [batch, 8]), sg.data("w", [8, 8])
        before = len(prog.ops)
        sg.vmap(lambda row: _chain(row, w))(x)
    return len(prog.ops) - before


def test_a_50_op_function_over_1000_examples_adds_about_50_ops():
    with sg.program_guard(sg.Program()) as prog:
        x, w = sg.data("x", [8]), sg.data("w", [8, 8])
        before = len(prog.ops)
        _chain(x, w)
    plain = len(prog.ops) - before
    assert 45 <= plain <= 60
    added = _added_ops(1000)
    assert added == _added_ops(3) and added <= 1.2 * plain


def test_no_per_example_loop_in_the_generated_code():
    """Per-example gradients of an MLP: every op has a rule, so the compiled program holds
    no loop op and the generated NumPy no Python loop; the C computes the same."""
    feeds = {"w1": R.normal(size=(3, 4)), "w2": R.normal(size=(4, 2)),
             "x": R.normal(size=(6, 3)), "y": R.normal(size=(6, 2))}
    feeds = {k: v.astype("float32") for k, v in feeds.items()}
    with sg.program_guard(sg.Program()) as prog:
        w1, w2 = sg.data("w1", [3, 4]), sg.data("w2", [4, 2])
        x, y = sg.data("x", [6, 3]), sg.data("y", [6, 2])
        grads = sg.vmap(lambda xi, yi: ir_backward.grad(_mlp_loss(w1, w2, xi, yi), [w1, w2]))(
            x, y)
    want = _run(prog, grads, **feeds)
    for backend in ("numpy", "c"):
        fn = sg.compile(prog, grads, backend=backend)
        loops = {"scan", "while_loop", "cond"}
        assert not any(op.name in loops for op in walk_ops(fn.program.ops)), backend
        if backend == "numpy":
            run = fn.source[fn.source.index("def run("):]
            assert "for " not in run and "while " not in run
        for got, expected in zip(fn(**feeds), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_symbolic_batch_size():
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [None, 3])
        y = sg.vmap(lambda row: sg.sum(row * row))(x)
    assert y.shape == (None,)
    a = R.normal(size=(6, 3)).astype("float32")
    np.testing.assert_allclose(_run(prog, [y], x=a)[0], (a * a).sum(1), rtol=1e-6)


def test_negative_in_axes_and_axis_size_with_no_batched_argument():
    a = R.normal(size=(3, 4)).astype("float32")
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [3, 4])
        col_sums = sg.vmap(lambda col: sg.sum(col), in_axes=-1)(x)
        tiled = sg.vmap(lambda m: sg.sum(m, axis=0), in_axes=None, axis_size=5)(x)
    assert col_sums.shape == (4,) and tiled.shape == (5, 4)
    got = _run(prog, [col_sums, tiled], x=a)
    np.testing.assert_allclose(got[0], a.sum(0), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.tile(a.sum(0), (5, 1)), rtol=1e-6)


def test_errors_name_the_argument():
    with sg.program_guard(sg.Program()) as prog:
        x, y = sg.data("x", [4, 3]), sg.data("y", [5, 3])
        before = len(prog.ops)
        with pytest.raises(ValueError, match="argument 1 has batch size 5.*argument 0 says 4"):
            sg.vmap(lambda a, b: a + b)(x, y)
        with pytest.raises(ValueError, match="in_axes 2 is out of range for argument 0"):
            sg.vmap(lambda a: a, in_axes=2)(x)
        with pytest.raises(ValueError, match="2 entries for 1 arguments"):
            sg.vmap(lambda a: a, in_axes=(0, 0))(x)
        with pytest.raises(ValueError, match="give axis_size"):
            sg.vmap(lambda a: a, in_axes=None)(x)
        with pytest.raises(ValueError, match="out_axes is None for result"):
            sg.vmap(lambda a: a * 2.0, out_axes=None)(x)
        with pytest.raises(ValueError, match="in_axes entry \\(0, 0\\) does not match the "
                                             "structure of argument 0"):
            sg.vmap(lambda a: a, in_axes=((0, 0),))(x)
        with pytest.raises(ValueError, match="in_axes -3 is out of range for argument 1"):
            sg.vmap(lambda a, b: a, in_axes=(0, -3))(x, x)
        with pytest.raises(TypeError, match="in_axes must be an int"):
            sg.vmap(lambda a: a, in_axes="0")
        assert len(prog.ops) == before


def _rowsum_forward(x):
    return x.sum(-1, keepdims=True) * np.ones_like(x)


def test_an_op_without_a_rule_is_batched_by_a_loop():
    rowsum = sg.custom_op("test_vmap_rowsum", _rowsum_forward,
                          lambda t: t, lambda inputs, outputs, g: [g[0]])
    a = R.normal(size=(4, 2, 3)).astype("float32")
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4, 2, 3])
        y = sg.vmap(lambda m: rowsum(m) * 2.0)(x)
    assert [op.name for op in prog.ops].count("scan") == 1
    np.testing.assert_allclose(_run(prog, [y], x=a)[0], 2 * _rowsum_forward(a), rtol=1e-6)


def test_cond_with_a_batched_predicate():
    a = np.array([-2.0, 3.0, -1.0, 4.0], "float32")
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4])
        y = sg.vmap(lambda s: sg.cond(s > 0, lambda v: v * 10.0, lambda v: -v, s))(x)
    np.testing.assert_array_equal(_run(prog, [y], x=a)[0], np.where(a > 0, a * 10, -a))


def test_vmap_inside_a_loop_body():
    a = R.normal(size=(3, 2)).astype("float32")
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [3, 2])

        def step(carry, _):
            return sg.vmap(lambda row: sg.sin(row) + sg.sum(row))(carry), None

        y, _ = sg.scan(step, x, length=2)
    expected = a
    for _ in range(2):
        expected = np.sin(expected) + expected.sum(1, keepdims=True)
    np.testing.assert_allclose(_run(prog, [y], x=a)[0], expected, rtol=1e-5)


def test_per_example_gradients_on_numpy_match_the_interpreter():
    with sg.program_guard(sg.Program()) as prog:
        w1, w2 = sg.data("w1", [3, 4]), sg.data("w2", [4, 2])
        x, y = sg.data("x", [6, 3]), sg.data("y", [6, 2])
        grads = sg.vmap(lambda xi, yi: ir_backward.grad(_mlp_loss(w1, w2, xi, yi), [w1, w2]))(
            x, y)
    feeds = {"w1": R.normal(size=(3, 4)), "w2": R.normal(size=(4, 2)),
             "x": R.normal(size=(6, 3)), "y": R.normal(size=(6, 2))}
    feeds = {k: v.astype("float32") for k, v in feeds.items()}
    fn = sg.compile(prog, grads, backend="numpy")
    assert "scan" not in fn.source
    for got, want in zip(fn(**feeds), _run(prog, grads, **feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_grad_of_a_per_example_gradient_penalty():
    """grad through vmap of grad (create_graph=True), against central differences."""
    w_value, x_value = R.normal(size=(3, 2)), R.normal(size=(5, 3))
    with sg.program_guard(sg.Program()) as prog:
        w, x = sg.data("w", [3, 2], "float64"), sg.data("x", [5, 3], "float64")

        def squared_grad_norm(xi):
            g, = ir_backward.grad(sg.sum(sg.tanh(xi @ w) ** 2), [w], create_graph=True)
            return sg.sum(g * g)

        penalty = sg.sum(sg.vmap(squared_grad_norm)(x))
        g_w, = ir_backward.grad(penalty, [w])
    fn = sg.compile(prog, [penalty, g_w], backend="interpreter")
    numeric = np.zeros_like(w_value)
    for index in np.ndindex(w_value.shape):
        plus, minus = w_value.copy(), w_value.copy()
        plus[index] += 1e-6
        minus[index] -= 1e-6
        numeric[index] = (fn(w=plus, x=x_value)[0] - fn(w=minus, x=x_value)[0]) / 2e-6
    np.testing.assert_allclose(fn(w=w_value, x=x_value)[1], numeric, rtol=1e-6, atol=1e-8)


def test_vmap_of_jacobian_is_a_per_example_jacobian():
    a = R.normal(size=(4, 3))
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4, 3], "float64")
        jac = sg.vmap(lambda v: sg.autodiff.jacobian(sg.sin(v) * sg.sum(v), v))(x)
    assert jac.shape == (4, 3, 3) and "scan" not in [op.name for op in prog.ops]
    expected = np.stack([np.diag(np.cos(v) * v.sum()) + np.outer(np.sin(v), np.ones(3))
                         for v in a])
    np.testing.assert_allclose(_run(prog, [jac], x=a)[0], expected, rtol=1e-12)
