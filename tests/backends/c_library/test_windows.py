"""Convolution and pooling in an exported library: a small CNN's Adam step (conv3x3, relu,
max pooling, a second conv, avg pooling, linear, softmax cross-entropy) over several batch
sizes, float64 bit for bit and float32 to 1e-6 against the C backend; conv and pooling
gradients with strides, padding, dilation and groups, bit for bit; and the CNN step clean
under AddressSanitizer."""
import json
import os

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward, nn
from symgrad.ops.core import bind

from .conftest import one_blas_thread
from .library_ctypes import Library
from .test_control_flow import run_clean, sanitized

pytestmark = pytest.mark.slow   # builds libraries with the C compiler: seconds


def cnn_step(dtype, seed=0):
    """conv3x3 -> relu -> maxpool2 -> conv3x3 -> avgpool2 -> linear -> softmax cross-entropy,
    with an Adam step: ``(program, [loss])``."""
    rng = np.random.default_rng(seed)

    def init(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(dtype)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", ["batch", 2, 8, 8], dtype)
        labels = sg.data("labels", ["batch"], "int64")
        w1 = sg.parameter("w1", [4, 2, 3, 3], dtype, init=init(4, 2, 3, 3))
        w2 = sg.parameter("w2", [6, 4, 3, 3], dtype, init=init(6, 4, 3, 3))
        dense = sg.parameter("dense", [24, 3], dtype, init=init(24, 3))
        bias = sg.parameter("bias", [3], dtype, init=init(3))
        h = nn.max_pool2d(nn.relu(nn.conv2d(x, w1, padding=1)), 2, 2, 0)
        h = nn.avg_pool2d(nn.conv2d(h, w2, padding=1), 2, 2, 0)
        logits = nn.linear(sg.reshape(h, [-1, 24]), dense, bias)
        loss = sg.mean(nn.softmax_cross_entropy(logits, labels))
        sg.optimizer.Adam(learning_rate=1e-2).minimize(loss)
    return prog, [loss]


def variants():
    """Convolutions (stride, padding, dilation, groups, a 1x1 kernel) and poolings (stride,
    padding, overlapping windows, max_pool2d_select) with their gradients, float64."""
    rng = np.random.default_rng(3)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4, 9, 7], "float64")
        h = sg.data("h", [None, 4, 9, 7], "float64")
        w = sg.parameter("w", [6, 2, 3, 2], "float64", init=rng.standard_normal((6, 2, 3, 2)))
        one = sg.parameter("one", [4, 4, 1, 1], "float64",
                           init=rng.standard_normal((4, 4, 1, 1)))
        convs = [nn.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2),
                 nn.conv2d(x, one), nn.conv2d(x, w, stride=3, groups=2)]
        pools = [nn.max_pool2d(x, 3, 2, 1), nn.max_pool2d(x, (2, 3), (1, 2), (1, 1)),
                 nn.max_pool2d(x, 2, 2, 0), nn.avg_pool2d(x, 3, 2, 1),
                 nn.avg_pool2d(x, (3, 2), (2, 2), (0, 1))]
        selected = bind("max_pool2d_select", [x, h],
                        {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)})
        outputs = convs + pools + [selected]
        loss = sum(sg.sum(o * sg.sin(o)) for o in outputs)
        grads = ir_backward.grad(loss, [x, w, one])
    return prog, [loss] + list(grads) + outputs


def export(tmp_path_factory, program, name):
    """The library (NumPy's OpenBLAS, this CPU's flags: the C backend's GEMM and code) and the
    program on backend c."""
    fn = sg.compile(*program, backend="c")
    folder = fn.export_c(str(tmp_path_factory.mktemp(name) / name), name=name, blas="numpy",
                         native=True)
    with open(os.path.join(folder, "manifest.json")) as handle:
        library = Library(folder, json.load(handle))
    assert library.load(os.path.join(folder, f"{name}.params")) == 0, library.error()
    return fn, folder, library


def _cnn_library(tmp_path_factory, dtype):
    fn, folder, library = export(tmp_path_factory, cnn_step(dtype), f"cnn{dtype[-2:]}")
    return dtype, fn, folder, library


@pytest.fixture(scope="module")
def cnn64(tmp_path_factory, cblas):
    programs = _cnn_library(tmp_path_factory, "float64")
    yield programs
    programs[3].close()


@pytest.fixture(scope="module")
def cnn32(tmp_path_factory, cblas):
    programs = _cnn_library(tmp_path_factory, "float32")
    yield programs
    programs[3].close()


