"""Checks of device data that the CUDA host module defers to the end of ``run``.

The NumPy helpers check an op's integer inputs where the op runs: ``check_class_indices``
raises a ``ValueError`` naming a label outside the classes. On a GPU each such check reads a
device value on the host, so the host waits there for every kernel queued before it, and then
queues the rest of the call while the device idles. On an H100 the W1 MLP's two label checks
(four reads) took 0.5 ms of a 1.9 ms call.

So the CUDA host module defines its own ``check_class_indices`` in the NumPy helper's place.
It queues the test on the device. ``run`` reads the flags of all the call's tests at once,
after its last kernel is queued, and raises the NumPy helper's error for the first that failed.
It does so also when an op after the check raised (CuPy wraps an index outside an axis where
NumPy raises), since that check is the call's first error. The call's results are dropped
then. The parameters are untouched: the CUDA backend returns new state arrays, which the
caller applies only when ``run`` returns. The code is in ``codegen_templates/cuda/host.py.j2``;
the emitted module reads::

    def run(_dims=None, _buffers=None, /, **feeds):
        # (its docstring)
        _CHECKS.pending = []
        try:
            results = _run(_dims, _buffers, **feeds)
        finally:   # a failed check is the call's first error, also when a later op raised
            _raise_failed_checks(_CHECKS.pending)
        return results
"""
from __future__ import annotations

import inspect
import textwrap

from ...ops import kernels
from ...ops.core import HelperSource

# the NumPy helper, run on the host once a deferred check has failed (its message)
NOW = "_check_class_indices_now"


def helpers(used: dict) -> dict:
    """The host module's ``used`` helpers with the NumPy ``check_class_indices`` renamed
    :data:`NOW` (the template defines the deferred one, and wraps ``run``, when ``NOW`` is
    among them)."""
    if "check_class_indices" not in used:
        return used
    helpers = {name: helper for name, helper in used.items() if name != "check_class_indices"}
    now = textwrap.dedent(inspect.getsource(kernels.check_class_indices)).replace(
        "def check_class_indices(", f"def {NOW}(", 1)
    return {**helpers, NOW: HelperSource(NOW, now)}
