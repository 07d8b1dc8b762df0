"""NumPy's array data allocator while a C program runs (backends/c_backend/array_cache.py): the
library's caching handler allocates during the call only, hands a freed block back for the next
allocation of its size, and the caller's allocator is back after the call, also after an
error."""
from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends.c_backend import array_cache

pytestmark = pytest.mark.skipif(array_cache._set_handler() is None,
                                reason="this NumPy has no data allocator API")


def _handler_name(array) -> str:
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:   # NumPy 1.x
        from numpy.core.multiarray import get_handler_name
    return get_handler_name(array)


def _double(rows=64):
    """exp(x) * 2 of x [rows, 1024] float32 (None: a run-time dim)."""
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [rows, 1024], "float32")
        fetches = [sg.exp(x) * 2.0]
    return sg.compile(prog, fetches, backend="c")


def test_results_come_from_the_cache_and_the_callers_allocator_is_back_after():
    compiled = _double()
    x = np.linspace(-1, 1, 64 * 1024, dtype="float32").reshape(64, 1024)
    first = compiled(x=x)[0]
    np.testing.assert_allclose(first, np.exp(x) * 2, rtol=1e-6)
    assert _handler_name(first) == "symgrad_array_cache"
    assert _handler_name(np.empty(1 << 20)) == "default_allocator"
    address = first.ctypes.data
    del first   # 256 KiB: kept by the cache, handed back for the next result of its size
    second = compiled(x=x)[0]
    assert second.ctypes.data == address
    np.testing.assert_allclose(second, np.exp(x) * 2, rtol=1e-6)


def test_a_call_that_raises_gives_the_allocator_back():
    compiled = _double()
    with pytest.raises(Exception):
        compiled(x=np.ones((2, 3), "float32"))
    assert _handler_name(np.empty(1 << 20)) == "default_allocator"


def test_a_program_of_small_values_keeps_numpys_allocator():
    """No value reaches 64 KiB with its run-time dims counted as 1: the calls do not swap
    allocators (their cost would be all there is to gain)."""
    compiled = _double(rows=None)
    result = compiled(x=np.ones((64, 1024), "float32"))[0]
    assert _handler_name(result) == "default_allocator"


def _vm_flags(address) -> list | None:
    """The VmFlags of the mapping of this process holding ``address`` (/proc/self/smaps)."""
    mapping = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(part, 16) for part in head.split("-"))
                mapping = lo <= address < hi
            elif mapping and line.startswith("VmFlags:"):
                return line.split()[1:]
    return None


def _transparent_huge_pages() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as setting:
            return setting.read()
    except OSError:
        return ""


@pytest.mark.skipif("[never]" in _transparent_huge_pages() or not _transparent_huge_pages(),
                    reason="no transparent huge pages (Linux only)")
def test_a_large_block_asks_for_huge_pages_as_numpys_allocator_does():
    """A block of 4 MiB or more gets madvise(MADV_HUGEPAGE), as NumPy's own allocator gives
    its arrays, so that its first writes fault once per 2 MiB: an array of 40 MB, which
    malloc maps afresh at every call, is in a mapping flagged for huge pages (``hg``)."""
    compiled = _double(10 * 1024)
    x = np.zeros((10 * 1024, 1024), "float32")
    result = compiled(x=x)[0]
    assert _handler_name(result) == "symgrad_array_cache"
    flags = _vm_flags(result.ctypes.data + (1 << 20))
    assert flags is not None and "hg" in flags, flags
