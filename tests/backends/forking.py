"""Run a compiled program in forked children (``os.fork`` in a child Python process), for the
fork-safety tests of the backends' thread pools: a child that hangs is killed and reported,
never left to hang the suite."""
import subprocess
import sys

SCRIPT = r"""
import os, sys, threading, time
import numpy as np
import symgrad as sg

backend, idle_forks, busy_forks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prog = sg.Program()
with sg.program_guard(prog):
    x = sg.data("x", [None, 64], "float64")
    y = sg.sum(sg.tanh(x * 1.5) + sg.sin(x), axis=1)
options = {"threads": 2}
if backend == "numpy":
    options["chunk_size"] = 4096
fn = sg.compile(prog, [y], backend=backend, **options)
xs = np.random.default_rng(0).standard_normal((4200, 64))   # just over C's parallel minimum
expected = fn(x=xs)[0]
stop = threading.Event()


def spin():   # another thread, in and out of the pool's loops while the main thread forks
    while not stop.is_set():
        fn(x=xs)


def fork_and_run(what):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if np.array_equal(fn(x=xs)[0], expected) else 3)
    deadline = time.monotonic() + 10   # a sound child takes milliseconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            sys.exit(f"a child forked {what} hung")
        time.sleep(0.001)
    if status != 0:
        sys.exit(f"a child forked {what} computed something else (status {status})")


for _ in range(idle_forks):
    fork_and_run("after the program ran")
threading.Thread(target=spin, daemon=True).start()
for _ in range(busy_forks):
    fork_and_run("while another thread ran the program")
stop.set()
print("ok")
"""


def run_forked(backend: str, idle_forks: int, busy_forks: int) -> None:
    """Compile a threaded program on ``backend`` and run it; fork ``idle_forks`` times, then
    ``busy_forks`` times while another thread runs it over and over; run it in each child.
    Fails when a child hangs (it is killed) or computes something else."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, backend, str(idle_forks),
                           str(busy_forks)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
