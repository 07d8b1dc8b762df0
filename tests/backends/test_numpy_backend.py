"""The NumPy code generator: module contract, chunking, names, cache, threads, dynamic dims."""
import ast
import os
import pathlib
import sys
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends.host import row_pool


def _compare(prog, fetches, feeds, rtol=1e-6, **options):
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    compiled = sg.compile(prog, fetches, backend="numpy", **options)
    got = compiled(**feeds)
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol)
    return compiled


def _imports(source):
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + node.module)
    return names


def _softmax_grad_program(batch=None):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [batch, 7], "float64")
        w = sg.parameter("w", [7, 3], "float64", init=np.linspace(-1, 1, 21).reshape(7, 3))
        logits = x @ w
        m = sg.max(logits, axis=1, keepdims=True)
        e = sg.exp(logits - m)
        p = e / sg.sum(e, axis=1, keepdims=True)
        loss = sg.mean(sg.sum(p * p, axis=1))
        gx, gw = ir_backward.grad(loss, [x, w])
    return prog, [loss, gx, gw]


@pytest.mark.parametrize("chunk", [8, 64, 65536])
@pytest.mark.parametrize("fusion", [True, False])
def test_reductions_over_chunks_match(chunk, fusion):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 6], "float32")
        y = sg.exp(x * 0.5) + sg.sin(x)
        fetches = [sg.sum(y), sg.sum(y, axis=0), sg.sum(y, axis=1, keepdims=True),
                   sg.mean(y * y), sg.max(y - 1.0, axis=0), sg.min(y, axis=1), sg.prod(y * 0.1 + 1.0)]
    feeds = {"x": np.random.default_rng(1).standard_normal((53, 6)).astype("float32")}
    _compare(prog, fetches, feeds, rtol=1e-4, chunk_size=chunk, fusion=fusion)


def test_module_contract():
    prog, fetches = _softmax_grad_program()
    compiled = _compare(prog, fetches, {"x": np.random.rand(5, 7)})
    source = compiled.source
    assert {name for name in _imports(source)
            if name.split(".")[0] not in sys.stdlib_module_names} <= {"numpy", ".row_pool"}
    helper = pathlib.Path(row_pool.__file__).read_text()
    assert all(name.split(".")[0] in sys.stdlib_module_names for name in _imports(helper))
    module = compiled._executable.module
    assert callable(module.run)
    assert [i["name"] for i in module.INPUTS] == ["x", "w"]
    assert len(module.OUTPUTS) == 3
    assert set(module.CONSTANTS) >= {"w"}
    assert compiled._executable.constants["w"].shape == (7, 3)
    # the module runs on its own: the binding of the symbolic dims first, keyword feeds,
    # parameters default to CONSTANTS
    out = module.run({"?0": 2}, x=np.ones((2, 7)))
    assert isinstance(out, list) and len(out) == 3
    with pytest.raises(TypeError, match="_dims"):
        module.run(x=np.ones((2, 7)))
    # a fed parameter overrides its CONSTANTS value
    w2 = np.zeros((7, 3))
    expected = sg.compile(prog, fetches, backend="interpreter")(x=np.ones((2, 7)), w=w2)
    for e, g in zip(expected, compiled(x=np.ones((2, 7)), w=w2)):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-9)


