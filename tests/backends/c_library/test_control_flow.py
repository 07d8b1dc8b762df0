"""Control flow in an exported library: programs with ``scan``, ``while_loop``, ``cond`` and
``fori_loop`` and their gradients, called with ctypes, compute what the same program computes
on the C backend (float64: bit for bit) and the interpreter; a while loop's data-dependent trip
count (none, and more than the 16 rows its stacks start with), and loops checkpointed every k
steps, by sqrt and by a binomial schedule; C drivers run the while/cond program and the
checkpointed one clean under AddressSanitizer."""
import os
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

from .conftest import one_blas_thread
from .library_ctypes import exported

pytestmark = pytest.mark.slow   # each program builds a library with the C compiler: seconds


def rnn():
    """An RNN over ``xs`` (a scan), a reverse scan over its states, and the gradients of a
    loss of both with respect to the weights and the initial state (and a broadcast)."""
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = sg.data("xs", ["T", "batch", 4], "float64")
        h0 = sg.data("h0", ["batch", 5], "float64")
        w = sg.parameter("w", [5, 5], "float64", init=rng.standard_normal((5, 5)) * 0.4)
        u = sg.parameter("u", [4, 5], "float64", init=rng.standard_normal((4, 5)) * 0.4)
        b = sg.parameter("b", [5], "float64", init=rng.standard_normal(5))

        def step(h, x):
            h = sg.tanh(h @ w + x @ u)
            return h, h

        h_last, hs = sg.scan(step, h0, xs)
        total, sums = sg.scan(lambda acc, h: (acc * 0.9 + h, sg.sum(acc * h)),
                              sg.zeros_like(h0), hs, reverse=True)
        spread = sg.broadcast_to(sg.reshape(b, [1, 5, 1]), [2, 5, 3])   # a copy loop
        loss = sg.sum(hs * hs) + sg.sum(h_last) + sg.sum(sums) + sg.mean(total) + \
            sg.sum(spread * sg.sum(h_last))
        grads = ir_backward.grad(loss, [w, u, h0])
    return prog, [loss, hs, sums, spread] + list(grads)


def dynamic():
    """A while loop whose trip count depends on the data (its gradient reads the stacked
    states), a cond on the data, a fori_loop of static bounds, and their gradients."""
    rng = np.random.default_rng(1)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 5], "float64")
        limit = sg.data("limit", [], "float64")
        w = sg.parameter("w", [5, 5], "float64", init=rng.standard_normal((5, 5)) * 0.2)
        h, trips = sg.while_loop(lambda h, i: sg.sum(h * h) < limit,
                                 lambda h, i: (h @ w * 0.5 + h, i + 1),
                                 (x, sg.constant(np.int64(0))))
        y = sg.cond(sg.sum(h) > 0, lambda a: a * 2.0, lambda a: sg.exp(sg.tanh(a)), h)
        z = sg.fori_loop(0, 3, lambda i, a: a * 0.5 + sg.sin(a), y)
        loss = sg.sum(z)
        grads = ir_backward.grad(loss, [w, x])
    return prog, [loss, trips] + list(grads)


def nested_step(c, x_t, w):
    """A scan step running a while loop: its gradient stacks the loop's residuals at each
    step of the scan (stacks whose rows a step sizes: allocated at the first step)."""
    h, _ = sg.while_loop(lambda h, i: i < 3,
                         lambda h, i: (sg.sin(h * x_t) + (h @ w) * 0.1, i + 1),
                         (c, sg.constant(np.int64(0))))
    return h, sg.sum(h)


def checkpointed():
    """Loops checkpointed every few steps (a fori_loop of static bounds: nested scans; one of
    a run-time bound: a counted while loop and the reverse_loop of its schedule), with
    ``"sqrt"`` and with a binomial schedule on a reverse scan: their backward loops recompute
    the steps from the carries they stored; then a scan of while loops (:func:`nested_step`)."""
    rng = np.random.default_rng(2)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 5], "float64")
        xs = sg.data("xs", ["T", "batch", 5], "float64")
        n = sg.data("n", [], "int64")
        w = sg.parameter("w", [5, 5], "float64", init=rng.standard_normal((5, 5)) * 0.4)
        h = sg.fori_loop(0, 7, lambda i, h: sg.tanh(h @ w), x, checkpoint=2)
        h = sg.fori_loop(sg.constant(np.int64(0)), n, lambda i, h: sg.tanh(h @ w + h), h,
                         checkpoint=3)
        h = sg.fori_loop(sg.constant(np.int64(0)), n, lambda i, h: sg.sin(h @ w), h,
                         checkpoint="sqrt")
        (h, _), ys = sg.scan(lambda c, x_t: ((sg.sin(c[0] * x_t) + c[1] @ w, c[1] * 0.5),
                                            c[0] * x_t), (h, x), xs, reverse=True,
                             checkpoint=("binomial", 2))
        h, sums = sg.scan(lambda c, x_t: nested_step(c, x_t, w), h, xs)
        loss = sg.sum(h * h) + sg.sum(ys) + sg.sum(sums)
        grads = ir_backward.grad(loss, [w, x, xs])
    return prog, [loss] + list(grads)


