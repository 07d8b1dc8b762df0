"""Every backend reads run-time sizes from the one binding (symgrad.backends.dim_code): named
and anonymous dims, dim expressions, op-defined anonymous dims, hostile symbol names, and
artifacts run by the standalone runner at a new batch size."""
import re
import runpy

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.backends.dim_code import DimNames, UnboundDim
from symgrad.ir.dims import Symbol, floordiv, symbols_of
from symgrad.ir.graph import walk_ops
from symgrad.runtime import standalone

BACKENDS = ["interpreter", "numpy", "c"]
BATCHES = [1, 2, 12]   # 12: a static dim of the programs below


def _program(build, *inputs):
    prog = sg.Program()
    with sg.program_guard(prog):
        values = [sg.data(name, shape, "float64") for name, shape in inputs]
        fetches = build(*values)
    return prog, fetches


def _with_grad(loss, wrt):
    return [loss] + ir_backward.grad(loss, wrt)


def reshape_there_and_back(x):
    """[batch, 12] -> [batch*12] -> [batch, 3, 4]: products and their division."""
    flat = sg.reshape(x, [-1])
    back = sg.reshape(sg.tanh(flat), [-1, 3, 4])
    return _with_grad(sg.sum(back * back), [x])


def concatenated(x, u):
    """[batch, 12] and [?, 12] along the dynamic axis: a sum of symbols."""
    joined = sg.concatenate([x, u], axis=0)
    return _with_grad(sg.mean(sg.sum(sg.tanh(joined), axis=1)), [x, u])


def pooled(p):
    """A 2x2 stride-2 window over [1, 1, h, 4]: floor division h//2."""
    return _with_grad(sg.sum(nn.max_pool2d(p, 2, 2)), [p])


def sliced(x):
    """x[1:] has a fresh anonymous dim defined by the slice (bound from its result)."""
    rows = x[1:]
    return _with_grad(sg.sum(sg.sum(rows * rows, axis=1) * sg.sum(rows, axis=1)), [x])


