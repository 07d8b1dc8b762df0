"""vmap through control flow (symgrad/autodiff/vmap_regions.py): a batched ``cond`` predicate
computes both branches and selects, a shared one keeps one ``cond``; ``scan``/``fori_loop``
carry the batch in one loop; a ``while_loop`` with a batched predicate runs until every
example is done, freezing finished ones; nested vmap, vmap of grad and grad of vmap through
them; random ops in a loop body draw per example. Each result is checked against NumPy or the
loop fallback (every op batched by a scan over the examples)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.autodiff import vmap as vmap_module

R = np.random.default_rng(11)


def _run(prog, fetches, backend="interpreter", **feeds):
    return sg.compile(prog, fetches, backend=backend)(**feeds)


def _names(prog):
    return [op.name for op in prog.ops]


def _no_rules(opdef):
    return None


def test_cond_with_a_batched_predicate_selects_between_both_branches():
    a = np.array([-2.0, 3.0, -1.0, 4.0])
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4], "float64")
        y = sg.vmap(lambda s: sg.cond(s > 0, lambda v: v * 10.0, lambda v: -v, s))(x)
        g, = ir_backward.grad(sg.sum(y), [x])
    assert "cond" not in _names(prog) and "scan" not in _names(prog)
    assert "where" in _names(prog)
    for backend in ("interpreter", "numpy", "c"):
        out = _run(prog, [y, g], backend, x=a)
        np.testing.assert_array_equal(out[0], np.where(a > 0, a * 10, -a))
        np.testing.assert_array_equal(out[1], np.where(a > 0, 10.0, -1.0))


def test_cond_with_a_shared_predicate_stays_one_cond():
    a, w = R.normal(size=(5, 3)), R.normal(size=(3,))
    with sg.program_guard(sg.Program()) as prog:
        x, wv = sg.data("x", [5, 3], "float64"), sg.data("w", [3], "float64")
        y = sg.vmap(lambda r: sg.cond(sg.sum(wv) > 0, lambda v: v * wv, lambda v: v - wv, r))(x)
    assert _names(prog).count("cond") == 1 and "scan" not in _names(prog)
    for sign in (1, -1):
        want = a * (sign * w) if (sign * w).sum() > 0 else a - sign * w
        np.testing.assert_allclose(_run(prog, [y], x=a, w=sign * w)[0], want)


def _rnn_np(x, w, h0):
    h, ys = h0, []
    for step in x:
        h = np.tanh(h @ w + step)
        ys.append(h)
    return h, np.stack(ys)


def test_scan_carries_the_batch_in_one_loop():
    xs, w, h0 = R.normal(size=(4, 6, 3)), R.normal(size=(3, 3)), R.normal(size=(3,))
    with sg.program_guard(sg.Program()) as prog:
        x, wv, hv = (sg.data("x", [4, 6, 3], "float64"), sg.data("w", [3, 3], "float64"),
                     sg.data("h0", [3], "float64"))

        def rnn(seq):
            return sg.scan(lambda h, t: (sg.tanh(h @ wv + t), sg.tanh(h @ wv + t)), hv, seq)

        h, ys = sg.vmap(rnn)(x)
    assert _names(prog).count("scan") == 1 and h.shape == (4, 3) and ys.shape == (4, 6, 3)
    for backend in ("interpreter", "numpy", "c"):
        got = _run(prog, [h, ys], backend, x=xs, w=w, h0=h0)
        for i in range(4):
            want = _rnn_np(xs[i], w, h0)
            np.testing.assert_allclose(got[0][i], want[0], rtol=1e-12)
            np.testing.assert_allclose(got[1][i], want[1], rtol=1e-12)


def test_per_example_gradients_through_a_scan_match_the_loop_fallback():
    xs, w, h0 = R.normal(size=(4, 5, 3)), R.normal(size=(3, 3)), R.normal(size=(3,))

    def build():
        with sg.program_guard(sg.Program()) as prog:
            x, wv, hv = (sg.data("x", [4, 5, 3], "float64"), sg.data("w", [3, 3], "float64"),
                         sg.data("h0", [3], "float64"))

            def loss(seq):
                h, _ = sg.scan(lambda h, t: (sg.tanh(h @ wv + t), None), hv, seq)
                return ir_backward.grad(sg.sum(h * h), [wv])[0]

            g = sg.vmap(loss)(x)
        return prog, g

    prog, g = build()
    got = _run(prog, [g], x=xs, w=w, h0=h0)[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vmap_module, "batch_rule", _no_rules)
        loop_prog, loop_g = build()
    np.testing.assert_allclose(got, _run(loop_prog, [loop_g], x=xs, w=w, h0=h0)[0],
                               rtol=1e-12)
    assert _names(prog).count("scan") < _names(loop_prog).count("scan")


def test_fori_loop_static_and_value_bounds():
    a = R.normal(size=(3, 2))
    with sg.program_guard(sg.Program()) as prog:
        x, n = sg.data("x", [3, 2], "float64"), sg.data("n", [], "int64")
        static = sg.vmap(lambda r: sg.fori_loop(0, 3, lambda i, c: c * 0.5 + sg.sum(c), r))(x)
        dynamic = sg.vmap(lambda r: sg.fori_loop(0, n, lambda i, c: c * 0.5 + sg.sum(c), r))(x)
    assert "scan" in _names(prog) and "while_loop" in _names(prog)
    want = a.copy()
    for _ in range(3):
        want = want * 0.5 + want.sum(1, keepdims=True)
    got = _run(prog, [static, dynamic], x=a, n=np.int64(3))
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    np.testing.assert_allclose(got[1], want, rtol=1e-12)


def _doubling(s):
    return sg.while_loop(lambda v, k: v < 10.0, lambda v, k: [v * 2.0, k + 1],
                         [s, np.int64(0)])


def test_while_loop_with_a_batched_predicate_freezes_finished_examples():
    a = np.array([0.7, 3.0, 11.0, 5.5])
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [4], "float64")
        v, k = sg.vmap(_doubling)(x)
        assert _names(prog).count("while_loop") == 1 and "scan" not in _names(prog)
        g, = ir_backward.grad(sg.sum(v), [x])      # grad of vmap
    trips = np.array([4, 2, 0, 1])
    for backend in ("interpreter", "numpy", "c"):
        out = _run(prog, [v, k, g], backend, x=a)
        np.testing.assert_array_equal(out[1], trips)
        np.testing.assert_allclose(out[0], a * 2.0 ** trips)
        np.testing.assert_allclose(out[2], 2.0 ** trips)


def test_vmap_of_grad_through_a_while_loop():
    """A trip count every example shares: one loop. One that differs (a batched predicate)
    cannot be recorded per example for reverse mode: a ValueError saying what to do."""
    a = np.array([0.7, 3.0, 11.0, 5.5])
    with sg.program_guard(sg.Program()) as prog:
        x, c = sg.data("x", [4], "float64"), sg.data("c", [], "float64")
        shared = sg.vmap(lambda s: ir_backward.grad(
            sg.fori_loop(0, sg.cast(c, "int64"), lambda i, v: v * s, s), [s])[0])(x)
        assert _names(prog).count("while_loop") == 1 and _names(prog).count("scan") == 1

        def per_example(s):
            v, _ = sg.while_loop(lambda v, k: v < 10.0, lambda v, k: [v * c, k + 1],
                                 [s, np.int64(0)])
            return ir_backward.grad(v, [s, c])

        with pytest.raises(ValueError, match="take grad outside vmap"):
            sg.vmap(per_example)(x)
    np.testing.assert_allclose(_run(prog, [shared], x=a, c=np.float64(2.0))[0], 3 * a ** 2)


def test_nested_vmap_through_cond_and_scan():
    a, b = R.normal(size=(3,)), R.normal(size=(4,))
    with sg.program_guard(sg.Program()) as prog:
        x, y = sg.data("x", [3], "float64"), sg.data("y", [4], "float64")

        def inner(s, t):
            z = sg.cond(s > t, lambda u: u * 2.0, lambda u: u - 1.0, s * t)
            c, _ = sg.scan(lambda c, _: (c * 0.5 + t, None), z, length=3)
            return c

        table = sg.vmap(lambda s: sg.vmap(lambda t: inner(s, t))(y))(x)
    assert table.shape == (3, 4) and "scan" in _names(prog) and "cond" not in _names(prog)
    assert _names(prog).count("scan") == 1
    z = np.where(a[:, None] > b, a[:, None] * b * 2, a[:, None] * b - 1)
    for _ in range(3):
        z = z * 0.5 + b
    np.testing.assert_allclose(_run(prog, [table], x=a, y=b)[0], z, rtol=1e-12)


def test_random_ops_in_a_loop_body_draw_per_example():
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [6, 3])

        def noisy(r):
            return sg.fori_loop(0, 2, lambda i, c: c + sg.random.normal([3], seed=4, counter=i),
                                r)

        y = sg.vmap(noisy)(x)
    assert _names(prog).count("scan") == 1
    out, = _run(prog, [y], x=np.zeros((6, 3), "float32"))
    assert len({tuple(row) for row in out.round(6)}) == 6


def test_vmap_of_grad_and_grad_of_vmap_through_cond_and_scan():
    a, w = np.array([-1.5, 0.5, 2.0]), np.array([0.3, -0.7])
    with sg.program_guard(sg.Program()) as prog:
        x, wv = sg.data("x", [3], "float64"), sg.data("w", [2], "float64")

        def f(s):
            z = sg.cond(s > 0, lambda u: u * u * wv, lambda u: sg.sin(u) + wv, s)
            c, _ = sg.scan(lambda c, t: (c * t + z, None), sg.zeros_like(wv), wv)
            return sg.sum(c)

        per_example = sg.vmap(lambda s: ir_backward.grad(f(s), [s, wv]))(x)
        total, = ir_backward.grad(sg.sum(sg.vmap(f)(x)), [wv])
    assert "cond" not in _names(prog)
    got = _run(prog, list(per_example) + [total], x=a, w=w)
    eps = 1e-6

    def f_np(s, wv):
        z = s * s * wv if s > 0 else np.sin(s) + wv
        c = np.zeros(2)
        for t in wv:
            c = c * t + z
        return c.sum()

    for i, s in enumerate(a):
        np.testing.assert_allclose(got[0][i], (f_np(s + eps, w) - f_np(s - eps, w)) / (2 * eps),
                                   rtol=1e-6)
        for j in range(2):
            dw = np.eye(2)[j] * eps
            np.testing.assert_allclose(got[1][i][j],
                                       (f_np(s, w + dw) - f_np(s, w - dw)) / (2 * eps),
                                       rtol=1e-6, atol=1e-9)
    numeric = [sum(f_np(s, w + np.eye(2)[j] * eps) - f_np(s, w - np.eye(2)[j] * eps)
                   for s in a) / (2 * eps) for j in range(2)]
    np.testing.assert_allclose(got[2], numeric, rtol=1e-6)


@pytest.mark.parametrize("policy", [("binomial", 2), ("binomial", 5)])
def test_per_example_gradients_through_a_checkpointed_scan_batch_its_reverse_loop(policy):
    """vmap of grad through ``checkpoint=("binomial", s)``: the backward's ``reverse_loop`` is
    batched by its own rule (one reverse_loop, no loop over the examples), and the gradients
    are those of the loop that stores every step, bit for bit."""
    xs, w, h0 = R.normal(size=(4, 7, 3)), R.normal(size=(3, 3)), R.normal(size=(4, 3))

    def build(checkpoint):
        with sg.program_guard(sg.Program()) as prog:
            x, wv, hv = (sg.data("x", [4, 7, 3], "float64"), sg.data("w", [3, 3], "float64"),
                         sg.data("h0", [4, 3], "float64"))

            def grads(seq, h_init):
                h, ys = sg.scan(lambda h, t: (sg.tanh(h @ wv + t), h * t), h_init, seq,
                                checkpoint=checkpoint)
                loss = sg.sum(h * h) + sg.sum(ys)
                return ir_backward.grad(loss, [wv, seq, h_init])

            out = sg.vmap(grads)(x, hv)
        return prog, list(out)

    prog, fetches = build(policy)
    names = _names(prog)
    assert names.count("reverse_loop") == 1 and "scan" not in names[names.index("reverse_loop"):]
    plain_prog, plain_fetches = build(None)
    for backend in ("interpreter", "numpy"):
        got = _run(prog, fetches, backend, x=xs, w=w, h0=h0)
        want = _run(plain_prog, plain_fetches, backend, x=xs, w=w, h0=h0)
        for a, b in zip(got, want):
            assert a.shape == b.shape and np.array_equal(a, b)
