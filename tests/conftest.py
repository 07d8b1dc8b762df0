"""Suite-wide fixtures: generated modules go to a per-session temporary cache, which the
session's pytest-xdist workers share (the cache is safe across processes: one compiles a
library while the others wait for it, so a module's C programs are compiled once, not once per
worker), and every fused group whose code (NumPy function or CUDA kernel) is shared by
structure is rendered anyway and checked against it. The tests marked ``slow`` run first, so
that a run ends on short tests that pytest-xdist's workers share out, not on one long test
that keeps one worker busy while the others have nothing left."""
import pytest

from symgrad.backends.cuda_backend import host as cuda_host
from symgrad.backends.host import chunks as group
from tests.session_folder import session_folder


@pytest.fixture(autouse=True, scope="session")
def _symgrad_cache_dir(tmp_path_factory):
    patcher = pytest.MonkeyPatch()
    patcher.setenv("SYMGRAD_CACHE_DIR", str(session_folder(tmp_path_factory) / "symgrad-cache"))
    patcher.delenv("SYMGRAD_DUMP", raising=False)
    patcher.delenv("SYMGRAD_LOG", raising=False)
    patcher.setattr(group, "CHECK_STRUCTURES", True)
    patcher.setattr(cuda_host, "CHECK_STRUCTURES", True)
    yield
    patcher.undo()


def pytest_collection_modifyitems(items):
    """The ``slow`` tests first, each group in its collected order (the longest jobs first:
    the order that leaves the least idle time at the end of a run on several workers)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
