"""``jacobian``, ``hessian``, ``jvp`` and ``vjp`` against closed forms."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import autodiff
from symgrad.ir.graph import ancestors_of

A = np.array([[1.0, 2.0, 0.5], [-1.0, 0.25, 3.0]])
XV = np.array([0.3, -0.7, 1.1])


def run(prog, fetches, **feeds):
    return sg.compile(prog, fetches, backend="interpreter")(**feeds)


def program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        a = sg.constant(A)
        y = sg.tanh(a @ x)                  # [2]
    return prog, x, y


def jac_closed(x=XV):
    return (1 - np.tanh(A @ x) ** 2)[:, None] * A


def test_jacobian_vector_output():
    prog, x, y = program()
    j = autodiff.jacobian(y, x)
    assert j.shape == (2, 3)
    np.testing.assert_allclose(run(prog, [j], x=XV)[0], jac_closed())


def test_jacobian_matrix_output_and_list_of_inputs():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        z = sg.data("z", [2], "float64")
        y = sg.reshape(x, [3, 1]) * sg.reshape(z, [1, 2])   # [3, 2]
    jx, jz = autodiff.jacobian(y, [x, z])
    assert jx.shape == (3, 2, 3) and jz.shape == (3, 2, 2)
    zv = np.array([2.0, -1.0])
    a, b = run(prog, [jx, jz], x=XV, z=zv)
    np.testing.assert_allclose(a, np.einsum("ik,j->ijk", np.eye(3), zv))
    np.testing.assert_allclose(b, np.einsum("i,jk->ijk", XV, np.eye(2)))


def test_jacobian_of_unrelated_input_is_zero_and_dynamic_y_is_rejected():
    prog, x, y = program()
    with sg.program_guard(prog):
        other = sg.data("other", [4], "float64")
        dyn = sg.data("dyn", [None], "float64")
    j = autodiff.jacobian(y, other)
    np.testing.assert_array_equal(run(prog, [j], x=XV)[0], np.zeros((2, 4)))
    with pytest.raises(ValueError, match="static shape"):
        autodiff.jacobian(dyn * 2.0, dyn)


def _jacobian_program_size(n):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [n], "float64")
        y = sg.sin(x) * sg.sum(x * x) + sg.tanh(x)
        before = len(prog.ops)
        j = autodiff.jacobian(y, x)
    return prog, x, j, len(prog.ops) - before


def test_jacobian_size_does_not_grow_with_the_outputs():
    _, _, _, small = _jacobian_program_size(3)
    prog, x, j, large = _jacobian_program_size(1000)
    assert large == small < 40
    xv = np.linspace(-1, 1, 1000)
    got = run(prog, [j], x=xv)[0]
    expected = np.diag(np.cos(xv) * (xv @ xv) + 1 - np.tanh(xv) ** 2) + \
        np.outer(np.sin(xv), 2 * xv)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_hessian_closed_form():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(sg.sin(x)) * sg.sum(x * x)
    h = autodiff.hessian(y, x)
    assert h.shape == (3, 3)
    s, q = np.sum(np.sin(XV)), np.sum(XV ** 2)
    expected = (np.diag(-np.sin(XV)) * q + 2 * np.outer(np.cos(XV), XV)
                + 2 * np.outer(XV, np.cos(XV)) + 2 * s * np.eye(3))
    np.testing.assert_allclose(run(prog, [h], x=XV)[0], expected)


def test_hessian_blocks_for_a_list_and_scalar_check():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        z = sg.data("z", [1], "float64")
        y = sg.sum(x * x) * sg.sum(z)
    (hxx, hxz), (hzx, hzz) = autodiff.hessian(y, [x, z])
    xv, zv = np.array([1.0, 2.0]), np.array([3.0])
    a, b, c, d = run(prog, [hxx, hxz, hzx, hzz], x=xv, z=zv)
    np.testing.assert_allclose(a, 2 * zv[0] * np.eye(2))
    np.testing.assert_allclose(b, 2 * xv[:, None])
    np.testing.assert_allclose(c, 2 * xv[None, :])
    np.testing.assert_allclose(d, np.zeros((1, 1)))
    with pytest.raises(ValueError, match="one element"):
        autodiff.hessian(x * 2.0, x)


def test_vjp_and_jvp():
    prog, x, y = program()
    with sg.program_guard(prog):
        u = sg.data("u", [2], "float64")
        v = sg.data("v", [3], "float64")
    n = prog.num_ops
    jv = autodiff.jvp(y, x, v)
    assert ancestors_of([jv]) >= set(prog.ops[n:])  # the trick's dummy ops are removed
    vj = autodiff.vjp(y, x, u)
    uv, vv = np.array([0.5, -2.0]), np.array([1.0, 2.0, -1.0])
    a, b = run(prog, [jv, vj], x=XV, u=uv, v=vv)
    np.testing.assert_allclose(a, jac_closed() @ vv)
    np.testing.assert_allclose(b, uv @ jac_closed())
    prog.verify()


def test_jvp_of_nonlinear_scalar_function_and_helpers_compose():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(sg.exp(x))
        v = sg.constant(np.array([1.0, 0.0, 2.0]))
    jv = autodiff.jvp(y, x, v)
    g = autodiff.vjp(y, x)                 # differentiable: feed it to jacobian
    hess = autodiff.jacobian(g, x)
    a, b = run(prog, [jv, hess], x=XV)
    np.testing.assert_allclose(a, np.exp(XV) @ [1.0, 0.0, 2.0])
    np.testing.assert_allclose(b, np.diag(np.exp(XV)))


def _helpers(x, y, v):
    """Each helper called with ``arg`` in the place whose form decides its result's."""
    return {
        "vjp": lambda arg: autodiff.vjp(y, arg),
        "jvp": lambda arg: autodiff.jvp(arg, x, v),
        "jacobian": lambda arg: autodiff.jacobian(y, arg),
        "hessian": lambda arg: autodiff.hessian(y, arg),
    }


