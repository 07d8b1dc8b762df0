"""A large program's C in bounded step functions and translation units (backends/c_backend/units.py):
the split program computes what the interpreter does, its units are cached and reused one by
one, and a unit the compiler rejects is named in the error."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward
from symgrad.backends import c_backend
from symgrad.backends.c_backend import compiler, units


@pytest.fixture
def small_bounds(monkeypatch):
    """Bounds small enough that a program of a few hundred ops is several steps and units."""
    monkeypatch.setattr(units, "STEP_STATEMENTS", 6)
    monkeypatch.setattr(units, "UNIT_LINES", 400)
    monkeypatch.setattr(units, "UNIT_FUNCTIONS", 2)


def _chain(n, scale=lambda i: 0.9, op=None, shift=None):
    """sum(y) and its grad for y = x, then y * scale(i) and tanh(y) in turn (the W4 chain);
    ``shift``, when given, is added in the middle; ``op`` (without a gradient), when given, is
    applied there (then only the sum)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4], "float64")
        y = x
        for i in range(n):
            y = sg.tanh(y) if i % 2 else y * scale(i)
            if op is not None and i == n // 2:
                y = op(y, y)
            if shift is not None and i == n // 2:
                y = y + shift
        loss = sg.sum(y)
    return prog, [loss] if op is not None else [loss, *ir_backward.grad(loss, [x])]


def _units_compiled(monkeypatch) -> list:
    """The units each later compile compiles (the others come from the cache)."""
    compiled = []
    compile_unit = compiler._compile_unit

    def spy(unit, *rest):
        compiled.append(unit)
        return compile_unit(unit, *rest)
    monkeypatch.setattr(compiler, "_compile_unit", spy)
    return compiled