@pytest.fixture(params=["cnn64", "cnn32"])
def cnn(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def windows(tmp_path_factory, cblas):
    fn, folder, library = export(tmp_path_factory, variants(), "windows")
    yield fn, sg.compile(*variants(), backend="interpreter"), library
    library.close()


def cnn_batch(n, dtype, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 2, 8, 8)).astype(dtype),
            "labels": rng.integers(0, 3, n)}


def test_the_cnn_adam_step_equals_the_c_backend(cnn):
    """Losses and every state array after each step: float64 bit for bit (the same im2col,
    GEMMs, chunks and loops), float32 to 1e-6."""
    dtype, fn, _, library = cnn
    for step, n in enumerate((5, 1, 3, 8)):
        feeds = cnn_batch(n, dtype, step)
        with one_blas_thread():
            want = fn(**feeds)
            code, got = library.run(feeds, [np.shape(a) for a in want])
        assert code == 0, library.error()
        for name in library.entry["state"]:
            ref = np.asarray(fn.state[name])
            mine = library.parameter(name, ref.dtype, ref.shape)
            if dtype == "float64":
                np.testing.assert_array_equal(mine, ref, err_msg=f"{name}, step {step}")
            else:
                np.testing.assert_allclose(mine, ref, rtol=1e-6, atol=1e-7,
                                           err_msg=f"{name}, step {step}")
        if dtype == "float64":
            np.testing.assert_array_equal(got[0], want[0])
        else:
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_conv_and_pool_gradients_with_strides_padding_dilation_groups(windows):
    fn, oracle, library = windows
    rng = np.random.default_rng(5)
    for n in (3, 1, 270):   # 270: a convolution's samples in several chunks
        x = rng.standard_normal((n, 4, 9, 7))
        x[0, 1, 2:4, 2:4] = 1.0   # ties in a max window
        feeds = {"x": x, "h": rng.standard_normal((n, 4, 9, 7))}
        with one_blas_thread():
            want = [np.asarray(a) for a in fn(**feeds)]
            code, got = library.run(feeds, [a.shape for a in want])
        assert code == 0, library.error()
        for k, (a, b, c) in enumerate(zip(want, got, oracle(**feeds))):
            np.testing.assert_array_equal(b, a, err_msg=f"output {k}, batch {n}")
            np.testing.assert_allclose(b, c, rtol=1e-10, atol=1e-10, err_msg=f"output {k}")


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cnn64.h"

/* argv: the parameter file, n, a file of x (n x 2 x 8 x 8 float64) then labels (n int64);
   runs two Adam steps and prints their losses. */
int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const int64_t n = atoll(argv[2]);
    double *x = malloc((size_t)(n * 128) * sizeof(double) + 1);
    int64_t *labels = malloc((size_t)n * sizeof(int64_t) + 1);
    FILE *file = fopen(argv[3], "rb");
    if (x == NULL || labels == NULL || file == NULL ||
        fread(x, sizeof(double), (size_t)(n * 128), file) != (size_t)(n * 128) ||
        fread(labels, sizeof(int64_t), (size_t)n, file) != (size_t)n)
        return 2;
    fclose(file);
    cnn64_state *state = cnn64_state_new();
    if (state == NULL || cnn64_state_load(state, argv[1]) != 0)
        return 3;
    int code = 0;
    for (int step = 0; step < 2 && code == 0; step++) {
        double loss;
        code = cnn64_run(state, x, n, labels, n, &loss);
        if (code != 0)
            fprintf(stderr, "%s\n", cnn64_last_error());
        else
            printf("%.17g\n", loss);
    }
    cnn64_state_free(state);
    free(x);
    free(labels);
    return code;
}
"""


def test_the_cnn_step_under_address_sanitizer(cnn64, tmp_path):
    """Two Adam steps from the exported parameters, under ASan and UBSan, give the losses of
    the same steps run from Python (built at -O1 here: to rounding)."""
    _, _, folder, _ = cnn64
    binary, env = sanitized(folder, "cnn64", DRIVER, tmp_path)
    feeds = cnn_batch(6, "float64", 9)
    path = tmp_path / "input.bin"
    with open(path, "wb") as handle:
        handle.write(feeds["x"].tobytes() + feeds["labels"].astype(np.int64).tobytes())
    losses = run_clean([binary, os.path.join(folder, "cnn64.params"), "6", str(path)], env)
    fresh = sg.compile(*cnn_step("float64"), backend="c")   # from the initial parameters
    with one_blas_thread():
        want = [float(fresh(**feeds)[0]) for _ in range(2)]
    np.testing.assert_allclose([float(v) for v in losses], want, rtol=1e-12)