def test_source_starts_with_the_program():
    """The fixed thread-pool runtime is imported, not printed: before the first function of
    the program come only the header, the imports, the signature and the constants."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float32")
        w = sg.parameter("w", [4, 3], "float32")
        loss = sg.mean(sg.tanh(x @ w) ** 2)
        gw, = ir_backward.grad(loss, [w])
    compiled = sg.compile(prog, [loss, gw], backend="numpy")
    source = compiled.source
    assert "from .row_pool import RowPool" in source and "_POOL.over_rows(" in source
    head = source[:source.index("\ndef ")]
    assert len(head.splitlines()) <= 16, head
    assert "ThreadPoolExecutor" not in source and "import threading" not in source
    first = source[source.index("\ndef ") + 5:].split("(")[0]
    assert first.startswith(("_group", "_sg_")) or first == "run"   # a helper (_sg_matmul)


def test_readable_source():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4], "float64")
        h = sg.tanh(x)
        h.name = "hidden"
        loss = sg.sum(h * h)
        g, = ir_backward.grad(loss, [x])
    compiled = sg.compile(prog, [g], backend="numpy", fusion=False)
    source = compiled.source
    assert "hidden = np.tanh(x" in source
    assert "# backward of %hidden = tanh(%x)" in source
    assert "del " in source
    fused = sg.compile(prog, [g], backend="numpy")
    assert "# fused group 0" in fused.source
    assert "fused group 0" in fused.ir
    assert fused.stats["fused_groups"] == 1
    assert fused.stats["ops_after"] <= fused.stats["ops_before"]
    assert "planned_peak_bytes" in fused.stats


@pytest.mark.parametrize("name", ['x"; import os; "', "class", "π", "a\nb", "__import__", "t1",
                                  "np", "run", "1abc", ""])
def test_sanitized_names(name):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data(name or "in", [3], "float64")
        p = sg.parameter(name + "_p" if name else "p", [3], "float64", init=np.ones(3))
        y = sg.tanh(x) * p + 1.0
        y.name = name or None
        z = sg.exp(y)
        z.name = "t1"
    compiled = _compare(prog, [y, z], {x.name: np.arange(3.0)})
    tree = ast.parse(compiled.source)
    assert not any(isinstance(n, ast.Import) and n.names[0].name == "os" for n in ast.walk(tree))
    assert compiled.source.isascii()


def test_cache_hit_on_second_compile(tmp_path):
    prog, fetches = _softmax_grad_program()
    first = sg.compile(prog, fetches, backend="numpy", cache_dir=str(tmp_path))
    second = sg.compile(prog, fetches, backend="numpy", cache_dir=str(tmp_path))
    assert first.stats["cache_hit"] is False and second.stats["cache_hit"] is True
    assert first.source == second.source
    files = [f for f in os.listdir(tmp_path) if f.endswith(".py")]
    assert len(files) == 1 and files[0].startswith("numpy_")
    other = sg.compile(prog, fetches, backend="numpy", cache_dir=str(tmp_path), chunk_size=128)
    assert other.stats["cache_hit"] is False
    x = np.random.rand(3, 7)
    for a, b in zip(first(x=x), second(x=x)):
        np.testing.assert_array_equal(a, b)


def test_changed_scalar_constant_misses_the_cache(tmp_path):
    results = []
    for value in (1.5, 1.5000001):
        prog = sg.Program()
        with sg.program_guard(prog):
            x = sg.data("x", [2], "float64")
            y = x * value
        compiled = sg.compile(prog, [y], backend="numpy", cache_dir=str(tmp_path))
        results.append(compiled(x=np.ones(2))[0][0])
    assert results == [1.5, 1.5000001]


def test_dump_writes_every_module(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMGRAD_DUMP", str(tmp_path / "dump"))
    prog, fetches = _softmax_grad_program()
    compiled = sg.compile(prog, fetches, backend="numpy")
    dumped = os.listdir(tmp_path / "dump")
    assert len(dumped) == 1
    assert (tmp_path / "dump" / dumped[0]).read_text() == compiled.source


def test_log_output_code_prints_every_module(monkeypatch, capsys):
    monkeypatch.setenv("SYMGRAD_LOG", "graph, output_code")
    prog, fetches = _softmax_grad_program()
    compiled = sg.compile(prog, fetches, backend="numpy")
    err = capsys.readouterr().err
    assert err.startswith("# ---- symgrad output_code: numpy_") and compiled.source in err
    monkeypatch.setenv("SYMGRAD_LOG", "")
    sg.compile(prog, fetches, backend="numpy")
    assert capsys.readouterr().err == ""


def test_tracebacks_point_at_the_generated_file():
    prog, fetches = _softmax_grad_program()
    compiled = sg.compile(prog, fetches, backend="numpy")
    assert os.path.exists(compiled._executable.path)
    with pytest.raises(KeyError) as info:
        compiled._executable.module.run({"?0": 1})
    assert any(str(entry.path) == compiled._executable.path for entry in info.traceback)
    assert "x = feeds['x']" in str(info.traceback[-1].statement)


def test_dynamic_batch_one_compile_serves_all_sizes():
    prog, fetches = _softmax_grad_program(batch=None)
    interp = sg.compile(prog, fetches, backend="interpreter")
    compiled = sg.compile(prog, fetches, backend="numpy", chunk_size=16)
    for batch in (1, 2, 5, 17, 40):
        x = np.random.default_rng(batch).standard_normal((batch, 7))
        for e, g in zip(interp(x=x), compiled(x=x)):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-9)


def test_eight_threads_share_one_compiled_program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 50], "float64")
        y = sg.sum(sg.tanh(x * 1.5) * sg.exp(-x * x), axis=1)
        g, = ir_backward.grad(sg.sum(y), [x])
    compiled = sg.compile(prog, [y, g], backend="numpy", chunk_size=100)
    interp = sg.compile(prog, [y, g], backend="interpreter")
    inputs = [np.random.default_rng(i).standard_normal((20 + i, 50)) for i in range(8)]
    expected = [interp(x=x) for x in inputs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                for e, r in zip(expected[i], compiled(x=inputs[i])):
                    np.testing.assert_allclose(r, e, rtol=1e-9)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_float32_sums_accumulate_in_float64():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [100000], "float32")
        s = sg.sum(x * 1.0001)
    x = np.full(100000, 0.1, "float32")
    exact = float(np.sum(x.astype("float64") * np.float32(1.0001)))
    on = sg.compile(prog, [s], backend="numpy", chunk_size=1000)(x=x)[0]
    assert on.dtype == np.float32
    assert abs(float(on) - exact) <= abs(exact) * 1e-6
    assert "dtype=np.float64" in sg.compile(prog, [s], backend="numpy", chunk_size=1000).source
    off = sg.compile(prog, [s], backend="numpy", chunk_size=1000, accumulate_float64=False)
    assert "dtype=np.float64" not in off.source


def test_no_chunk_loop_when_the_group_fits_one_chunk():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [10, 10], "float64")
        y = sg.sum(sg.sin(x) * sg.cos(x))
    assert "for _lo" not in sg.compile(prog, [y], backend="numpy").source
    assert "for _lo" in sg.compile(prog, [y], backend="numpy", chunk_size=50).source


def test_memory_plan_reuses_buffers_in_generated_code():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [1000], "float64")
        y = sg.tanh(sg.exp(sg.cos(sg.sin(x))))
    compiled = _compare(prog, [y], {"x": np.random.rand(1000)}, fusion=False)
    assert "out=_b0" in compiled.source and compiled.stats["buffers"] >= 1


def test_w2_gradient_compiles_to_one_fused_group():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4096], "float32")
        loss = sg.sum(sg.tanh(x * 1.5 + 0.5) * sg.sin(x) + sg.exp(-x * x) * 0.3
                      + sg.log1p(x * x))
        gx, = ir_backward.grad(loss, [x])
    compiled = _compare(prog, [gx], {"x": np.random.rand(4096).astype("float32")},
                        rtol=1e-4, chunk_size=1024)
    assert compiled.stats["fused_groups"] == 1
    assert compiled.source.count("for _lo in range") == 1


def test_exported_value_reading_one_scratch_twice():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "float64")
        t = sg.sin(x)
        y = t * t                     # exported: read outside the group by the matmul
        z = sg.exp(sg.matmul(y, sg.transpose(y)))
    _compare(prog, [z, y], {"x": np.random.rand(5, 3)}, chunk_size=4)


def test_epilogue_reads_a_whole_input_the_chunk_loop_also_reads():
    """Regression (found by hypothesis): an epilogue op reading a capture of the chunk loop must
    read the whole array, not the loop's chunk view."""
    prog = sg.Program()
    with sg.program_guard(prog):
        v = sg.data("v", [None, 1], "float64")
        s = sg.sum(sg.tanh(v), axis=1, keepdims=True)
        z = s * v
    fn = sg.compile(prog, [z], backend="numpy", chunk_size=2)
    assert fn.stats["fused_groups"] == 1
    feed = np.linspace(-1, 1, 9).reshape(9, 1)
    np.testing.assert_allclose(fn(v=feed)[0], np.tanh(feed) * feed, rtol=1e-12)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=(1, 0), dilation=(1, 2)),
                                dict(groups=2, padding=1)], ids=str)
