"""The emulated CUDA programs under AddressSanitizer (marker ``asan``; part of the default run).

Every op sample (once, in float32 with gradients) and every launch-path program of
test_cuda_emulated.py runs again, with 1 and 3 SMs, in a child Python with libasan preloaded: an out-of-bounds access by a kernel fails the
test with ASan's report, which names the kernel and the line of its ``.cu``. The planted
memory bugs of :mod:`tests.backends.cuda_emulation.mutations` show that it does.
"""
import pytest

from tests.backends.cuda_emulation import asan, library as emulation, mutations
from tests.backends.cuda_emulation.cases import layout_cases, memory_cases

pytestmark = [pytest.mark.asan,
              pytest.mark.skipif(asan.runtime() is None, reason="no g++ with libasan")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return emulation.session_cache_dir(tmp_path_factory)


def _report(done) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.slow
def test_every_program_is_memory_safe(cache_dir):
    cases = memory_cases()
    emulation.Library([c.source for c in cases], cache_dir=cache_dir, sanitize=True)
    done = asan.run_child(cache_dir, ["forward"], [1, 3])
    assert done.returncode == 0, _report(done)
    assert f"{len(cases)} programs, 0 failures" in done.stdout


MEMORY_BUGS = [m for m in mutations.MUTATIONS if m.memory]


@pytest.mark.parametrize("mutation", MEMORY_BUGS, ids=[m.name for m in MEMORY_BUGS])
def test_planted_out_of_bounds_access_is_reported_with_kernel_and_line(cache_dir, mutation):
    cases = layout_cases()
    sources = mutations.mutant_sources(cases, [mutation])
    assert sources, f"{mutation.name} changes no program"
    emulation.Library(sources, cache_dir=cache_dir, sanitize=True)
    done = asan.run_child(cache_dir, ["forward"], [1, 3], extra=["--mutation", mutation.name])
    found = mutations.asan_verdict(done)
    assert found and found.startswith("ASan heap-buffer-overflow in k"), _report(done)
    assert "of its .cu)" in found
