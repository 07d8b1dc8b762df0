"""``register_vjp``, ``show_registry`` and ``custom_op``."""
import io

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import lowering_backends
from symgrad.backends.cuda_backend import lowering as cuda_lowering
from symgrad.backends.host import lowering as numpy_lowering
from symgrad.ops import REGISTRY


def run(prog, fetches, **feeds):
    return sg.compile(prog, fetches, backend="interpreter")(**feeds)


def cube_forward(x):
    """x ** 3, elementwise."""
    return x ** 3


def cube_shape(x_type):
    shape, dtype = x_type
    return shape, dtype


def cube_backward(inputs, outputs, grad_outputs):
    x, = inputs
    g, = grad_outputs
    return 3.0 * x * x * g


@pytest.fixture(autouse=True)
def clean_registry():
    """User ops registered by a test are removed after it (other suites iterate over the
    registry)."""
    before = dict(REGISTRY)
    yield
    for name in set(REGISTRY) - set(before):
        del REGISTRY[name]
    REGISTRY.update(before)


@pytest.fixture
def cube():
    return sg.custom_op("test_cube", cube_forward, cube_shape, cube_backward,
                        cuda="({0} * {0} * {0})", category="elementwise")


def test_register_vjp_replaces_and_returns_the_previous_rule():
    original = REGISTRY["sin"].vjp
    previous = sg.register_vjp("sin", lambda op, g: [g[0] * 2.0])
    try:
        assert previous is original
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [2], "float64")
            y = sg.sin(x)
        g, = ir_backward.grad(y, x)
        np.testing.assert_allclose(run(prog, [g], x=np.ones(2))[0], [2.0, 2.0])
    finally:
        assert sg.register_vjp("sin", previous) is not original
    assert REGISTRY["sin"].vjp is original


def test_register_vjp_errors():
    with pytest.raises(KeyError, match="no_such_op"):
        sg.register_vjp("no_such_op", lambda op, g: [g[0]])
    with pytest.raises(TypeError):
        sg.register_vjp("sin", "not callable")


def test_show_registry_lists_every_op(cube):
    out = io.StringIO()
    table = sg.show_registry(file=out)
    text = out.getvalue()
    assert len(table) == len(REGISTRY)
    rows = {row["op"]: row for row in table}
    assert rows["tanh"]["vjp"] and rows["tanh"]["vjp_differentiable"]
    assert "interpreter" in rows["tanh"]["backends"] and "numpy" in rows["tanh"]["backends"]
    assert not rows["argmax"]["vjp"] and rows["argmax"]["vjp_differentiable"] is None
    assert rows["test_cube"]["user_defined"]
    assert rows["tanh"]["batch"] and rows["matmul"]["batch"] and rows["sum"]["batch"]
    assert rows["scan"]["batch"] and not rows["conv2d_weight_grad"]["batch"]   # a loop
    assert rows["test_cube"]["batch"]   # an elementwise user op shares the category's rule
    header = text.splitlines()[0]
    for title in ("op", "category", "VJP", "VJP differentiable", "batching rule", "backends"):
        assert title in header
    assert "test_cube (user)" in text and str(table) == text.rstrip("\n")


def test_custom_op_forward_gradient_and_second_order(cube):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        y = cube(x)
        g, = ir_backward.grad(sg.sum(y), x, create_graph=True)
        h, = ir_backward.grad(sg.sum(g), x)
    xv = np.array([1.0, -2.0, 0.5])
    yv, gv, hv = run(prog, [y, g, h], x=xv)
    np.testing.assert_allclose(yv, xv ** 3)
    np.testing.assert_allclose(gv, 3 * xv ** 2)
    np.testing.assert_allclose(hv, 6 * xv)
    assert "test_cube(%x)" in str(prog)


