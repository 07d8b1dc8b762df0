"""Artifacts carry regions: a program with scan, while_loop and cond (and their gradients)
saved, loaded back and run standalone with NumPy alone gives the same numbers."""
import os
import subprocess
import sys

import numpy as np

import symgrad as sg
from symgrad import ir_backward
from tests.runtime.test_artifact import NUMPY_ONLY

STANDALONE = NUMPY_ONLY + r'''
runner = runpy.run_path(sys.argv[1])
np.savez(sys.argv[3], *runner["run"](xs=np.load(sys.argv[2])))
'''


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", [None, 3], "float64")
        w = sg.parameter("w", [3, 3], "float64", init=np.eye(3) * 0.7)
        h, ys = sg.scan(lambda h, x: (sg.tanh(h @ w + x), sg.sum(h)), sg.zeros([3], "float64"),
                        xs)
        _, v = sg.while_loop(lambda n, v: sg.sum(v * v) < 4.0, lambda n, v: [n + 1, v * 1.5],
                             [sg.constant(np.int64(0)), h + 1.0])
        out = sg.cond(sg.sum(ys) > 0.0, lambda a: a * 2.0, lambda a: -a, v)
        loss = sg.sum(out * out)
        grads = ir_backward.grad(loss, [w, xs])
    return prog, [loss] + grads


def test_regions_survive_save_load_and_run_standalone(tmp_path):
    prog, fetches = _program()
    compiled = sg.compile(prog, fetches, backend="numpy")
    xs = np.random.default_rng(0).uniform(0.1, 0.5, size=(6, 3))
    expected = sg.compile(prog, fetches, backend="interpreter")(xs=xs)
    for got, want in zip(compiled(xs=xs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    path = compiled.save(str(tmp_path / "model"))
    loaded = sg.load(path)
    assert any(op.name == "scan" for op in loaded.program.ops)
    for got, want in zip(loaded(xs=xs), compiled(xs=xs)):
        assert got.tobytes() == want.tobytes()

    np.save(tmp_path / "xs.npy", xs)
    numpy_parent = os.path.dirname(os.path.dirname(np.__file__))
    script = f"import sys; sys.path.insert(0, {numpy_parent!r})\n" + STANDALONE
    module = os.path.join(path, loaded.manifest["standalone"]["module"])
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", script, module,
                           str(tmp_path / "xs.npy"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]},
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        standalone = [out[f"arr_{i}"] for i in range(len(fetches))]
    for got, want in zip(standalone, compiled(xs=xs)):
        assert got.tobytes() == want.tobytes()
