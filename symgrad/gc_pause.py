"""``gc_paused``: pause Python's cyclic garbage collector around whole-program work.

Building, differentiating, optimizing or loading a program allocates O(n) small objects
(ops, Values) that all stay alive; left on, the collector runs full collections over them
again and again, which makes 100,000-op programs several times slower (superlinear).
"""
from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def gc_paused():
    """Disable the cyclic collector inside the ``with`` block (re-entrant: an enclosing
    pause stays in force)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