def test_custom_op_registration_details(cube):
    opdef = REGISTRY["test_cube"]
    assert opdef.user_defined and opdef.category == "elementwise"
    copied, checker = numpy_lowering.LOWERINGS.rule(opdef).helpers
    assert copied.name == "_custom_test_cube" and "def cube_forward(x):" in copied.source
    emitted = numpy_lowering.LOWERINGS.rule(opdef).emit(
        ["a"], {}, types=[((None, 3), np.dtype("float32"))])
    assert emitted == "_sg_custom_result('test_cube', _custom_test_cube(a), ((None, 'float32'), ), a)"
    assert cuda_lowering.LOWERINGS.rule(opdef).expression == "({0} * {0} * {0})"
    assert cube.__name__ == "test_cube" and cube.opdef is opdef


def test_custom_op_lambda_forward_runs_by_reference_and_has_no_backward():
    square = sg.custom_op("test_square_nograd", lambda x: x * x, lambda t: t, None)
    assert numpy_lowering.LOWERINGS.rule(square.opdef).helpers[0].reason.endswith(
        "because it is a lambda")
    assert square.opdef.vjp is None
    assert sg.show_registry(io.StringIO()) and "numpy" in lowering_backends(square.opdef)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2], "float64")
        y = square(x)
    with pytest.raises(ValueError, match="without a VJP rule.*test_square_nograd"):
        ir_backward.grad(y, x)


def test_custom_op_shape_rule_and_multiple_outputs():
    def halves(x):
        n = x.shape[0] // 2
        return x[:n], x[n:]

    def halves_shape(t):
        (n,), dtype = t
        return [((n // 2,), dtype), ((n - n // 2,), dtype)]

    def halves_backward(inputs, outputs, grads):
        return sg.concatenate(list(grads))

    split2 = sg.custom_op("test_halves", halves, halves_shape, halves_backward)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4], "float64")
        a, b = split2(x)
        assert a.shape == (2,) and b.shape == (2,)
        g, = ir_backward.grad(sg.sum(a * 3.0), x)  # b gets no cotangent: zeros are passed
    np.testing.assert_allclose(run(prog, [g], x=np.arange(4.0))[0], [3, 3, 0, 0])


def test_custom_op_name_checks(cube):
    with pytest.raises(ValueError, match="built-in"):
        sg.custom_op("tanh", np.tanh, lambda t: t, None)
    with pytest.raises(ValueError, match="identifier"):
        sg.custom_op("not a name", np.tanh, lambda t: t, None)
    with pytest.raises(TypeError, match="forward"):
        sg.custom_op("test_bad", None, lambda t: t, None)
    again = sg.custom_op("test_cube", cube_forward, cube_shape, cube_backward)
    assert REGISTRY["test_cube"] is again.opdef  # a user op may be replaced


# --- copying forwards into generated code (symgrad.autodiff.custom_forward) -----------------------
def recursive_forward(x, depth=2):
    """Calls itself: the copy must too.

    A docstring line that indenting would change."""
    return x if depth == 0 else recursive_forward(x * 2.0, depth - 1)


def submodule_forward(x):
    return la.norm(x, axis=-1, keepdims=True) * x + npx.ones_like(x)


import numpy as npx  # noqa: E402  (aliases a copy must reproduce)
from numpy import linalg as la  # noqa: E402


def default_from_global(x, scale=len(REGISTRY)):
    return x * scale


@pytest.mark.parametrize("forward", [recursive_forward, submodule_forward])
def test_copied_forwards_compute_what_the_originals_do(forward):
    from symgrad.autodiff.custom_forward import forward_helper

    helper = forward_helper("test_copied", forward)
    assert helper.name == "_custom_test_copied" and "runs by reference" not in str(helper)
    namespace = {}
    exec(helper.source, namespace)
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(namespace["_custom_test_copied"](x), forward(x))
    if forward is recursive_forward:   # the docstring's continuation line kept as it was
        assert "\nA docstring line that indenting would change." not in helper.source
        assert "\n    A docstring line that indenting would change." in helper.source


def test_a_default_value_from_a_global_is_evaluated_in_its_module():
    from symgrad.autodiff.custom_forward import forward_helper

    helper = forward_helper("test_default", default_from_global)
    assert helper.reason.endswith("its copy would differ from it (constants or default values)") \
        or "does not run on its own" in helper.reason
