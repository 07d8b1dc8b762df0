"""Suite-wide fixtures: generated modules go to a per-session temporary cache."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _symgrad_cache_dir(tmp_path_factory):
    patcher = pytest.MonkeyPatch()
    patcher.setenv("SYMGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("symgrad-cache")))
    patcher.delenv("SYMGRAD_DUMP", raising=False)
    patcher.delenv("SYMGRAD_LOG", raising=False)
    yield
    patcher.undo()
