"""Ahead-of-time: compile a gradient program, save it, run it where only NumPy is installed.

``fn.save(dir)`` writes an artifact directory: ``manifest.json`` (signature, versions, sha256
and size of every file), ``program.json`` (the IR), ``numpy/program.py`` (the generated
module), ``numpy/standalone.py`` (a loader that verifies the files and checks feeds) and the
parameter values under ``constants/``. The manifest's ``"standalone"`` entry names the module
file and its entry function. ``sg.load`` runs the module it regenerates from ``program.json``;
running the artifact's own files standalone trusts the artifact, like unpickling (see
docs/aot-cli.md for signed artifacts).

This example saves a small regression model's loss-and-gradient function, then runs the
artifact from a fresh Python subprocess in which importing symgrad is made impossible, and
checks that the subprocess, ``sg.load`` and the in-process compiled function all agree.

Run: python examples/aot_standalone.py
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import symgrad as sg
from symgrad import ir_backward, nn

# The subprocess: blocks `import symgrad`, then follows the manifest's "standalone" entry.
RUNNER = r"""
import importlib.abc, json, os, runpy, sys

class NoSymgrad(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "symgrad" or name.startswith("symgrad."):
            raise ImportError("symgrad is deliberately unavailable in this process")
        return None

sys.meta_path.insert(0, NoSymgrad())
import numpy as np

artifact, feeds_file, out_file = sys.argv[1:4]
with open(os.path.join(artifact, "manifest.json")) as f:
    entry = json.load(f)["standalone"]
# runpy compiles the file's own (verified) source: no cached bytecode is read or written
model = runpy.run_path(os.path.join(artifact, *entry["module"].split("/")))
feeds = dict(np.load(feeds_file))
outputs = model[entry["function"]](**feeds)
np.savez(out_file, *outputs)
print("standalone run:", len(outputs), "outputs;",
      "symgrad imported:", any(m.split(".")[0] == "symgrad" for m in sys.modules))
"""


def build():
    """A two-layer regression model: (program, [loss, d loss / d every parameter])."""
    rng = np.random.default_rng(0)
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", shape=[None, 8], dtype="float32")
        target = sg.data("target", shape=[None, 1], dtype="float32")
        w1 = sg.parameter("w1", [8, 16], "float32", init=rng.normal(0, 0.3, (8, 16)).astype("float32"))
        b1 = sg.parameter("b1", [16], "float32", init=np.zeros(16, "float32"))
        w2 = sg.parameter("w2", [16, 1], "float32", init=rng.normal(0, 0.3, (16, 1)).astype("float32"))
        prediction = nn.linear(nn.gelu(nn.linear(x, w1, b1)), w2)
        loss = sg.mean(sg.square(prediction - target))
        grads = ir_backward.grad(loss, [w1, b1, w2])
    return prog, [loss] + grads


def main():
    prog, fetches = build()
    fn = sg.compile(prog, fetch_list=fetches, backend="numpy")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(32, 8)).astype("float32"),
             "target": rng.normal(size=(32, 1)).astype("float32")}
    expected = fn(**feeds)

    with tempfile.TemporaryDirectory() as tmp:
        path = fn.save(os.path.join(tmp, "regression_grad"))
        with open(os.path.join(path, "manifest.json")) as f:
            manifest = json.load(f)
        print("artifact files (with their sha256 in the manifest):", sorted(manifest["files"]))
        print("standalone entry:", manifest["standalone"])
        print("inputs:", [(i["name"], i["shape"], i["dtype"]) for i in manifest["inputs"]])

        # 1. sg.load: the same callable, rebuilt from the artifact (hashes checked).
        loaded = sg.load(path)
        for got, want in zip(loaded(**feeds), expected):
            np.testing.assert_array_equal(got, want)

        # 2. A subprocess that can import NumPy but not symgrad.
        feeds_file = os.path.join(tmp, "feeds.npz")
        out_file = os.path.join(tmp, "outputs.npz")
        np.savez(feeds_file, **feeds)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        result = subprocess.run([sys.executable, "-c", RUNNER, path, feeds_file, out_file],
                                capture_output=True, text=True, env=env, cwd=tmp)
        assert result.returncode == 0, result.stderr
        print(result.stdout.strip())
        with np.load(out_file) as data:
            standalone = [data[f"arr_{i}"] for i in range(len(data.files))]
    assert "symgrad imported: False" in result.stdout
    assert len(standalone) == len(expected)
    for got, want in zip(standalone, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    print(f"loss = {float(expected[0]):.6f}; the standalone artifact, sg.load and the "
          f"compiled function agree on all {len(expected)} outputs: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
