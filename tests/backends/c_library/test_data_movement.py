"""Data movement in an exported library: slices (of run-time dims, negative steps),
concatenate, stack, split, pad, N-D transposes, take and take_along_axis, matmuls of two
stacks (attention), and their gradients, equal the C backend bit for bit in float64 and the
interpreter; an index out of range fails the call with Python's message, also inside a loop,
where a C driver run under AddressSanitizer shows every buffer freed."""
import os
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .conftest import one_blas_thread
from .library_ctypes import exported

pytestmark = pytest.mark.slow   # each program builds a library with the C compiler: seconds


def moves():
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["n", 6], "float64")
        q = sg.data("q", ["heads", 4, 3], "float64")
        idx = sg.data("idx", ["k"], "int64")
        labels = sg.data("labels", ["n", 2], "int64")
        w = sg.parameter("w", [6, 4], "float64", init=rng.standard_normal((6, 4)))
        table = sg.parameter("table", [7, 3], "float64", init=rng.standard_normal((7, 3)))
        tail = x[1:, ::-1]                                   # a run-time length, backwards
        middle = x[:, 2:5]
        joined = sg.concatenate([tail, x[:-1, :]], axis=1)
        stacked = sg.stack([middle, middle * 2.0], axis=1)
        padded = sg.pad(middle, ((1, 0), (0, 2)), constant_values=0.5)
        turned = sg.transpose(sg.reshape(stacked, [-1, 2, 3]), (2, 0, 1))
        rows = sg.take(table, idx, axis=0)
        picked = sg.take_along_axis(x @ w, labels, axis=1)
        left, right = sg.split(joined, [5], axis=1)
        loss = sg.sum(joined * joined) + sg.sum(stacked) + sg.sum(padded * padded) + \
            sg.sum(turned * turned) + sg.sum(rows * rows) + sg.sum(picked * picked) + \
            sg.sum(left) + sg.sum(right * right) + sg.sum(x[2] * x[-1, 1:2])
        keys = q @ w[:3, :3]                                         # a stack @ a matrix
        attended = sg.nn.softmax(q @ sg.transpose(keys, (0, 2, 1)), axis=-1) @ q   # stacks
        loss = loss + sg.sum(attended * attended)
        grads = ir_backward.grad(loss, [w, table, x, q])
    return prog, [loss] + list(grads) + [joined, stacked, padded, turned, rows, picked,
                                         attended]


@pytest.fixture(scope="module")
def library(tmp_path_factory, cblas):
    fn, oracle, _, built = exported(moves(), tmp_path_factory.mktemp("moves"), "moves")
    yield fn, oracle, built
    built.close()


def feeds(n, seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 6)), "idx": np.array([0, 3, 3, -1, 6, -7]),
            "labels": rng.integers(-4, 4, (n, 2)), "q": rng.standard_normal((2, 4, 3))}


def test_moves_and_gathers_and_their_gradients(library):
    fn, oracle, built = library
    for n in (5, 3):
        data = feeds(n, seed=n)
        with one_blas_thread():
            want = [np.asarray(a) for a in fn(**data)]
            code, got = built.run(data, [a.shape for a in want])
        assert code == 0, built.error()
        for k, (a, b, c) in enumerate(zip(want, got, oracle(**data))):
            assert np.array_equal(a, b), f"output {k}"
            np.testing.assert_allclose(b, c, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")


@pytest.mark.parametrize("name, bad", [("idx", 7), ("idx", -8), ("labels", 4)])
def test_an_index_out_of_range_fails_with_pythons_message(library, name, bad):
    fn, _, built = library
    data = feeds(4)
    data[name].reshape(-1)[1] = bad
    with pytest.raises(sg.errors.IndexOutOfRangeError) as raised:
        fn(**data)
    shapes = [np.shape(a) for a in fn(**feeds(4))]
    code, _ = built.run(data, shapes)
    assert code == 2   # NAME_ERROR_VALUE
    message = built.error()
    assert f"index {bad} is out of bounds for axis" in message
    assert message in str(raised.value)


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "rows.h"

/* Sums rows of a table picked by a scan over argv[1] (4 x 2 int64 written as text). */
int main(int argc, char **argv)
{
    int64_t picks[8];
    double total;
    for (int k = 0; k < 8; k++)
        picks[k] = argc > k + 1 ? atoll(argv[k + 1]) : 0;
    rows_state *state = rows_state_new();
    if (state == NULL)
        return 3;
    int code = rows_run(state, picks, 4, &total);
    printf("%d %.17g %s\n", code, total, rows_last_error());
    rows_state_free(state);
    return 0;
}
"""


def test_an_error_inside_a_loop_frees_every_buffer(tmp_path, cblas):
    prog = sg.Program()
    with sg.program_guard(prog):
        picks = sg.data("picks", ["steps", 2], "int64")
        table = sg.parameter("table", [5, 3], "float64",
                             init=np.arange(15, dtype="float64").reshape(5, 3))
        total, _ = sg.scan(lambda acc, p: (acc + sg.sum(sg.take(table, p, axis=0) * 1.5),
                                           None), sg.constant(0.0, "float64"), picks)
    fn = sg.compile(prog, [total], backend="c")
    folder = fn.export_c(str(tmp_path / "rows"), name="rows", blas="numpy",
                         embed_parameters=True)
    (tmp_path / "driver.c").write_text(DRIVER)
    binary = str(tmp_path / "driver")
    done = subprocess.run(["cc", "-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined",
                           "-fno-omit-frame-pointer", f"-I{folder}", str(tmp_path / "driver.c"),
                           os.path.join(folder, "rows.c"), os.path.join(folder, "rows_state.c"),
                           "-lm", "-o", binary], capture_output=True, text=True)
    if done.returncode != 0 and "asan" in done.stderr.lower():
        pytest.skip(f"no AddressSanitizer runtime: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    good, bad = [0, 1, 4, -1, 2, 2, 3, 0], [0, 1, 4, -1, 2, 5, 3, 0]
    for picks in (good, bad):
        done = subprocess.run([binary, *map(str, picks)], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stderr
        code, total, message = done.stdout.split(" ", 2)
        if picks is good:
            want = fn(picks=np.array(picks).reshape(4, 2))[0]
            assert code == "0" and float(total) == float(want)
        else:
            assert code == "2" and "index 5 is out of bounds for axis 0 with size 5" in message
