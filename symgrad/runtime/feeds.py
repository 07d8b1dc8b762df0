"""Program signatures and feed checking.

A compiled program's signature lists its ``data`` inputs (in creation order: the positional
feed order) and its parameters. Feeds are checked against it at call time: a missing or
unknown input, a wrong rank, a wrong size of a known dim or a wrong dtype kind is a clear
error naming the input.

The check itself (:func:`check_feed`, :func:`bind_feeds`) and the specs (:class:`InputSpec`,
:class:`OutputSpec`) live in :mod:`.standalone`, which needs NumPy only: the runner copied
into every artifact checks feeds with that same code, so a bad feed raises the same error,
with the same message, through a compiled program, ``sg.load`` and the standalone runner.
"""
from __future__ import annotations

from .standalone import InputSpec, OutputSpec, bind_feeds, check_feed

__all__ = ["InputSpec", "OutputSpec", "bind_feeds", "build_signature", "check_feed"]


def build_signature(program, needed_values):
    """InputSpecs for the program's data inputs then parameters. ``needed_values`` is the set
    of source Values the fetches depend on."""
    specs = [InputSpec(v.name, v.shape, v.dtype, "data", v in needed_values)
             for v in program.inputs]
    specs += [InputSpec(v.name, v.shape, v.dtype, "parameter", False)
              for v in program.parameters]
    return specs
