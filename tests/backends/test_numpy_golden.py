"""Golden snapshots of generated source. Regenerate with SYMGRAD_REGEN_GOLDEN=1."""
import os
import pathlib

import numpy as np
import pytest

import symgrad as sg

GOLDEN = pathlib.Path(__file__).parent / "golden"


def fused_reduction():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 256], "float32")
        b = sg.data("bias", [256], "float32")
        h = sg.tanh(x * 1.5 + b)
        h.name = "hidden"
        total = sg.sum(h * h, axis=0)
        total.name = "total"
        score = sg.log1p(total) * 0.5
        score.name = "score"
    return prog, [score, h], {"chunk_size": 1024}


def unfused_layer():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 3], "float64")
        w = sg.parameter("w", [3, 2], "float64", init=np.arange(6.0).reshape(3, 2))
        offset = sg.constant(np.array([0.5, -0.5]), name="offset")
        y = sg.exp(sg.matmul(x, w) + offset)
        y.name = "y"
    return prog, [y], {"fusion": False}


@pytest.mark.parametrize("build", [fused_reduction, unfused_layer])
def test_golden_source(build):
    prog, fetches, options = build()
    source = sg.compile(prog, fetches, backend="numpy", **options).source
    path = GOLDEN / f"{build.__name__}.py.txt"
    if os.environ.get("SYMGRAD_REGEN_GOLDEN"):
        path.write_text(source)
    assert source == path.read_text(), f"generated source changed; diff against {path}"
