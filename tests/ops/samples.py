"""Sample programs for every op, shared by the op, grad and backend test suites.

Each area of the op library contributes ``SAMPLES`` (a list of :class:`OpSample`) from its
own ``samples_<area>.py``; ``ALL_SAMPLES`` joins them. The registry-driven tests iterate over
``ALL_SAMPLES``: forward against NumPy (``expected``), first and second derivatives against
float64 central differences (``grad``/``grad2``), and every backend against the interpreter.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import numpy as np


@dataclasses.dataclass
class OpSample:
    op: str                     # registry name of the op this sample exercises
    build: Callable             # build(*input_values) -> Value or tuple of Values
    inputs: list                # NumPy arrays fed as `data` inputs (float64 for grad checks)
    expected: Callable | None = None   # NumPy reference: expected(*arrays) -> array(s)
    grad: bool = True           # check first derivatives numerically (float inputs only)
    grad2: bool = True          # check second derivatives numerically
    dynamic: tuple = ()         # indices of inputs declared with an unknown first dim
    id: str = ""
    rtol: float = 1e-6
    atol: float = 1e-6
    step: int | None = None     # random ops: the step counter fed with every run (rng_step)

    def __post_init__(self):
        self.inputs = [np.asarray(a) for a in self.inputs]
        if not self.id:
            shapes = "_".join("x".join(map(str, a.shape)) or "s" for a in self.inputs)
            self.id = f"{self.op}-{shapes}"

    def declare(self, sg, dtype=None):
        """Declare the inputs as ``data`` (cast to ``dtype`` if given); returns Values."""
        values = []
        for i, array in enumerate(self.inputs):
            shape = list(array.shape)
            if i in self.dynamic and shape:
                shape[0] = None
            dt = dtype if (dtype is not None and array.dtype.kind == "f") else array.dtype
            values.append(sg.data(f"in{i}", shape, dt))
        return values

    def program(self, dtype=None, with_grad=False):
        """``(program, fetches)``: the sample's outputs, plus (``with_grad``) the gradients of
        the sum of their squares with respect to its float inputs."""
        import symgrad as sg

        prog = sg.Program()
        with sg.program_guard(prog):
            values = self.declare(sg, dtype)
            out = self.build(*values)
            fetches = list(out) if isinstance(out, (tuple, list)) else [out]
            floats = [v for v in values if v.dtype.kind == "f"]
            diff = [o for o in fetches if o.dtype.kind == "f"]
            if with_grad and floats and diff:
                loss = sg.sum(diff[0] * diff[0])
                for o in diff[1:]:
                    loss = loss + sg.sum(o * o)
                fetches += sg.ir_backward.grad(loss, floats, allow_unused=True, unused="zeros")
        return prog, fetches

    def feeds(self, dtype=None):
        """The inputs by name (floats cast to ``dtype``), and the random ops' step counter
        when the sample has one, so that every run of a compiled sample draws its numbers."""
        feeds = {f"in{i}": (a.astype(dtype) if dtype is not None and a.dtype.kind == "f" else a)
                 for i, a in enumerate(self.inputs)}
        if self.step is not None:
            feeds["rng_step"] = np.int64(self.step)
        return feeds


def _load(area):
    return importlib.import_module(f"tests.ops.samples_{area}").SAMPLES


def interpret(build, *arrays, dynamic=()):
    """Build a program whose ``data`` inputs are shaped like ``arrays`` (inputs listed in
    ``dynamic`` with an unknown first dim), apply ``build`` and run it in the interpreter.
    Returns ``(out, result)``: ``result`` is an array, or a list for a tuple ``out``. Checks
    that each result has its Value's dtype and known dims."""
    import symgrad as sg

    prog = sg.Program()
    with sg.program_guard(prog):
        values = [sg.data(f"in{i}", [None if i in dynamic and j == 0 else d
                                     for j, d in enumerate(a.shape)], a.dtype)
                  for i, a in enumerate(arrays)]
        out = build(*values)
    outs = list(out) if isinstance(out, tuple) else [out]
    result = sg.compile(prog, outs, backend="interpreter")(*arrays)
    for value, array in zip(outs, result):
        assert array.dtype == value.dtype
        assert all(d is None or d == s for d, s in zip(value.shape, array.shape))
    return out, (result if isinstance(out, tuple) else result[0])


def expect_build_error(build, error, match):
    """``build(x, i)`` on data ``x`` (float32 [3, 4]) and ``i`` (int64 [2]) raises ``error``
    matching ``match`` when the ops are built."""
    import pytest

    import symgrad as sg

    with sg.program_guard(sg.Program()):
        x = sg.data("x", [3, 4])
        i = sg.data("i", [2], "int64")
        with pytest.raises(error, match=match):
            build(x, i)


def rng(seed=0):
    return np.random.default_rng(seed)


AREAS = ("elementwise", "structure", "nn", "control_flow", "indexing", "math", "random")


def __getattr__(name):
    """``ALL_SAMPLES`` is joined on first use, so an area module may import this one first."""
    if name == "ALL_SAMPLES":
        globals()["ALL_SAMPLES"] = [s for area in AREAS for s in _load(area)]
        return globals()["ALL_SAMPLES"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
