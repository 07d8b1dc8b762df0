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

    def feeds(self, dtype=None):
        return {f"in{i}": (a.astype(dtype) if dtype is not None and a.dtype.kind == "f" else a)
                for i, a in enumerate(self.inputs)}


def _load(area):
    return importlib.import_module(f"tests.ops.samples_{area}").SAMPLES


def rng(seed=0):
    return np.random.default_rng(seed)


AREAS = ("elementwise", "structure", "nn")


def __getattr__(name):
    """``ALL_SAMPLES`` is joined on first use, so an area module may import this one first."""
    if name == "ALL_SAMPLES":
        globals()["ALL_SAMPLES"] = [s for area in AREAS for s in _load(area)]
        return globals()["ALL_SAMPLES"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
