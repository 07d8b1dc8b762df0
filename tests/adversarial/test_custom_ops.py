"""Custom-op forwards in generated code (issue #12, and #14 item 1): namespaced copies, forwards
that cannot be copied run by reference and are never saved, results and shape rules checked."""
import functools
import importlib.util
import textwrap

import numpy as np
import pytest

import symgrad as sg

SAME_NAME = {"sine_mod": "np.sin(x)", "cosine_mod": "np.cos(x)"}


def _module(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _identity_shape(t):
    return t


def _run(op, backend, x, **options):
    prog = sg.Program()
    with sg.program_guard(prog):
        value = sg.data("x", [None], "float64")
        y = op(value)
    return sg.compile(prog, [y], backend=backend, **options)(x)[0]


def test_two_forwards_with_one_name_keep_their_own_code(tmp_path):
    ops = []
    for module_name, body in SAME_NAME.items():
        module = _module(tmp_path, module_name, f"""
            import numpy as np
            def fwd(x):
                return {body}
        """)
        ops.append(sg.custom_op(f"adv_{module_name}", module.fwd, _identity_shape, None))
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float64")
        outputs = [op(x) for op in ops]
    xs = np.array([0.1, 0.2, 0.3])
    sine, cosine = sg.compile(prog, outputs)(xs)
    np.testing.assert_allclose(sine, np.sin(xs))
    np.testing.assert_allclose(cosine, np.cos(xs))


@pytest.mark.parametrize("name", ["softmax_forward", "run", "CONSTANTS", "_over_rows",
                                  "np", "_sg_custom_result"])
def test_a_forward_named_like_module_internals(tmp_path, name):
    module = _module(tmp_path, f"named_{name.strip('_')}", f"""
        import numpy
        def {name}(x):
            return numpy.exp(x) * 2.0
    """)
    op = sg.custom_op("adv_named", getattr(module, name), _identity_shape, None)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = sg.nn.softmax(x) + op(x) + sg.tanh(x * 2.0)
    xs = np.random.default_rng(0).standard_normal((300, 4))
    expected = sg.compile(prog, [y], backend="interpreter")(xs)[0]
    np.testing.assert_allclose(sg.compile(prog, [y], chunk_size=64, threads=2)(xs)[0], expected)
    assert "_custom_adv_named = _make_custom_adv_named()" in sg.compile(prog, [y]).source


SCALE = 3.0


def scaled_by_global(x):
    return x * SCALE


def _doubling(function):
    @functools.wraps(function)
    def wrapper(x):
        return function(x) * 2.0
    return wrapper


@_doubling
def decorated(x):
    return x + 1.0


def _closure():
    factor = 5.0
    return lambda x: x * factor


_exec_namespace = {"np": np}
exec("def made_by_exec(x):\n    return np.abs(x)\n", _exec_namespace)

UNCOPYABLE = {
    "module global": (scaled_by_global, r"reads the module-level name\(s\) SCALE"),
    "decorated": (decorated, "closure|decorated"),
    "lambda": (lambda x: x * x, "it is a lambda"),
    "closure": (_closure(), "lambda|closure"),
    "exec-made": (_exec_namespace["made_by_exec"], "source code is not available"),
    "ufunc": (np.sinh, "not a function defined with def"),
}


@pytest.mark.parametrize("case", sorted(UNCOPYABLE))
def test_a_forward_that_cannot_be_copied_runs_by_reference_and_is_not_saved(case, tmp_path):
    forward, reason = UNCOPYABLE[case]
    op = sg.custom_op("adv_ref", forward, _identity_shape, None)
    xs = np.array([-1.0, 0.5, 2.0])
    expected = _run(op, "interpreter", xs)
    np.testing.assert_allclose(expected, forward(xs))
    np.testing.assert_allclose(_run(op, "numpy", xs), expected)   # never a NameError
    prog = sg.Program()
    with sg.program_guard(prog):
        y = op(sg.data("x", [3], "float64"))
    fn = sg.compile(prog, [y])
    with pytest.raises(sg.ArtifactError, match=f"'adv_ref' runs by reference because .*"
                                               f"({reason}).*module-level `def`"):
        fn.save(str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_a_copied_forward_runs_standalone(tmp_path):
    module = _module(tmp_path, "copyable_mod", """
        import math
        import numpy as np

        def forward(x):
            '''Two lines of docstring,
            kept as they are.'''
            return np.exp(x) * math.pi
    """)
    op = sg.custom_op("adv_copy", module.forward, _identity_shape, None)
    prog = sg.Program()
    with sg.program_guard(prog):
        y = op(sg.data("x", [3], "float64"))
    path = sg.compile(prog, [y]).save(str(tmp_path / "m"))
    import runpy

    model = runpy.run_path(f"{path}/numpy/standalone.py")
    np.testing.assert_allclose(model["run"](x=np.zeros(3))[0], np.full(3, np.pi))


@pytest.mark.parametrize("infer, error", [
    (lambda t: ("abc", t[1]), "returned the shape 'abc'"),
    (lambda t: ((-3,), t[1]), "ints >= 0"),
    (lambda t: ((True,), t[1]), "ints >= 0"),
    (lambda t: "float32", "must return \\(shape, dtype\\)"),
])
def test_infer_shape_results_are_checked(infer, error):
    op = sg.custom_op("adv_shape", np.negative, infer, None)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [3], "float32")
        with pytest.raises(sg.ShapeError, match=error):
            op(x)
    assert prog.num_ops == 1


def test_infer_shape_dtype_is_checked():
    op = sg.custom_op("adv_dtype", np.negative, lambda t: (t[0], "no such dtype"), None)
    prog = sg.Program()
    with sg.program_guard(prog):
        with pytest.raises(sg.DTypeError, match="not a dtype"):
            op(sg.data("x", [3], "float32"))


@pytest.mark.parametrize("backend", ["interpreter", "numpy"])
@pytest.mark.parametrize("forward, error", [
    (lambda x: x[:2], "shape \\(2,\\), but infer_shape says \\(3,\\)"),
    (lambda x: x.astype("float32"), "dtype float32, but infer_shape says float64"),
    (lambda x: (x, x), "returned 2 result"),
])
def test_forward_results_are_checked_when_they_run(backend, forward, error):
    op = sg.custom_op("adv_result", forward, _identity_shape, None)
    prog = sg.Program()
    with sg.program_guard(prog):
        y = op(sg.data("x", [3], "float64"))
    with pytest.raises((ValueError, TypeError), match=error):
        sg.compile(prog, [y], backend=backend)(np.ones(3))


def test_an_elementwise_forward_is_checked_on_chunks():
    op = sg.custom_op("adv_elementwise", lambda x: x[:1], _identity_shape, None,
                      category="elementwise")
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2], "float64")
        y = sg.sum(op(x * 2.0) + 1.0)
    with pytest.raises(ValueError, match="'adv_elementwise'.*shape \\(1, 2\\)"):
        sg.compile(prog, [y], chunk_size=16)(np.ones((100, 2)))
