"""bfloat16 (from ml_dtypes): the dtype rules, every op sample through the interpreter and the
NumPy backend, artifacts, and CUDA kernels that store it as 16 raw bits (nvcc)."""
import os
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import symgrad as sg
from symgrad import dtypes
from symgrad.backends.cuda_backend import CudaUnavailableError
from symgrad.backends.cuda_backend import kernels as kernel_lowering
from symgrad.errors import DTypeError
from tests.ops.samples import ALL_SAMPLES

BF16 = np.dtype(ml_dtypes.bfloat16)
BFLOAT16 = dtypes.BFLOAT16


def test_dtype_rules():
    assert dtypes.as_dtype("bfloat16") == BFLOAT16 == BF16
    assert dtypes.is_float(BF16) and dtypes.kind(BF16) == "f"
    assert dtypes.significand_bits(BF16) == 8
    assert dtypes.promote(BF16, 2.0) == BF16 and dtypes.promote(BF16, 3) == BF16
    assert dtypes.promote(BF16, np.float32) == np.float32
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [3], "bfloat16")
        assert (x * 2.0).dtype == (x + x).dtype == sg.exp(x).dtype == BF16
        assert sg.mean(x).dtype == BF16 and (x < 1.0).dtype == np.bool_
        assert (x + sg.data("i", [3], "int32")).dtype == np.float64   # as NumPy's add
        with pytest.raises(DTypeError, match="erf: needs a floating input"):
            sg.erf(sg.data("b", [3], "bool"))


def test_every_sample_runs_in_bfloat16_on_the_numpy_backend_as_in_the_interpreter():
    failures = []
    for sample in ALL_SAMPLES:
        prog, fetches = sample.program("bfloat16", with_grad=sample.grad)
        feeds = sample.feeds("bfloat16")
        expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
        got = sg.compile(prog, fetches, backend="numpy", chunk_size=16)(**feeds)
        for want, have, value in zip(expected, got, fetches):
            try:
                assert want.dtype == have.dtype == value.dtype
                np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64),
                                           rtol=5e-2, atol=5e-2)
            except AssertionError as exc:
                failures.append(f"{sample.id}: {str(exc)[:200]}")
    assert not failures, "\n".join(failures)


STANDALONE = r"""
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("model", sys.argv[1])
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
out, = model.run(x=np.array([[0.5, 1.0, -2.0]], np.float32))
print(out.dtype, out.astype(np.float32).tolist())
"""


def test_feeds_and_artifacts(tmp_path):
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 3], "bfloat16")
        w = sg.parameter("w", [3], "bfloat16", init=np.array([1.0, 2.0, 0.5]))
        y = sg.sum(sg.tanh(x) * w * 2.0, axis=1)
    fn = sg.compile(prog, [y], backend="numpy")
    assert "import ml_dtypes" in fn.source
    feed = np.array([[0.5, 1.0, -2.0]], dtype=np.float32)   # float data converts
    out, = fn(feed)
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float32), (2 * np.tanh(feed) * [1, 2, 0.5]).sum(1),
                               rtol=2e-2)
    path = fn.save(tmp_path / "bf16")
    np.testing.assert_array_equal(sg.load(path)(feed)[0], out)
    module = os.path.join(path, sg.load(path).manifest["standalone"]["module"])
    done = subprocess.run([sys.executable, "-c", STANDALONE, module], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split(" ", 1) == ["bfloat16", f"{out.astype(np.float32).tolist()}\n"], \
        done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_kernels_store_bfloat16_and_compile(tmp_path, monkeypatch):
    names = ("exp-", "sum-axes-keepdims", "max-all-dynamic", "erf-dynamic", "random_normal",
             "leaky_relu-default", "where-scalar")
    compiled = []
    for sample in ALL_SAMPLES:
        if sample.id.startswith(names):
            prog, fetches = sample.program("bfloat16", with_grad=sample.grad)
            compiled.append(sg.compile(prog, fetches, backend="cuda"))
    texts = {text for c in compiled for text in c.kernels.values()
             if "add(%rng_step" not in text}   # the int64 step counter's advance
    assert all("sg_bf16" in text for text in texts)
    kernels = [text.replace("k0_", f"u{i}_").replace("k1_", f"v{i}_")
               for i, text in enumerate(sorted(texts))]
    path = tmp_path / "bf16.cu"
    path.write_text(kernel_lowering.render("prelude.cuh.j2") + "\n".join(kernels))
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", "-std=c++17", "-diag-suppress=177",
                           "-o", os.devnull, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(CudaUnavailableError, match="CuPy has no bfloat16 arrays"):
        compiled[0]._executable.run({})
