"""Custom-op forwards in generated code (issue #12, and #14 item 1): namespaced copies, forwards
that cannot be copied run by reference and are never saved, results and shape rules checked;
``c=`` expressions (issue #24 item 14): what the op cannot use is refused when it registers,
an operand it lacks or a C function nothing defines is an error naming the op, and never
leaves a broken library in the cache or breaks the programs compiled with it."""
import functools
import importlib.util
import os
import re
import textwrap

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import c_backend

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


# --- c= expressions (issue #24 item 14) --------------------------------------------------------
def _add_forward(a, b):
    return a + b


def _binary_c_op(name, c):
    return sg.custom_op(name, _add_forward, lambda a, b: a, None, c=c, category="elementwise")


def _binary_program(op):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None], "float64")
        y = op(x, x * 2.0)
    return prog, [y]


@pytest.mark.parametrize("keywords, error", [
    ({"c": "({0}) * 2", "category": "opaque"}, "c= is the C expression of an elementwise op, "
                                                "but category is 'opaque'"),
    ({"c": "({0}) * 2"}, "category is 'opaque'"),    # the default category
    ({"c": "({0}) * ({alpha})", "category": "elementwise"}, "refers to \\{alpha\\}, but a "
                                                            "custom op has no attributes"),
    ({"c": "({0}) * ({0", "category": "elementwise"}, "c='\\(\\{0\\}\\) \\* \\(\\{0'"),
    ({"c": "({0!r}) * 2", "category": "elementwise"}, "\\{0!r\\} is not a field"),
    ({"c": "{} * 2", "category": "elementwise"}, "\\{\\} is not a field"),
])
def test_a_c_expression_the_op_cannot_use_is_refused_when_registered(keywords, error):
    """Never silently ignored, never a KeyError when compiling: the error names the op."""
    with pytest.raises(ValueError, match=f"custom_op 'adv_c_refused': .*{error}"):
        sg.custom_op("adv_c_refused", np.negative, _identity_shape, None, **keywords)
    assert "adv_c_refused" not in sg.REGISTRY


def test_a_c_expression_reading_an_operand_the_op_lacks_names_the_op_and_line():
    op = _binary_c_op("adv_c_operand", "(({0}) + ({2}))")
    prog, fetches = _binary_program(op)
    with pytest.raises(c_backend.CLoweringError,
                       match=r"of op 'adv_c_operand' \(built at .*test_custom_ops.py:\d+\) "
                             r"refers to \{2\}, which the op does not have: it has 2 operands "
                             r"\(\{0\}, \{1\}\), no attributes"):
        sg.compile(prog, fetches, backend="c")


def _cache_libraries(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".so"))


UNDEFINED = {   # c= calling a function nothing defines: the error it gives, and its message
    "undeclared": ("sg_adv_no_such_function({0})", c_backend.CCompileError,
                   "implicit declaration of function .sg_adv_no_such_function"),
    "declared": ("({{ extern double sg_adv_nowhere(double); sg_adv_nowhere({0}); }})",
                 c_backend.CLoadError, "undefined symbol: sg_adv_nowhere"),
}


@pytest.mark.parametrize("kind", sorted(UNDEFINED))
def test_an_undefined_c_function_is_an_error_naming_the_op_and_leaves_no_library(kind,
                                                                                 tmp_path):
    """The compiler refuses a call of an undeclared function; a declared one that nothing
    defines makes a library the dynamic loader refuses, which is removed from the cache. Both
    errors quote the op's line of C (it names the op), every time the program compiles."""
    c, error, said = UNDEFINED[kind]
    op = _binary_c_op(f"adv_c_{kind}", c)
    prog, fetches = _binary_program(op)
    for _ in range(2):
        with pytest.raises(error, match=said) as caught:
            sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
        assert re.search(rf"/\* %\d+ = adv_c_{kind}\(%x, %\d+\) \*/", str(caught.value))
        assert _cache_libraries(tmp_path) == []


@pytest.mark.parametrize("kind", sorted(UNDEFINED))
def test_a_bad_c_expression_in_a_deferred_batch_fails_only_its_own_program(kind, tmp_path,
                                                                            monkeypatch):
    """Programs compiled together (``deferred``, here into one library): the one with the bad
    c= raises its own error, the others compile without it and run."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    c, error, _ = UNDEFINED[kind]
    bad = _binary_program(_binary_c_op(f"adv_c_batch_{kind}", c))
    good = _binary_program(_binary_c_op(f"adv_c_batch_good_{kind}", "(({0}) - ({1}))"))
    with c_backend.deferred():
        compiled = [sg.compile(*program, backend="c", cache_dir=str(tmp_path))
                    for program in (good, bad)]
    np.testing.assert_allclose(compiled[0](x=np.ones(3))[0], -np.ones(3))
    with pytest.raises(error, match=f"adv_c_batch_{kind}"):
        compiled[1](x=np.ones(3))
