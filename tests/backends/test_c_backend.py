"""The C backend: loops against the interpreter (every loop shape: chunked reductions, rows,
columns, broadcasting, run-time dims, NaN and infinities), what it compiles (libmvec's vector
math in the library, threads and forks, one entry per run of groups), the compiler cache and
its batches, errors, dumps and custom ops. Most programs of this module are compiled in one
batch."""
import ctypes
import functools
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends import c_backend
from symgrad.backends.c_backend import compiler

from .forking import run_forked

RNG = np.random.default_rng(7)


def _program(build, *declared):
    prog = sg.Program()
    with sg.program_guard(prog):
        inputs = [sg.data(name, shape, dtype) for name, shape, dtype in declared]
        fetches = build(*inputs)
    return prog, list(fetches) if isinstance(fetches, (list, tuple)) else [fetches]


def _w2(x):
    loss = sg.sum(sg.tanh(x * 1.5 + 0.5) * sg.sin(x) + sg.exp(-x * x) * 0.3 + sg.log1p(x * x))
    return [loss] + ir_backward.grad(loss, [x])


def _reductions(x):
    y = sg.exp(x * 0.5) + sg.sin(x)
    return [sg.sum(y), sg.sum(y, axis=0), sg.sum(y, axis=1, keepdims=True), sg.mean(y * y),
            sg.max(y - 1.0, axis=0), sg.min(y, axis=1), sg.prod(y * 0.1 + 1.0, axis=0),
            sg.mean(y, axis=(0, 2)) * 2.0, sg.sum(x * 2.0, axis=1)]


def _broadcasts(x, row, column):
    y = sg.tanh(x * row + column)
    return [y, sg.sum(y * row, axis=0) + row, sg.max(y, axis=1, keepdims=True) - column]


def _row_ops(x, labels, soft, i):
    """The softmax family along each axis, cross-entropy with integer labels (and its
    gradient: one_hot in the middle of the shape) and soft labels, one_hot of several dtypes."""
    hard = nn.softmax_cross_entropy(x, labels, axis=1, reduction="none")
    return [nn.softmax(x, axis=0), nn.softmax(x, axis=1), nn.log_softmax(x, axis=2), hard,
            nn.softmax_cross_entropy(x, soft, axis=2, reduction="none"),
            ir_backward.grad(sg.sum(hard * hard), [x])[0],
            ir_backward.grad(nn.softmax_cross_entropy(x, soft, axis=1), [x, soft])[1],
            sg.one_hot(i, 5), sg.one_hot(i, 3, "bool"), sg.one_hot(i, 4, "int64")]


def _row_ops_f32(x, labels):
    loss = nn.softmax_cross_entropy(x, labels)
    return [loss, nn.softmax(x), nn.log_softmax(x, axis=0)] + ir_backward.grad(loss, [x])


def _row_ops_in_regions(x, labels):
    """Row ops inside a scan body and a cond branch, and in their gradients."""
    def body(carry, xs):
        h = nn.softmax(carry * xs, axis=1)
        return h, nn.softmax_cross_entropy(h, labels, reduction="sum")
    final, losses = sg.scan(body, x, xs=sg.stack([x, x * 0.5, x * 2.0]))
    loss = sg.sum(losses) + sg.sum(sg.cond(sg.sum(x) > 0, nn.log_softmax, lambda a: a, final))
    return [loss] + ir_backward.grad(loss, [x])


_ROW_X = RNG.standard_normal((6, 10)).astype("float32") * 4
_ROW_X[1, 3] = np.inf
_ROW_X[2, :] = -np.inf
_ROW_X[3, 0] = np.nan
_ROW_X[4, 5] = 90.0     # exp overflows without the max shift