@pytest.mark.parametrize("helper", ["vjp", "jvp", "jacobian", "hessian"])
def test_a_value_gives_a_value_and_a_list_or_tuple_the_same_container(helper):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        y = sg.sum(sg.sin(x) * x)
        v = sg.constant(np.array([1.0, -1.0, 0.5]))
    call = _helpers(x, y, v)[helper]
    arg = y if helper == "jvp" else x
    single, listed, tupled = call(arg), call([arg]), call((arg,))
    assert isinstance(single, sg.Value)
    assert type(listed) is list and type(tupled) is tuple and len(listed) == len(tupled) == 1
    if helper == "hessian":      # nested: a list of lists, a tuple of tuples
        assert type(listed[0]) is list and type(tupled[0]) is tuple
        (listed,), (tupled,) = listed, tupled
    (from_list,), (from_tuple,) = listed, tupled
    values = run(prog, [single, from_list, from_tuple], x=XV)
    np.testing.assert_array_equal(values[1], values[0])
    np.testing.assert_array_equal(values[2], values[0])


def test_two_inputs_in_a_tuple_come_back_as_a_tuple():
    prog, x, y = program()
    with sg.program_guard(prog):
        z = sg.data("z", [2], "float64")
        w = sg.sum(y * z)
        tangent = sg.constant(XV)
    grads = autodiff.vjp(w, (x, z))
    assert type(grads) is tuple and [g.shape for g in grads] == [(3,), (2,)]
    jacobians = autodiff.jacobian(y, (x, z))
    assert type(jacobians) is tuple and [j.shape for j in jacobians] == [(2, 3), (2, 2)]
    assert type(autodiff.jvp((y, w), [x], [tangent])) is tuple


def test_unpacking_a_single_result_names_the_rule():
    prog, x, y = program()
    with pytest.raises(TypeError, match="not iterable.*single Value for a single Value "
                                        "argument.*one-element list"):
        (gx,) = autodiff.vjp(sg.sum(y), x)


def test_jvp_needs_one_tangent_per_input():
    prog, x, y = program()
    with sg.program_guard(prog):
        tangent = sg.constant(XV)
    with pytest.raises(ValueError, match="jvp: v must hold one tangent per x: 1 x, 2 v"):
        autodiff.jvp(y, x, [tangent, tangent])