def export(tmp_path_factory, program, name):
    """The library and the program compiled on backends c and interpreter."""
    return exported(program, tmp_path_factory.mktemp(name), name)


def check(programs, feeds):
    """The library's outputs equal the C backend's bit for bit, the interpreter's to 1e-12."""
    fn, oracle, _, library = programs
    with one_blas_thread():
        want = [np.asarray(a) for a in fn(**feeds)]
        code, got = library.run(feeds, [a.shape for a in want])
    assert code == 0, library.error()
    for k, (a, b, c) in enumerate(zip(want, got, oracle(**feeds))):
        assert a.shape == b.shape and np.array_equal(a, b), f"output {k}"
        np.testing.assert_allclose(b, c, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")
    return got


@pytest.fixture(scope="module")
def rnn_library(tmp_path_factory, cblas):
    programs = export(tmp_path_factory, rnn(), "rnn")
    yield programs
    programs[3].close()


@pytest.fixture(scope="module")
def dynamic_library(tmp_path_factory, cblas):
    programs = export(tmp_path_factory, dynamic(), "dyn")
    yield programs
    programs[3].close()


def test_an_rnn_and_its_gradient_by_scan(rnn_library):
    rng = np.random.default_rng(3)
    for steps, batch in ((6, 3), (1, 2), (0, 4)):
        check(rnn_library, {"xs": rng.standard_normal((steps, batch, 4)),
                            "h0": rng.standard_normal((batch, 5))})


def test_a_while_loop_of_data_dependent_trip_count_and_a_cond(dynamic_library):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 5)) * 0.05
    counts = []
    for limit, scale in ((1e-9, 1.0), (0.037, 1.0), (0.05, -1.0), (100.0, 1.0)):
        got = check(dynamic_library, {"x": x * scale, "limit": np.float64(limit)})
        counts.append(int(got[1]))
    assert counts[0] == 0 < counts[1] <= 16 < counts[2] < counts[3]   # stacks grown


def test_a_dim_the_loop_reads_is_checked_at_the_entry(dynamic_library):
    _, _, _, library = dynamic_library
    code, _ = library.run({"x": np.zeros((3, 5)), "limit": np.float64(1.0)}, [(), (), (5, 5),
                                                                              (3, 5)],
                          dims={"x_dim0": -1})
    assert code != 0 and "x: dim 0 is -1" in library.error()


@pytest.fixture(scope="module")
def checkpointed_library(tmp_path_factory, cblas):
    programs = export(tmp_path_factory, checkpointed(), "ckpt")
    yield programs
    programs[3].close()


def checkpointed_feeds(n, steps, seed=5):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 5)) * 0.3, "n": np.int64(n),
            "xs": rng.standard_normal((steps, 2, 5))}


def test_checkpointed_loops_and_their_schedules(checkpointed_library):
    for n, steps in ((0, 0), (1, 1), (7, 9), (30, 23)):
        check(checkpointed_library, checkpointed_feeds(n, steps))


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "dyn.h"

/* argv: the parameter file, then a file of x (3 x 5 float64) and the limit (float64);
   runs the exported program and prints the loss and the trip count. */