def test_cnn_training_step_matches_the_interpreter(kw):
    """A conv -> relu -> max_pool -> conv -> relu -> linear loss and its gradients (the
    convolutions one GEMM per group over the batch, their results transposed views; the
    relu gradient a bit select) agree with the interpreter at several batch sizes of one
    compile."""
    prog = sg.Program()
    rng = np.random.default_rng(3)
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 9, 8], "float32")
        w1_shape = (6, 4 // kw.get("groups", 1), 3, 3)
        w1 = sg.parameter("w1", list(w1_shape), "float32",
                          init=rng.standard_normal(w1_shape).astype("float32"))
        w2 = sg.parameter("w2", [4, 6, 2, 2], "float32",
                          init=rng.standard_normal((4, 6, 2, 2)).astype("float32"))
        b1 = sg.parameter("b1", [6], "float32", init=np.linspace(-1, 1, 6).astype("float32"))
        h = sg.nn.max_pool2d(sg.nn.relu(sg.nn.conv2d(x, w1, b1, **kw)), 2, 2, 0)
        y = sg.nn.relu(sg.nn.conv2d(h, w2, padding=1))
        loss = sg.mean(y * y)
        fetches = [loss, y] + list(ir_backward.grad(loss, [x, w1, b1, w2]))
    interp = sg.compile(prog, fetches, backend="interpreter")
    compiled = sg.compile(prog, fetches, backend="numpy", chunk_size=64)
    for batch in (1, 3, 8):
        feed = rng.standard_normal((batch, 4, 9, 8)).astype("float32")
        for e, g in zip(interp(x=feed), compiled(x=feed)):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
