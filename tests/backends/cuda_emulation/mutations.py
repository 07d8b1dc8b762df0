"""Planted kernel bugs: each must be caught by the emulated suite, and none may hang it.

A :class:`Mutation` rewrites the generated ``.cu`` text (prelude or kernels) of the programs
of :func:`~.cases.layout_cases` the way a plausible slip in a template would. :func:`check`
runs every mutant under every schedule with 1 and 3 SMs and says how each run ended: a wrong
value, an unwritten output (NaN from the poisoned buffers), or a kernel fault (deadlock,
divergent barrier, bad shuffle mask, endless loop). Mutations that break memory safety are run
only under AddressSanitizer (in a child process, :mod:`.asan`): without it an out-of-bounds
write corrupts the test process's heap instead of failing a test.

    python -m tests.backends.cuda_emulation.mutations      # prints the table
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import tempfile
import time

import numpy as np

from .device import SCHEDULES, EmulatedDevice, KernelFault
from .library import DEFAULT_TIME_LIMIT, run_tool


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    bug: str                 # what the slip is
    pattern: str             # regular expression over the .cu text
    replacement: str
    memory: bool = False     # out-of-bounds: run under AddressSanitizer only

    def apply(self, source: str) -> str:
        return re.sub(self.pattern, self.replacement, source)


_INF = r"\(-__longlong_as_double\(0x7ff0000000000000LL\)\)"
MUTATIONS = [
    Mutation("warp-reduce-offset", "prelude's warp reduce starts at offset 8, not 16",
             r"for \(int offset = 16;", "for (int offset = 8;"),
    Mutation("warp-reduce-mask", "prelude's shuffles name half the warp in their mask",
             r"__shfl_down_sync\(0xffffffffu,", "__shfl_down_sync(0x0000ffffu,"),
    Mutation("split-chunk-floor", "split chunk K/P instead of ceil(K/P)",
             r"const I chunk = \(K \+ P - 1\) / P;", "const I chunk = K / P;"),
    Mutation("row-barrier-after-merge-dropped", "row: second __syncthreads dropped",
             r"(sg_warp_reduce\(acc, \w+\(\)\);\n      \}\n)      __syncthreads\(\);\n", r"\1"),
    Mutation("row-barrier-before-merge-dropped", "row: first __syncthreads dropped",
             r"(warp_acc\[threadIdx\.x / 32\] = acc;\n)      __syncthreads\(\);\n", r"\1"),
    Mutation("row-barrier-divergent", "row: second __syncthreads inside `if (threadIdx.x < 32)`",
             r"(acc = sg_warp_reduce\(acc, \w+\(\)\);\n)      \}\n      __syncthreads\(\);\n",
             r"\1        __syncthreads();\n      }\n"),
    Mutation("col-barrier-dropped", "col: __syncthreads before the tile merge dropped",
             r"(tile\[threadIdx\.y\]\[threadIdx\.x\] = acc;\n)  __syncthreads\(\);\n", r"\1"),
    Mutation("col-tile-rows", "col: merges 7 of the 8 tile rows",
             r"for \(int j = 1; j < 8; \+\+j\)", "for (int j = 1; j < 7; ++j)"),
    Mutation("row-warp-sums-overread", "row: block merge reads one warp sum too many",
             r"threadIdx\.x < blockDim\.x / 32 \?", "threadIdx.x <= blockDim.x / 32 ?"),
    Mutation("max-identity-zero", "max starts from 0 instead of -inf",
             _INF, "0.0"),
    Mutation("sum-identity-one", "sum starts from 1 instead of 0",
             r"\b(double|float) acc = 0\.0f?;", r"\1 acc = 1.0;"),
    Mutation("mean-divisor", "mean divides by K - 1",
             r"acc / \((double|float)\)K\b", r"acc / (\1)(K - 1)"),
    Mutation("merge-lane-stride", "merge: lanes step over partials by 64, not 32",
             r"for \(I p = lane; p < P; p \+= 32\)", "for (I p = lane; p < P; p += 64)"),
    Mutation("map-grid-stride", "map: grid-stride step one too large",
             r"s \+= \(I\)gridDim\.x \* blockDim\.x\)", "s += (I)gridDim.x * blockDim.x + 1)"),
    Mutation("row-lane-step", "row: a lane steps by its lane number (lane 0 never moves)",
             r"k < k_end; k \+= team\)", "k < k_end; k += lane)"),
    Mutation("map-bound-off-by-one", "map: s <= N", r"s < N; s \+=", "s <= N; s +=",
             memory=True),
    Mutation("col-output-guard-dropped", "col: finishes outputs past M",
             r"if \(threadIdx\.y == 0 && o < M\)", "if (threadIdx.y == 0)", memory=True),
    Mutation("partial-index-shifted", "row: partial results stored one slot late",
             r"else partial\[o \* P \+ p\] = acc;", "else partial[o * P + p + 1] = acc;",
             memory=True),
]
BY_NAME = {m.name: m for m in MUTATIONS}
TIME_LIMIT = 0.4    # CPU seconds a mutant's launch may run (a clean one takes < 0.1)


@contextlib.contextmanager
def planted(cases, mutation):
    """Inside the block each case's executable hands the mutated ``.cu`` to CuPy; yields the
    cases whose source the mutation changed."""
    saved = [case.compiled._executable.cuda_source for case in cases]
    changed = []
    for case, source in zip(cases, saved):
        mutated = mutation.apply(source)
        case.compiled._executable.cuda_source = mutated
        if mutated != source:
            changed.append(case)
    try:
        yield changed
    finally:
        for case, source in zip(cases, saved):
            case.compiled._executable.cuda_source = source


def mutant_sources(cases, mutations) -> list[str]:
    sources = []
    for mutation in mutations:
        with planted(cases, mutation) as changed:
            sources += [case.source for case in changed]
    return sources


def verdict(case, device) -> str | None:
    """How running ``case`` on ``device`` shows the bug (None: it does not)."""
    try:
        got = device.run(case.compiled, case.feeds)
    except KernelFault as exc:
        text = str(exc)
        for key in ("deadlock", "divergent barrier", "endless loop", "mask",
                    "invalid memory access"):
            if key in text:
                return f"kernel fault: {key}"
        return f"kernel fault: {text[:80]}"
    for g, e in zip(got, case.expected):
        if np.isnan(np.asarray(g, np.float64)).any() and not np.isnan(
                np.asarray(e, np.float64)).any():
            return "unwritten output (NaN)"
    try:
        case.check(got)
    except AssertionError:
        return "wrong values"
    return None


RUNS = [(schedule, sms) for schedule in SCHEDULES for sms in (1, 3)]


def check(cases, library, mutations, first_only=False) -> dict:
    """``{mutation name: [(schedule, sms, verdict or None), ...]}`` for the non-memory
    mutations, run in this process (``library`` holds their mutant sources) in the order of
    :data:`RUNS`; ``first_only``: stop each mutation at its first catching run."""
    library.set_time_limit(TIME_LIMIT)
    results = {}
    try:
        for mutation in mutations:
            outcomes = []
            with planted(cases, mutation) as changed:
                assert changed, f"{mutation.name} changes no program: the pattern is stale"
                for schedule, sms in RUNS:
                    device = EmulatedDevice(library, schedule, sms)
                    found = next(filter(None, (verdict(c, device) for c in changed)), None)
                    outcomes.append((schedule, sms, found))
                    if found and first_only:
                        break
            results[mutation.name] = outcomes
    finally:
        library.set_time_limit(DEFAULT_TIME_LIMIT)
    return results


ASAN_ERROR = re.compile(r"ERROR: AddressSanitizer: ([\w-]+)")
# the first stack frame: "#0 0x... in void ns::k0_sum_body<int>(int, ...) /x/program.cu:92",
# or, when ASan's symbolizer gave no line, "... (/x/kernels.so+0xff31)"
ASAN_FRAME = re.compile(r"#0 0x[0-9a-f]+ in .*?(\w+)(?:<[^>(]*>)?\(.*?\) "
                        r"(?:(\S+\.cu):(\d+)|\((\S+\.so)\+(0x[0-9a-f]+)\))")


def _line_of(library, offset) -> str | None:
    """The source line of ``offset`` in ``library``, from its debug information."""
    done = run_tool(["addr2line", "-e", library, offset])
    match = re.search(r":(\d+)", done.stdout)
    return match[1] if match else None


def asan_verdict(done) -> str | None:
    """The ASan finding of a finished :func:`.asan.run_child` (None: it ran clean)."""
    error = ASAN_ERROR.search(done.stderr)
    if error:
        frame = ASAN_FRAME.search(done.stderr, error.end())
        if frame is None:
            return f"ASan {error[1]}"
        function, _, line, library, offset = frame.groups()
        line = line or _line_of(library, offset)
        return f"ASan {error[1]} in {function} (line {line} of its .cu)"
    if done.returncode:
        return f"exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}"
    return None


def summary(outcomes) -> str:
    caught = [(s, n, v) for s, n, v in outcomes if v]
    if not caught:
        return "MISSED"
    kinds = sorted({v for _, _, v in caught})
    where = f"{len(caught)}/{len(outcomes)} runs"
    if len(caught) < len(outcomes):
        where += " (" + ", ".join(f"{s}@{n}" for s, n, v in caught) + ")"
    return f"{'; '.join(kinds)} [{where}]"


def main(argv=None) -> int:
    from . import asan
    from .cases import layout_cases
    from .library import Library

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="library cache folder")
    args = parser.parse_args(argv)
    cache = args.cache or tempfile.mkdtemp(prefix="symgrad-mutations-")
    cases = layout_cases()
    plain = [m for m in MUTATIONS if not m.memory]
    memory = [m for m in MUTATIONS if m.memory]
    start = time.perf_counter()
    library = Library(mutant_sources(cases, plain), cache_dir=cache)
    rows = {name: summary(o) for name, o in check(cases, library, plain).items()}
    Library(mutant_sources(cases, memory), cache_dir=cache, sanitize=True)
    for mutation in memory:
        done = asan.run_child(cache, ["forward"], [1, 3], extra=["--mutation", mutation.name])
        rows[mutation.name] = asan_verdict(done) or "MISSED"
    print("| bug | how it is caught |\n| --- | --- |")
    for mutation in MUTATIONS:
        print(f"| {mutation.bug} (`{mutation.name}`) | {rows[mutation.name]} |")
    print(f"\n{len(MUTATIONS)} mutations in {time.perf_counter() - start:.0f} s")
    return 0 if all(r != "MISSED" for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