# name -> (build, declared inputs, feeds, options)
CASES = {
    "row_ops": (_row_ops, [("x", [None, 7, 3], "float64"), ("labels", [None, 3], "int32"),
                           ("soft", [None, 7, 3], "float64"), ("i", [None, 2], "uint8")],
                {"x": RNG.standard_normal((5, 7, 3)) * 3,
                 "labels": RNG.integers(0, 7, (5, 3)).astype("int32"),
                 "soft": RNG.uniform(0, 1, (5, 7, 3)),
                 "i": RNG.integers(0, 7, (4, 2)).astype("uint8")}, {}),
    "row_ops_in_regions": (_row_ops_in_regions, [("x", [5, 4], "float64"),
                                                  ("labels", [5], "int32")],
                           {"x": RNG.standard_normal((5, 4)),
                            "labels": RNG.integers(0, 4, 5).astype("int32")}, {}),
    "row_ops_float32": (_row_ops_f32, [("x", [6, 10], "float32"), ("labels", [6], "int64")],
                        {"x": _ROW_X, "labels": np.array([3, 1, 2, 0, 5, 9])}, {}),
    "w2": (_w2, [("x", [None], "float32")],
           {"x": RNG.uniform(-2, 2, 300_007).astype("float32")}, {}),   # threads: > 2**18
    "w2_threads1": (_w2, [("x", [None], "float32")],
                    {"x": RNG.uniform(-2, 2, 70_001).astype("float32")}, {"threads": 1}),
    "reductions": (_reductions, [("x", [None, 37, 6], "float64")],
                   {"x": RNG.standard_normal((1201, 37, 6))}, {}),   # threads: > 2**18
    "reductions_small": (_reductions, [("x", [3, 2, 5], "float32")],
                         {"x": RNG.standard_normal((3, 2, 5)).astype("float32")}, {}),
    "broadcasts": (_broadcasts, [("x", [None, 64], "float64"), ("row", [64], "float64"),
                                 ("column", [None, 1], "float64")],
                   {"x": RNG.standard_normal((900, 64)), "row": RNG.standard_normal(64),
                    "column": RNG.standard_normal((900, 1))}, {}),
    "unfused": (_broadcasts, [("x", [None, 64], "float64"), ("row", [64], "float64"),
                              ("column", [None, 1], "float64")],
                {"x": RNG.standard_normal((5, 64)), "row": RNG.standard_normal(64),
                 "column": RNG.standard_normal((5, 1))}, {"fusion": False}),
    "integers": (lambda i, j: [sg.sum(i * j + 3, axis=0), sg.maximum(i, j) - sg.abs(i),
                               sg.where(i > j, i, j * 2), sg.mean(i, axis=1)],
                 [("i", [4, 5], "int32"), ("j", [4, 5], "int32")],
                 {"i": RNG.integers(-50, 50, (4, 5)).astype("int32"),
                  "j": RNG.integers(-50, 50, (4, 5)).astype("int32")}, {}),
    "non_finite": (lambda x, y: [sg.maximum(x, y), sg.minimum(x, y), sg.exp(x * 1000.0),
                                 sg.log(sg.abs(x)), x / y, sg.sum(x), sg.max(x), sg.min(y),
                                 sg.sign(x), sg.clip(x, -1.0, y), sg.sqrt(x)],
                   [("x", [8], "float64"), ("y", [8], "float64")],
                   {"x": np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 3.0]),
                    "y": np.array([1.0, np.nan, 0.0, 0.0, np.inf, -np.inf, np.nan, 2.0])}, {}),
}


@functools.lru_cache(maxsize=None)
def _compiled():
    built = {}
    with c_backend.deferred():
        for name, (build, declared, _, options) in CASES.items():
            prog, fetches = _program(build, *declared)
            built[name] = (prog, fetches, sg.compile(prog, fetches, backend="c", **options))
    return built


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_interpreter(name):
    prog, fetches, compiled = _compiled()[name]
    feeds = CASES[name][2]
    rtol = 1e-4 if any(v.dtype == np.float32 for v in fetches) else 1e-9
    with np.errstate(all="ignore"):
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
        got = compiled(**feeds)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * 1e-3)


