"""Random numbers: ``symgrad.random.uniform`` and ``symgrad.random.normal``.

A counter-based generator (Philox-4x32-10, as in cuRAND and JAX): each number is a pure
function of the ``seed``, the op's stream (its number among the program's random ops), the
program's step counter and the element's index, so every backend gives bit-identical numbers
for the same seed and step (:mod:`symgrad.ops.random` describes the layout).

The step counter is the program's int64 parameter ``rng_step``, program state like any
assigned parameter: it starts at 0 and the program advances it by one with every call (an
``assign``), so each call draws new numbers; feeding ``rng_step=k`` replays call ``k``, and the
calls after it continue from ``k + 1``.

Inside a loop body (``scan``, ``while_loop``, ``fori_loop``) pass ``counter=`` an int scalar
Value that changes every iteration (``fori_loop``'s ``i``, or an int carried by the loop): it
is mixed into the generator's counter; without it the op refuses to build there.
"""
from __future__ import annotations

from .ops.core import atomic_functions
from .ops.random import RNG_STEP, draw, random_normal_p, random_uniform_p

__all__ = ["uniform", "normal", "RNG_STEP"]


def uniform(shape, low=0.0, high=1.0, dtype="float32", seed=0, counter=None):
    """Uniform numbers in ``[low, high)`` of a floating ``dtype``. ``shape`` is a sequence of
    ints, or a Value whose run-time shape the result takes (``uniform(x)``: one number per
    element of ``x``). ``seed``: an int in ``[0, 2**64)``; ``counter``: an int scalar Value
    (required inside a loop body, see the module docstring). No gradient flows through."""
    return draw(random_uniform_p, shape, dtype, seed, counter, {"low": low, "high": high})


def normal(shape, mean=0.0, std=1.0, dtype="float32", seed=0, counter=None):
    """Normal numbers of ``mean`` and ``std`` (Box-Muller) of a floating ``dtype``;
    ``shape``, ``seed`` and ``counter`` as for :func:`uniform`. No gradient flows through."""
    return draw(random_normal_p, shape, dtype, seed, counter, {"mean": mean, "std": std})


# A call that raises leaves its program as it was (see symgrad.ops.core.atomic).
atomic_functions(globals(), __all__)
