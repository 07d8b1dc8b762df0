"""Random numbers in an exported library: uniform and normal numbers in float32 and float64,
of static and run-time shapes, inside a loop with a counter, are the C backend's and the
interpreter's bits, call after call (the library advances the program's ``rng_step`` in its
state as the Python call does)."""

import numpy as np
import pytest

import symgrad as sg

from .library_ctypes import exported

pytestmark = pytest.mark.slow   # builds a library with the C compiler: seconds


def draws():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 4], "float32")
        x64 = sg.data("x64", ["n", 4], "float64")
        scaled = sg.random.normal(x, seed=3) * x
        fixed = sg.random.uniform((3, 5), low=-2.0, high=0.5, seed=2 ** 63 + 5)
        wide = sg.random.normal(x64, seed=11, mean=1.0, std=0.1, dtype="float64")
        unit = sg.random.uniform(x64, seed=9, dtype="float64")
        walk = sg.fori_loop(0, 3, lambda i, h: h + sg.random.normal(x, seed=4, counter=i), x)
        total = sg.sum(scaled) + sg.sum(fixed) + sg.sum(walk)
    return prog, [total, scaled, fixed, wide, unit, walk]


def test_random_numbers_are_the_interpreters_bits_call_after_call(tmp_path, cblas):
    fn, oracle, _, library = exported(draws(), tmp_path, "draws")
    assert "rng_step" in library.entry["state"]
    rng = np.random.default_rng(0)
    previous = None
    for n in (5, 2, 5):
        feeds = {"x": rng.standard_normal((n, 4)).astype("float32"),
                 "x64": rng.standard_normal((n, 4))}
        want = [np.asarray(a) for a in fn(**feeds)]
        code, got = library.run(feeds, [a.shape for a in want])
        assert code == 0, library.error()
        for k, (a, b, c) in enumerate(zip(want, got, oracle(**feeds))):
            assert np.array_equal(a, b), f"output {k}"
            if k == 0:   # a float32 sum: the interpreter's adds in another order
                np.testing.assert_allclose(b, c, rtol=1e-5)
            else:        # the numbers, and elementwise math on them
                assert np.array_equal(b, c), f"output {k}"
        if previous is not None:
            assert not np.array_equal(got[2], previous)   # a new step: new numbers
        previous = got[2]
    assert library.parameter("rng_step", "int64", ()) == 3
    library.close()