def test_one_entry_calls_the_whole_program_and_vector_math_is_libmvec():
    compiled = _compiled()["w2"][2]
    assert compiled.stats["c_segments"] == 1
    assert "#pragma omp" in compiled.source and "tanh(" in compiled.source
    nm = shutil.which("nm")
    if nm is None or not compiler.toolchain().mvec:
        pytest.skip("needs nm and glibc's libmvec")
    executable = compiled._executable
    compiled(x=CASES["w2"][2]["x"])
    symbols = subprocess.run([nm, "-D", executable.library], capture_output=True,
                             text=True).stdout
    vector_calls = {line.split()[-1].split("@")[0] for line in symbols.splitlines()
                    if "_ZGV" in line}
    for function in ("sinf", "cosf", "expf"):   # tanhf: the prelude's own (test_c_math.py)
        assert any(symbol.endswith(f"_{function}") for symbol in vector_calls), vector_calls


@pytest.mark.parametrize("name", list(CASES))
def test_generated_c_compiles_without_warnings(name, tmp_path):
    """-Wall finds nothing in the C of any program here: no unused variable or parameter
    copy, no dead code."""
    tools = compiler.toolchain()
    path = tmp_path / f"{name}.c"
    path.write_text(_compiled()[name][2].source)
    flags = [flag for flag in tools.flags if flag != "-shared"]
    result = subprocess.run([tools.compiler, *flags, "-Wall", "-Werror", "-fsyntax-only",
                             str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_where_over_computed_arms_vectorizes(tmp_path):
    """Both arms of a where are computed and blended (``-fno-trapping-math``): the loop does
    not branch on every element, which is what keeps it from vectorizing (gcc says why)."""
    tools = compiler.toolchain()
    version = subprocess.run([tools.compiler, "--version"], capture_output=True, text=True)
    if "gcc" not in version.stdout.lower() and "free software" not in version.stdout.lower():
        pytest.skip("reads gcc's vectorizer report")
    prog, fetches = _program(lambda a, b: sg.where(a > b, a * b + 1.0, a - b * 0.5) * 2.0,
                             ("a", [None], "float64"), ("b", [None], "float64"))
    source = sg.compile(prog, fetches, backend="c").source
    path = tmp_path / "where.c"
    path.write_text(source)
    pragmas = [number + 1 for number, line in enumerate(source.splitlines())
               if line.strip() == "#pragma omp simd"]   # line numbers, from 1
    flags = [flag for flag in tools.flags if flag != "-shared"]
    report = subprocess.run([tools.compiler, *flags, "-c", str(path), "-o", os.devnull,
                             "-fopt-info-vec-optimized"], capture_output=True, text=True).stderr
    vectorized = {int(found) for found in re.findall(r"where\.c:(\d+):\d+: optimized: loop "
                                                     r"vectorized", report)}
    assert pragmas and all(vectorized & {line + 1, line + 2} for line in pragmas), report


def test_the_flag_probe_is_cached_per_set_of_base_flags(monkeypatch, tmp_path):
    """A symgrad whose base flags changed probes the compiler again instead of reading what
    an older one found; the record holds what the probe found, the flags are made from it."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    tools = compiler.toolchain()
    found = compiler._probe(tools.compiler)
    assert "-fno-trapping-math" in compiler._flags(found["simd"], found["native"],
                                                   found["mvec"])[0]
    monkeypatch.setattr(compiler, "BASE_FLAGS", compiler.BASE_FLAGS + ("-fno-common",))
    assert compiler._probe(tools.compiler) == found
    assert "-fno-common" in compiler._flags(found["simd"], found["native"], found["mvec"])[0]
    assert len(list(tmp_path.glob("c_toolchain_*.json"))) == 2


def test_threads_option():
    assert "sg_parallel(sg_g_" not in _compiled()["w2_threads1"][2].source
    assert "sg_parallel(sg_g_" in _compiled()["w2"][2].source


def test_python_threads_share_one_compiled_program():
    """Calls from several Python threads at once (the GIL is released in C): one uses the
    worker pool, the others run their loops on their own threads; results are exact."""
    prog, fetches, compiled = _compiled()["reductions"]
    inputs = [RNG.standard_normal((200 + 20 * i, 37, 6)) for i in range(6)]
    expected = [compiled(x=x) for x in inputs]
    errors = []

    def work(i):
        try:
            for _ in range(5):
                for e, r in zip(expected[i], compiled(x=inputs[i])):
                    assert r.tobytes() == e.tobytes()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_a_forked_child_runs_a_program_that_ran_in_its_parent():
    """The worker pool's fork handlers: a child forked after a threaded loop, or while
    another thread is inside one (which hung about 1 fork in 30 without them: a lock or
    condition variable copied mid-use), starts a pool of its own and computes the same."""
    run_forked("c", idle_forks=2, busy_forks=50)


def test_run_time_dims_that_disagree_are_an_error():
    prog, fetches = _program(lambda x, y: [sg.tanh(x) + y], ("x", [None, 3], "float64"),
                             ("y", [None, 3], "float64"))
    fn = sg.compile(prog, fetches, backend="c")
    with pytest.raises(sg.FeedError, match="op add .* to be equal"):   # the binding
        fn(x=np.ones((4, 3)), y=np.ones((5, 3)))
    with pytest.raises(ValueError, match="along axis 0 where the program needs 4"):   # C's own
        fn._executable.run({"x": np.ones((4, 3)), "y": np.ones((5, 3))}, None,
                           {"?0": 4, "?1": 4})
    np.testing.assert_allclose(fn(x=np.zeros((2, 3)), y=np.ones((2, 3)))[0], 1.0)


def test_inputs_that_are_not_contiguous_are_copied():
    prog, fetches, compiled = _compiled()["broadcasts"]
    feeds = {k: np.asfortranarray(v) if v.ndim == 2 else v
             for k, v in CASES["broadcasts"][2].items()}
    feeds["x"] = np.repeat(feeds["x"], 2, axis=1)[:, ::2]
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for e, g in zip(expected, compiled(**feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-12)


def test_second_compile_loads_the_cached_library(monkeypatch):
    prog, fetches = _program(lambda x: [sg.cos(x) * 3.0], ("x", [6], "float64"))
    first = sg.compile(prog, fetches, backend="c")

    def refuse(*args, **kwargs):
        raise AssertionError("the compiler ran again")

    monkeypatch.setattr(compiler, "_compile", refuse)
    second = sg.compile(prog, fetches, backend="c")
    assert second.stats["cache_hit"] and second._executable.library == first._executable.library
    np.testing.assert_allclose(second(x=np.arange(6.0))[0], np.cos(np.arange(6.0)) * 3.0)


def test_a_second_process_reuses_the_library(tmp_path):
    script = (
        "import numpy as np, symgrad as sg\n"
        "prog = sg.Program()\n"
        "with sg.program_guard(prog):\n"
        "    x = sg.data('x', [5], 'float64')\n"
        "    y = sg.exp(sg.sin(x) * 2.0)\n"
        "fn = sg.compile(prog, [y], backend='c')\n"
        "print(fn._executable.library, float(fn(x=np.ones(5))[0][0]))\n")
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, check=True).stdout.split() for _ in range(2)]
    assert runs[0] == runs[1]
    libraries = [p for p in os.listdir(tmp_path) if p.endswith(".so")]
    assert len(libraries) == 1 and float(runs[0][1]) == pytest.approx(np.exp(np.sin(1) * 2))


def test_compiles_of_one_library_at_once_run_the_compiler_once(monkeypatch, tmp_path):
    """Two compiles of the same library at once (threads here; processes, such as test
    workers, alike: the lock is a file lock): one runs the compiler, the other waits for it."""
    runs = []
    compile_now = compiler._compile_now

    def counted(sources, tools, target):
        runs.append(target)
        compile_now(sources, tools, target)

    monkeypatch.setattr(compiler, "_compile_now", counted)
    source = "int sg_answer(void) { return 42; }\n"
    target = str(tmp_path / "c_answer.so")
    tools = compiler.toolchain()
    threads = [threading.Thread(target=compiler._compile, args=([source], tools, target))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert runs == [target]
    assert ctypes.CDLL(target).sg_answer() == 42


def test_deferred_programs_share_one_library():
    programs = [_program(lambda x, k=k: [sg.tanh(x * (k + 1.5))], ("x", [3], "float64"))
                for k in range(3)]
    with c_backend.deferred():
        compiled = [sg.compile(prog, fetches, backend="c") for prog, fetches in programs]
        assert all(fn._executable.library is None for fn in compiled)
    libraries = {fn._executable.library for fn in compiled}
    assert len(libraries) == 1
    for k, fn in enumerate(compiled):
        np.testing.assert_allclose(fn(x=np.ones(3))[0], np.tanh(k + 1.5))


def test_no_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    prog, fetches = _program(lambda x: [x * 2.0], ("x", [2], "float64"))
    with pytest.raises(c_backend.CCompilerNotFoundError, match=r"no-such-cc.*backend=\"numpy\""):
        sg.compile(prog, fetches, backend="c")
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(c_backend.CCompilerNotFoundError, match="cc, gcc, clang on the PATH"):
        sg.compile(prog, fetches, backend="c")


def test_dump_writes_the_c_program_and_the_host_module(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMGRAD_DUMP", str(tmp_path))
    prog, fetches = _program(lambda x: [sg.sum(sg.exp(x))], ("x", [4], "float32"))
    fn = sg.compile(prog, fetches, backend="c")
    dumped = sorted(os.listdir(tmp_path))
    assert [name.rsplit(".", 1)[1] for name in dumped] == ["c", "py"]
    assert (tmp_path / dumped[0]).read_text() == fn.source
    assert (tmp_path / dumped[1]).read_text() == fn._executable.host_source
    assert fn.sources == {".c": fn.source, ".py": fn._executable.host_source}
    assert "SG_LINK int sg_g_" in fn.source and "ctypes.PyDLL" in fn._executable.host_source


def cube_forward(x):
    return x * x * x


def test_custom_op_lowers_through_the_c_table():
    cube = sg.custom_op("test_c_cube", cube_forward, lambda t: t,
                        lambda inputs, outputs, grads: [grads[0] * 3.0 * inputs[0] * inputs[0]],
                        c="(({0}) * ({0}) * ({0}))", category="elementwise")
    prog, fetches = _program(lambda x: [sg.sum(cube(x) + 1.0)] + ir_backward.grad(
        sg.sum(cube(x)), [x]), ("x", [5], "float64"))
    fn = sg.compile(prog, fetches, backend="c")
    assert "test_c_cube" in fn.source
    x = np.linspace(-1, 1, 5)
    loss, g = fn(x=x)
    np.testing.assert_allclose(loss, np.sum(x ** 3 + 1.0))
    np.testing.assert_allclose(g, 3 * x * x)
    assert "c" in sg.registry.lowering_backends(cube.opdef)


def test_ops_without_a_c_rule_run_on_numpy_in_the_host():
    prog, fetches = _program(lambda x: [sg.tanh(sg.cumsum(x, axis=1)) * 2.0],
                             ("x", [3, 4], "float64"))
    fn = sg.compile(prog, fetches, backend="c")
    x = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(fn(x=x)[0], np.tanh(np.cumsum(x, axis=1)) * 2.0)
    assert "np.cumsum" in fn._executable.host_source and fn.stats["c_segments"] == 1


def test_max_over_an_empty_extent_is_numpys_error_and_products_run_in_order():
    prog, fetches = _program(lambda x: [sg.max(x, axis=0), sg.prod(x * 0.5 + 1.0, axis=0)],
                             ("x", [None, 3], "float64"))
    fn = sg.compile(prog, fetches, backend="c")
    interpreter = sg.compile(prog, fetches, backend="interpreter")
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        fn(x=np.zeros((0, 3)))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        interpreter(x=np.zeros((0, 3)))
    x = RNG.standard_normal((70_001, 3))
    for e, g in zip(interpreter(x=x), fn(x=x)):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    assert "reduction(*" not in fn.source


def test_row_ops_report_labels_outside_the_classes_as_numpy_does():
    """The cross-entropy's labels are checked in C (loss and gradient), with the NumPy
    backend's error; one_hot alone gives a row of zeros; labels' run-time dims must agree."""
    def build(x, labels):
        loss = nn.softmax_cross_entropy(x, labels, reduction="sum")
        return [loss, sg.one_hot(labels, 4)] + ir_backward.grad(loss, [x])
    prog, fetches = _program(build, ("x", [None, 4], "float32"), ("labels", [None], "int64"))
    fn = sg.compile(prog, fetches, backend="c")
    reference = sg.compile(prog, fetches, backend="numpy")
    assert "_forward" not in fn._executable.host_source.split("def run")[1]
    x = np.ones((3, 4), "float32")
    for bad in (np.array([0, 7, -1]), np.array([-3, 1, 2])):
        for run in (fn, reference):
            with pytest.raises(ValueError, match=rf"class index {bad[bad != 0][0]} is outside "
                                                 r"\[0, 4\)"):
                run(x=x, labels=bad)
    hot = sg.compile(prog, fetches[1:2], backend="c")(x=x, labels=np.array([2, 4, -1]))[0]
    np.testing.assert_array_equal(hot, [[0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match="along axis 0 where the program needs 3"):
        fn._executable.run({"x": x, "labels": np.zeros(2, "int64")}, None,
                           {"?0": 3, "?1": 3})
    empty = sg.compile(*_program(lambda x: [nn.softmax(x)], ("x", [2, None], "float64")),
                       backend="c")
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        empty(x=np.ones((2, 0)))


FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d*\.\d+(?:e[-+]?\d+)?|"
                           r"\d+e[-+]?\d+)(f?)")


def test_a_float32_optimizer_update_does_only_float_math():
    """Adam's float32 update: every float value of the C loops is computed from float
    operands and float literals (``0.999f``; ``sqrt`` of a float is ``sqrtf``), never promoted
    to double (only a reduction's accumulator is double, by design)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 16], "float32")
        w = sg.parameter("w", [16, 16], "float32", init=np.eye(16, dtype="float32"))
        loss = sg.mean(sg.tanh(x @ w))
        sg.optimizer.Adam(1e-3).minimize(loss)
    fn = sg.compile(prog, [loss], backend="c")
    lines = [m.group(1).split("/*")[0] for m in re.finditer(r"const float v\d+ = (.*);",
                                                            fn.source)]
    update = [rhs for rhs in lines if "sg_acc" not in rhs and "sg_part" not in rhs]
    assert any("sqrt(" in rhs for rhs in update) and any("0.999f" in rhs for rhs in update)
    for rhs in update:
        assert "double" not in rhs and all(f for _, f in FLOAT_LITERAL.findall(rhs)), rhs
    assert "#define sqrt(x) _Generic((x), float: sqrtf" in fn.source
    oracle = sg.compile(prog, [loss], backend="interpreter")
    feed = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
    for _ in range(3):
        fn(x=feed), oracle(x=feed)
    np.testing.assert_allclose(fn.state["w"], oracle.state["w"], rtol=1e-5, atol=1e-6)