int main(int argc, char **argv)
{
    double in[16], loss, gw[25], gx[15];
    int64_t trips;
    FILE *file = fopen(argv[2], "rb");
    if (argc < 3 || file == NULL || fread(in, sizeof(double), 16, file) != 16)
        return 2;
    fclose(file);
    dyn_state *state = dyn_state_new();
    if (state == NULL || dyn_state_load(state, argv[1]) != 0)
        return 3;
    int code = dyn_run(state, in, 3, in + 15, &loss, &trips, gw, gx);
    if (code != 0)
        fprintf(stderr, "%s\n", dyn_last_error());
    printf("%.17g %lld\n", loss, (long long)trips);
    dyn_state_free(state);
    return code;
}
"""


def sanitized(folder, name, driver, tmp_path):
    """The C ``driver`` built with the library's sources under AddressSanitizer and UBSan
    (skips without their runtime), and the environment to run it in."""
    (tmp_path / "driver.c").write_text(driver)
    binary = str(tmp_path / "driver")
    make = ["make", "-s", "--no-print-directory", "-C", folder]
    blas = subprocess.run(make + ["libs"], capture_output=True, text=True).stdout.split()
    blas_cflags = subprocess.run(make + ["blas-cflags"], capture_output=True,
                                 text=True).stdout.split()
    done = subprocess.run(["cc", "-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined",
                           "-fno-omit-frame-pointer", f"-I{folder}", *blas_cflags,
                           str(tmp_path / "driver.c"), os.path.join(folder, f"{name}.c"),
                           *blas, "-o", binary], capture_output=True, text=True)
    if done.returncode != 0 and "asan" in done.stderr.lower():
        pytest.skip(f"no AddressSanitizer runtime: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", ASAN_OPTIONS="detect_leaks=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return binary, env


def run_clean(command, env) -> list:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr
    return done.stdout.split()


def test_the_while_and_cond_program_under_address_sanitizer(dynamic_library, tmp_path):
    fn, _, folder, _ = dynamic_library
    binary, env = sanitized(folder, "dyn", DRIVER, tmp_path)
    x = np.random.default_rng(4).standard_normal((3, 5)) * 0.05
    for limit in (1e-9, 100.0):
        path = tmp_path / "input.bin"
        np.concatenate([x.reshape(-1), [limit]]).tofile(path)
        loss, trips = run_clean([binary, os.path.join(folder, "dyn.params"), str(path)], env)
        with one_blas_thread():
            want = fn(x=x, limit=np.float64(limit))
        assert int(trips) == int(want[1])   # built at -O1 here: the loss to a rounding
        np.testing.assert_allclose(float(loss), want[0], rtol=1e-12)


CHECKPOINTED_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "ckpt.h"

/* argv: the parameter file, n, the steps T, then a file of x (2 x 5) and xs (T x 2 x 5)
   float64; prints the loss and the sum of the gradients. */
int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    const int64_t n = atoll(argv[2]), steps = atoll(argv[3]);
    double *in = malloc((size_t)(10 + 10 * steps) * sizeof(double) + 1);
    double *gxs = malloc((size_t)(10 * steps) * sizeof(double) + 1);
    double loss, gw[25], gx[10], total = 0;
    FILE *file = fopen(argv[4], "rb");
    if (in == NULL || gxs == NULL || file == NULL ||
        fread(in, sizeof(double), (size_t)(10 + 10 * steps), file) != (size_t)(10 + 10 * steps))
        return 2;
    fclose(file);
    ckpt_state *state = ckpt_state_new();
    if (state == NULL || ckpt_state_load(state, argv[1]) != 0)
        return 3;
    int code = ckpt_run(state, in, 2, in + 10, steps, 2, &n, &loss, gw, gx, gxs);
    if (code != 0)
        fprintf(stderr, "%s\n", ckpt_last_error());
    for (int k = 0; k < 25; k++)
        total += gw[k];
    for (int k = 0; k < 10; k++)
        total += gx[k];
    for (int64_t k = 0; k < 10 * steps; k++)
        total += gxs[k];
    printf("%.17g %.17g\n", loss, total);
    ckpt_state_free(state);
    free(in);
    free(gxs);
    return code;
}
"""


def test_the_checkpointed_program_under_address_sanitizer(checkpointed_library, tmp_path):
    fn, _, folder, _ = checkpointed_library
    binary, env = sanitized(folder, "ckpt", CHECKPOINTED_DRIVER, tmp_path)
    for n, steps in ((0, 0), (9, 6)):
        data = checkpointed_feeds(n, steps)
        path = tmp_path / "input.bin"
        np.concatenate([data["x"].reshape(-1), data["xs"].reshape(-1)]).tofile(path)
        loss, total = run_clean([binary, os.path.join(folder, "ckpt.params"), str(n),
                                 str(steps), str(path)], env)
        with one_blas_thread():
            want = fn(**data)
        np.testing.assert_allclose(float(loss), want[0], rtol=1e-12)
        np.testing.assert_allclose(float(total), sum(np.sum(g) for g in want[1:]), rtol=1e-9)