CASES = {
    "reshape": (reshape_there_and_back, [("x", ["batch", 12])],
                lambda n, rng: {"x": rng.normal(size=(n, 12))}),
    "concatenate": (concatenated, [("x", ["batch", 12]), ("u", [None, 12])],
                    lambda n, rng: {"x": rng.normal(size=(n, 12)),
                                    "u": rng.normal(size=(n + 1, 12))}),
    "pool": (pooled, [("p", [1, 1, "h", 4])],
             lambda n, rng: {"p": rng.normal(size=(1, 1, 2 * n + 1, 4))}),
    "slice": (sliced, [("x", ["batch", 12])],
              lambda n, rng: {"x": rng.normal(size=(n + 1, 12))}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_dim_expressions_run_at_any_size_without_recompiling(case, backend):
    build, inputs, feeds_of = CASES[case]
    prog, fetches = _program(build, *inputs)
    oracle = sg.compile(prog, fetches, backend="interpreter", passes=[])
    fn = sg.compile(prog, fetches, backend=backend)
    source = fn.source
    rng = np.random.default_rng(0)
    for batch in BATCHES:
        feeds = feeds_of(batch, rng)
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert fn.source == source   # one compile served every size


def _shape_reads(source) -> list:
    """The lines of generated source that read an array's shape for a size (in a Python
    module: in its own functions, after the library helpers it copies, which work on whole
    arrays like NumPy's own functions)."""
    own = [source.find(f"\ndef {name}") for name in ("_group", "_region", "run(")]
    if max(own) >= 0:
        source = source[min(at for at in own if at >= 0):]
    else:   # C: the segments' entries (a row or native op's entry works on the arrays it is
        # given, as a NumPy function does)
        source = "\n".join(part for part in re.split(r"\n(?=(?:SG_GLUE )?int sg_)", source)
                            if re.match(r"(?:SG_GLUE )?int sg_\w+_s\d+\(", part))
        assert source
    return [line for line in source.splitlines() if ".shape[" in line
            and not line.lstrip().startswith(("#", "if ((int64_t)(sg_b", "sg_dim_error"))]


def _layer(x, u):
    """A matmul, a softmax and a cross-entropy (the C backend's own entries) over ``batch``."""
    w = sg.parameter("w", [12, 5], "float64")
    logits = x @ w
    labels = sg.argmax(logits, axis=1)
    loss = nn.softmax_cross_entropy(logits, labels) + sg.sum(nn.softmax(logits))
    return _with_grad(loss, [x])


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_generated_code_reads_no_shape_of_a_bound_symbol(backend):
    prog, fetches = _program(lambda x, u: concatenated(x, u) + reshape_there_and_back(x)[1:]
                             + _layer(x, u), ("x", ["batch", 12]), ("u", [None, 12]))
    fn = sg.compile(prog, fetches, backend=backend)
    oracle = sg.compile(prog, fetches, backend="interpreter")
    rng = np.random.default_rng(3)
    for batch in BATCHES:
        feeds = {"x": rng.normal(size=(batch, 12)), "u": rng.normal(size=(batch, 12))}
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    for suffix, source in fn.sources.items():
        assert _shape_reads(source) == [], suffix
    host = fn.sources[".py"]
    assert re.search(r"^    _d\d+ = _dims\['batch'\]$", host, re.M)
    assert re.search(r"^    _d\d+ = _dims\['\?0'\]$", host, re.M)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_only_a_dim_an_op_defines_is_read_from_its_result(backend):
    prog, fetches = _program(sliced, ("x", ["batch", 12]))
    fn = sg.compile(prog, fetches, backend=backend)
    reads = _shape_reads(fn.sources[".py"])
    assert len(reads) == 1 and "defined by this op" in reads[0], reads
    assert all(_shape_reads(source) == [] for suffix, source in fn.sources.items()
               if suffix != ".py")


def _regression(name):
    """The regression program of the shape-model issue with its batch dim named ``name``."""
    return _program(lambda x, t: _with_grad(sg.mean((sg.sum(x, axis=1) - t) ** 2), [x]),
                    ("x", [name, 3]), ("t", [name]))


def _check_runs(prog, fetches, backend, name):
    fn = sg.compile(prog, fetches, backend=backend)
    oracle = sg.compile(prog, fetches, backend="interpreter")
    for batch in (1, 3, 5):
        feeds = {"x": np.arange(batch * 3.0).reshape(batch, 3), "t": np.ones(batch)}
        for got, want in zip(fn(**feeds), oracle(**feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(sg.FeedError, match=re.escape(f"dim {name!r} is 3 in t but 2 in x")):
        fn(x=np.ones((2, 3)), t=np.ones(3))
    return fn


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["_dims", "_d0", "np", "feeds", "run", "sg_size", "\u0431"])
def test_a_symbol_named_like_generated_code_never_becomes_its_identifier(name, backend):
    prog, fetches = _regression(name)
    fn = _check_runs(prog, fetches, backend, name)
    if backend != "interpreter":
        assert f"_dims[{ascii(name)}]" in fn.sources[".py"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_symbol_text_is_escaped(backend):
    """The front end takes identifiers only; code generation must not rely on it: a symbol
    whose text is code appears only inside an escaped string literal."""
    name = "b'); import os #"
    prog, fetches = _regression("batch")
    for op in walk_ops(prog.ops):   # the text every printer and generator reads
        for value in op.results:
            for dim in value.dims:
                for symbol in symbols_of(dim):
                    symbol.name = name
    fn = _check_runs(prog, fetches, backend, name)
    for source in fn.sources.values() if backend != "interpreter" else ():
        for line in source.splitlines():
            if name in line:
                assert line.strip().startswith("_d") and f"_dims[{ascii(name)}]" in line, line


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_artifacts_run_by_the_standalone_runner_at_a_new_batch_size(tmp_path, backend):
    prog, fetches = _program(lambda x, u: concatenated(x, u) + sliced(x)[:1],
                             ("x", ["batch", 12]), ("u", [None, 12]))
    fn = sg.compile(prog, fetches, backend=backend)
    rng = np.random.default_rng(1)
    fn(x=rng.normal(size=(3, 12)), u=rng.normal(size=(2, 12)))
    path = fn.save(tmp_path / "model")
    runner = runpy.run_path(standalone.__file__)["load"](path)
    loaded = sg.load(path)
    for batch in (1, 2, 7):
        feeds = {"x": rng.normal(size=(batch + 1, 12)), "u": rng.normal(size=(batch, 12))}
        want = fn(**feeds)
        for outputs in (runner(**feeds), loaded(**feeds)):
            for got, expected in zip(outputs, want):
                np.testing.assert_allclose(got, expected, rtol=1e-12)
    with pytest.raises(Exception, match="dim 1 must be 12"):
        runner(x=np.ones((2, 12)), u=np.ones((2, 11)))
    prog, fetches = _regression("batch")   # two inputs binding one named dim
    path = sg.compile(prog, fetches, backend=backend).save(tmp_path / "regression")
    runner = runpy.run_path(standalone.__file__)["load"](path)
    with pytest.raises(Exception, match="dim 'batch' is 3 in t but 2 in x") as info:
        runner(x=np.ones((2, 3)), t=np.ones(3))
    assert type(info.value).__name__ == "FeedError"
    want = sg.compile(prog, fetches, backend="interpreter")(x=np.ones((4, 3)), t=np.zeros(4))
    for got, expected in zip(runner(x=np.ones((4, 3)), t=np.zeros(4)), want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_dim_names_render_expressions_as_integer_arithmetic():
    n, m = Symbol("n"), Symbol(None, 0)
    names = DimNames()
    names.bind(n, "_d0")
    names.bind(m, "_d1")
    sizes = {"_d0": 7, "_d1": 3}
    for dim, want in ((n * 784, 7 * 784), (n + m, 10), (floordiv(n - 3, 2) + 1, 3),
                      (floordiv(n + 1, 2), 4), (floordiv(m - 5, 2), -1)):
        assert eval(names.code(dim), {}, dict(sizes)) == want   # noqa: S307
        c = names.code(dim, c=True)
        assert "//" not in c
    with pytest.raises(UnboundDim):
        names.code(Symbol("other"))
    names.push()
    names.bind(Symbol("k"), "_d2")
    assert names.known(Symbol("k") * 2)
    names.pop()
    assert not names.known(Symbol("k"))


def _meets_sliced(s, t):
    """``s[1:]`` (a dim the slice defines at run time) meets ``t``'s: the program assumes
    they are equal; a scan whose body gives back a slice of its carry assumes it keeps ``k``."""
    return [s[1:] + t]


def _carry_sliced(s):
    return [sg.fori_loop(0, 2, lambda i, c: c[1:] * 2.0, s)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dim_an_op_defines_is_checked_against_what_the_program_assumed(backend):
    prog, fetches = _program(_meets_sliced, ("s", ["k"]), ("t", [None]))
    fn = sg.compile(prog, fetches, backend=backend)
    got, = fn(s=np.arange(5.0), t=np.ones(4))
    np.testing.assert_array_equal(got, np.arange(1.0, 5.0) + 1)
    with pytest.raises(sg.errors.FeedError,
                       match=r"op add \(built at .*test_dim_code.py:\d+\) needs dim \?\d+ "
                             r"\(= 4, defined at run time by an op's result\) and dim \?\d+ "
                             r"\(= 5\) to be equal"):
        fn(s=np.arange(5.0), t=np.ones(5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_carry_that_changes_size_at_run_time_is_a_feed_error_naming_the_loop(backend):
    prog, fetches = _program(_carry_sliced, ("s", ["k"]))
    fn = sg.compile(prog, fetches, backend=backend)
    with pytest.raises(sg.errors.FeedError, match=r"op scan \(built at .*\) needs dim k \(= 5\) "
                                                  r"and dim \?\d+ \(= 4, defined at run time"):
        fn(s=np.ones(5))
    if backend != "interpreter":
        assert "raise FeedError(" in fn.sources[".py"]   # the host module


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_the_check_of_a_dim_an_op_defines_runs_in_the_standalone_runner(tmp_path, backend):
    prog, fetches = _program(_meets_sliced, ("s", ["k"]), ("t", [None]))
    path = sg.compile(prog, fetches, backend=backend).save(tmp_path / "model")
    runner = runpy.run_path(standalone.__file__)["load"](path)
    np.testing.assert_array_equal(runner(s=np.arange(3.0), t=np.zeros(2))[0], [1.0, 2.0])
    with pytest.raises(ValueError, match="needs dim") as info:
        runner(s=np.arange(3.0), t=np.zeros(3))
    assert type(info.value).__name__ == "FeedError"
    with pytest.raises(sg.errors.FeedError, match="needs dim"):
        sg.load(path)(s=np.arange(3.0), t=np.zeros(3))


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_a_random_op_shaped_like_a_value_takes_its_shape_from_the_binding(backend):
    prog, fetches = _program(lambda x: [x * sg.random.uniform(x)], ("x", ["batch", 3]))
    fn = sg.compile(prog, fetches, backend=backend)
    source = fn.sources[".py"]
    call = next(line for line in source.splitlines() if "_sg_random_uniform(" in line
                and "=" in line.split("(")[0])
    assert re.search(r"shape=\(_d\d+, 3\)", call) and "x" not in call.split("(", 1)[1]
    want = sg.compile(prog, fetches, backend="interpreter")(x=np.ones((4, 3)))[0]
    np.testing.assert_array_equal(fn(x=np.ones((4, 3)))[0], want)
