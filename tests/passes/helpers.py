"""Shared helpers: run a pass list through the interpreter and compare with no passes."""
import numpy as np

import symgrad as sg
from symgrad.backends import get_backend
from symgrad.passes import PassOptions, optimize
from symgrad.runtime.options import CompileOptions


def run_both(prog, fetches, passes, feeds, rtol=1e-12):
    """Interpreter results with and without ``passes`` agree; returns the optimized compile."""
    plain = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    compiled = sg.compile(prog, fetches, backend="interpreter", passes=passes)
    for a, b in zip(plain, compiled(**feeds)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol)
    return compiled


def apply(prog, fetches, passes, backend="numpy", **options):
    """``(program, fetches, report)`` after ``passes`` run with ``options`` under ``backend``'s
    fusion policy, as ``sg.compile`` runs them (the input program is left intact)."""
    copy, value_map = prog.clone()
    options = CompileOptions(**options)
    pass_options = PassOptions.of(options, get_backend(backend).fusion_policy(options))
    return optimize(copy, [value_map[v] for v in fetches], pass_options, passes)


def op_names(program):
    return [op.name for op in program.ops]
