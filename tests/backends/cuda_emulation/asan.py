"""The emulated CUDA suite under AddressSanitizer, in a child Python with libasan preloaded.

An out-of-bounds access by a kernel stops the child with ASan's report, which names the
kernel and the line of its ``.cu`` file (and the allocation it overran: the host module's
arrays come from ``malloc``, so ASan guards their ends). The parent builds the sanitized
library first (cached), so the child only loads it.

    python -m tests.backends.cuda_emulation.asan [--schedule NAME ...] [--sms N ...]
                                                 [--mutation NAME]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

from .cases import layout_cases, memory_cases
from .device import EmulatedDevice
from .library import Library, compiler, run_tool
from .mutations import BY_NAME, planted

ROOT = Path(__file__).resolve().parents[3]
ASAN_OPTIONS = "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=66"


def runtime() -> str | None:
    """The path of g++'s libasan (None when there is none)."""
    cxx = compiler()
    if cxx is None:
        return None
    path = run_tool([cxx, "-print-file-name=libasan.so"]).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def run_child(cache_dir, schedules, sms_counts, timeout=600, extra=()):
    """Run :func:`main` in a child with the sanitizer runtime: ``CompletedProcess``."""
    env = dict(os.environ, LD_PRELOAD=runtime(), ASAN_OPTIONS=ASAN_OPTIONS,
               SYMGRAD_EMULATION_CACHE=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "tests.backends.cuda_emulation.asan",
               "--schedule", *schedules, "--sms", *map(str, sms_counts), *extra]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", nargs="+", default=["forward"])
    parser.add_argument("--sms", nargs="+", type=int, default=[1, 3])
    parser.add_argument("--mutation", choices=sorted(BY_NAME),
                        help="run the launch-path programs with this planted bug")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.mutation:
            cases = stack.enter_context(planted(layout_cases(), BY_NAME[args.mutation]))
        else:
            cases = memory_cases()
        return _run_cases(cases, args.schedule, args.sms)


def _run_cases(cases, schedules, sms_counts) -> int:
    library = Library([c.source for c in cases], sanitize=True)
    failures = 0
    for schedule in schedules:
        for sms in sms_counts:
            device = EmulatedDevice(library, schedule, sms)
            for case in cases:
                print(f"running {case.name} ({schedule}, {sms} SMs)", flush=True)
                try:
                    case.check(device.run(case.compiled, case.feeds))
                except AssertionError as exc:
                    failures += 1
                    print(f"FAILED {case.name} ({schedule}, {sms} SMs): {exc}", flush=True)
    print(f"{len(cases)} programs, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
