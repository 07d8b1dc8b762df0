"""Planted kernel bugs are caught by the emulated suite, and none hangs it.

Each mutation of :mod:`tests.backends.cuda_emulation.mutations` rewrites the generated ``.cu``
of the launch-path programs (a wrong shuffle offset or mask in the prelude, a split chunk of
K/P, dropped or divergent barriers, wrong identities, skipped elements, an endless loop...)
and must fail at least one run: a wrong value, an unwritten (NaN) output, or a kernel fault.
Some bugs show only under some schedules or SM counts, which is why the suite runs them all.
The out-of-bounds mutations run under AddressSanitizer in test_cuda_asan.py.
"""
import pytest

from tests.backends.cuda_emulation import library as emulation, mutations
from tests.backends.cuda_emulation.cases import layout_cases

pytestmark = pytest.mark.skipif(emulation.compiler() is None, reason="g++ is not installed")
PLAIN = [m for m in mutations.MUTATIONS if not m.memory]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    cases = layout_cases()
    library = emulation.Library(mutations.mutant_sources(cases, PLAIN),
                                cache_dir=emulation.session_cache_dir(tmp_path_factory))
    return mutations.check(cases, library, PLAIN, first_only=True)


def test_at_least_ten_kinds_of_bugs_are_planted():
    assert len(mutations.MUTATIONS) >= 10
    assert len({m.pattern for m in mutations.MUTATIONS}) == len(mutations.MUTATIONS)


@pytest.mark.parametrize("mutation", PLAIN, ids=[m.name for m in PLAIN])
def test_planted_bug_is_caught(outcomes, mutation):
    runs = outcomes[mutation.name]
    assert any(found for _, _, found in runs), f"{mutation.bug}: {mutations.summary(runs)}"


def test_schedules_and_sm_counts_matter(outcomes):
    """Bugs the forward schedule with one SM misses, which other runs catch (the runs stop at
    the first that catches the bug, in the order forward@1, forward@3, reversed@1...)."""
    def caught(name, schedule, sms):
        return next(found for s, n, found in outcomes[name] if (s, n) == (schedule, sms))
    assert not caught("row-barrier-after-merge-dropped", "forward", 1)
    assert caught("row-barrier-after-merge-dropped", "greedy-warps", 1)
    assert not caught("merge-lane-stride", "forward", 1)
    assert caught("merge-lane-stride", "forward", 3)
    assert caught("row-lane-step", "forward", 1) == "kernel fault: endless loop"