def test_a_split_program_matches_the_interpreter(small_bounds, tmp_path):
    prog, fetches = _chain(120)
    compiled = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    executable = compiled._executable
    holds = [unit.holds for unit in executable.units]
    assert holds[0] == "runtime" and "group functions" in holds and holds[-1] == "glue"
    assert len(executable.units) > 4 and compiled.stats["c_units"] == len(executable.units)
    steps = re.findall(r"^(?:SG_GLUE )?SG_LINK int (sg_p_\w+)\(", compiled.source,
                       re.MULTILINE)
    assert len(steps) > 3 and len(compiled.stats) and compiled.stats["c_segments"] == 1
    assert compiled.source.count("/* ==== unit ") == len(executable.units)
    x = np.random.default_rng(0).standard_normal((3, 4))
    expected = sg.compile(prog, fetches, backend="interpreter")(x=x)
    for want, got in zip(expected, compiled(x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_each_unit_compiles_alone_without_warnings(small_bounds, tmp_path):
    """Every unit declares what it calls in another (-Wall finds nothing), and the joined
    source, ``fn.source``, is one valid C file as well."""
    prog, fetches = _chain(60)
    compiled = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    tools = compiler.toolchain()
    texts = [unit.text for unit in compiled._executable.units] + [compiled.source]
    for number, text in enumerate(texts):
        path = tmp_path / f"unit{number}.c"
        path.write_text(text)
        flags = [flag for flag in tools.flags if flag != "-shared"]
        result = subprocess.run([tools.compiler, *flags, "-Wall", "-Werror", "-fsyntax-only",
                                 str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]


def test_a_program_changed_in_one_group_recompiles_only_its_units(small_bounds, tmp_path,
                                                                  monkeypatch):
    """Every multiply by its own constant (every group its own function); changing a constant
    that only one group reads (an added one: its gradient does not read it) changes that
    group's function, so its unit, the unit of the step calling it and the entry's: the other
    units come from the cache."""
    compiled = _units_compiled(monkeypatch)
    first = sg.compile(*_chain(80, lambda i: 1 + i / 1000, shift=0.5), backend="c",
                       cache_dir=str(tmp_path))
    kinds = [unit.holds for unit in first._executable.units]
    assert kinds.count("group functions") > 2 and len(compiled) == len(kinds)
    compiled.clear()
    second = sg.compile(*_chain(80, lambda i: 1 + i / 1000, shift=0.25), backend="c",
                        cache_dir=str(tmp_path))
    assert second.stats["c_units"] == len(kinds) and not second.stats["cache_hit"]
    assert [unit.holds for unit in compiled].count("group functions") == 1
    assert "runtime" not in [unit.holds for unit in compiled] and len(compiled) <= 3
    x = np.random.default_rng(1).standard_normal((2, 4))
    assert not np.allclose(first(x=x)[0], second(x=x)[0])
    compiled.clear()
    again = sg.compile(*_chain(80, lambda i: 1 + i / 1000, shift=0.5), backend="c",
                       cache_dir=str(tmp_path))
    assert compiled == [] and again(x=x)[1].tobytes() == first(x=x)[1].tobytes()


def test_a_unit_the_compiler_rejects_is_named_with_the_op_and_what_it_said(small_bounds,
                                                                           tmp_path):
    bad = sg.custom_op("split_c_undeclared", lambda a, b: a + b, lambda a, b: a, None,
                       c="sg_split_no_such_function({0})", category="elementwise")
    prog, fetches = _chain(60, op=bad)
    with pytest.raises(c_backend.CCompileError) as caught:
        sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    message = str(caught.value)
    assert re.search(r"rejected unit \d+ of \d+ \(group functions\) of a C program "
                     r"\S+c_unit_\w+\.c at:", message), message
    assert re.search(r"/\* %\d+ = split_c_undeclared\(%\d+, %\d+\) \*/", message), message
    assert "implicit declaration of function" in message and "sg_split_no_such_function" \
        in message


def test_a_split_program_in_a_deferred_block_compiles_when_it_first_runs(small_bounds,
                                                                         tmp_path):
    prog, fetches = _chain(60)
    with c_backend.deferred():
        compiled = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
        assert compiled._executable.library is None
        x = np.ones((2, 4))
        got = compiled(x=x)
    expected = sg.compile(prog, fetches, backend="numpy")(x=x)
    for want, value in zip(expected, got):
        np.testing.assert_allclose(value, want, rtol=1e-12)


@pytest.mark.slow
def test_the_10k_op_chain_compiles_on_c(tmp_path):
    """The W4 chain of 10,000 ops (benchmarks/cpu.py), cold cache: several units."""
    prog, fetches = _chain(10_000)
    compiled = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    assert compiled.stats["c_units"] > 2
    x = np.random.default_rng(2).standard_normal((3, 4))
    expected = sg.compile(prog, fetches, backend="numpy")(x=x)
    for want, got in zip(expected, compiled(x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_units_compile_on_as_many_processes_as_the_threads_option_allows(small_bounds,
                                                                          tmp_path,
                                                                          monkeypatch):
    """threads=1: one compiler process at a time (the CPUs the process may use otherwise)."""
    running, most = [0], [0]
    compile_unit = compiler._compile_unit

    def counting(*args):
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            return compile_unit(*args)
        finally:
            running[0] -= 1
    monkeypatch.setattr(compiler, "_compile_unit", counting)
    compiled = sg.compile(*_chain(60), backend="c", cache_dir=str(tmp_path), threads=1)
    assert compiled.stats["c_units"] > 2 and most[0] == 1


def test_native_and_row_op_functions_of_a_split_program_compile_optimized(small_bounds,
                                                                         tmp_path):
    """Row ops and native ops are members' functions whose own loops do the work (softmax,
    pooling, im2col): in a split program they go in the units of group functions, built at
    -O3, never with the glue that is built at GLUE_LEVEL; the program still matches the
    interpreter."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 2, 6, 6], "float32")
        w = sg.data("w", [3, 2, 3, 3], "float32")
        h = sg.nn.max_pool2d(sg.nn.relu(sg.nn.conv2d(x, w, padding=1)), 2, 2, 0)
        y = h
        for i in range(40):
            y = sg.tanh(y) if i % 2 else y * 0.9
        flat = sg.reshape(y, [-1, 27])
        loss = sg.sum(sg.nn.softmax(flat, axis=-1) * flat)
        fetches = [loss, *ir_backward.grad(loss, [x, w])]
    compiled = sg.compile(prog, fetches, backend="c", cache_dir=str(tmp_path))
    units_ = compiled._executable.units
    functions = [unit for unit in units_ if unit.holds == "group functions"]
    assert functions and "glue" in [unit.holds for unit in units_]
    tools = compiler.toolchain()
    assert all("-O3" in compiler.unit_flags(unit, tools) for unit in functions)
    members = re.compile(r"^SG_LINK int (sg_[nr]_\w+)\([^;{]*\)\s*\{", re.MULTILINE)   # defined
    defined = {name for unit in functions for name in members.findall(unit.text)}
    assert len(defined) >= 4   # conv, pooling, their gradients, softmax
    assert defined == set(members.findall(compiled.source))
    assert not any(members.search(unit.text) for unit in units_ if unit.glue)
    rng = np.random.default_rng(3)
    feeds = dict(x=rng.standard_normal((2, 2, 6, 6)).astype("float32"),
                 w=rng.standard_normal((3, 2, 3, 3)).astype("float32"))
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for want, got in zip(expected, compiled(**feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
