"""Suite-wide fixtures: generated modules go to a per-session temporary cache, and every fused
group whose code (NumPy function or CUDA kernel) is shared by structure is rendered anyway and
checked against it."""
import pytest

from symgrad.backends.cuda_backend import host as cuda_host
from symgrad.backends.host import chunks as group


@pytest.fixture(autouse=True, scope="session")
def _symgrad_cache_dir(tmp_path_factory):
    patcher = pytest.MonkeyPatch()
    patcher.setenv("SYMGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("symgrad-cache")))
    patcher.delenv("SYMGRAD_DUMP", raising=False)
    patcher.delenv("SYMGRAD_LOG", raising=False)
    patcher.setattr(group, "CHECK_STRUCTURES", True)
    patcher.setattr(cuda_host, "CHECK_STRUCTURES", True)
    yield
    patcher.undo()
