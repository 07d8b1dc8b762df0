"""The C library's run-time lookup of NumPy's GEMM (``c/native.h.j2``,
:mod:`symgrad.backends.c_backend.blas`)."""
import subprocess
import sys
import textwrap

import pytest

from symgrad.backends.c_backend import blas

pytestmark = pytest.mark.skipif(not blas.available(), reason="no BLAS for native ops")

# Fresh copies of a C artifact, each of whose first native op looks the GEMM up, loaded and
# run while another thread loads and unloads other libraries.
LOAD_WHILE_LOOKING_UP = textwrap.dedent('''
    import _ctypes, ctypes, os, shutil, sys, tempfile, threading
    import numpy as np
    import symgrad as sg

    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 8], "float64")
        w = sg.data("w", [8, 4], "float64")
        y = sg.tanh(sg.matmul(x, w))
    root = tempfile.mkdtemp()
    saved = sg.compile(prog, [y], backend="c").save(os.path.join(root, "saved"))
    library = os.path.join(saved, "c", "program.so")
    done = threading.Event()

    def load_and_unload():
        k = 0
        while not done.is_set():
            path = os.path.join(root, f"other{k % 20}.so")
            if not os.path.exists(path):
                shutil.copy(library, path)
            _ctypes.dlclose(ctypes.CDLL(path)._handle)
            k += 1

    threading.Thread(target=load_and_unload, daemon=True).start()
    for k in range(int(sys.argv[1])):
        copy = shutil.copytree(saved, os.path.join(root, f"copy{k}"))
        got, = sg.load(copy)(x=np.ones((16, 8)), w=np.ones((8, 4)))
        assert np.allclose(got, np.tanh(8.0))
    done.set()
    print("finished")
''')


@pytest.mark.slow
def test_looking_up_the_gemm_while_another_thread_loads_a_library_does_not_deadlock(tmp_path):
    """The lookup lists the loaded objects with dl_iterate_phdr and opens them after it
    returns: a dlopen inside its callback took the loader's locks in the order opposite to a
    dlopen on another thread, and the process hung at once (a map_reduce of a C artifact on
    Dask's threads did)."""
    script = tmp_path / "race.py"
    script.write_text(LOAD_WHILE_LOOKING_UP)
    try:
        done = subprocess.run([sys.executable, str(script), "150"], capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("loading libraries while the GEMM is looked up deadlocked")
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-3000:]
