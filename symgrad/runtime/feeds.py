"""Program signatures and feed checking.

A compiled program's signature lists its ``data`` inputs (in creation order: the positional
feed order) and its parameters. Feeds are checked against it at call time: a missing or
unknown input, a wrong rank, a wrong size of a known dim or a wrong dtype kind is a clear
error naming the input. An input that only the program's updates need (not its fetches) is
required all the same, since every call applies the updates; a missing one is an error that
says so and names the way to compile without them (``updates=False``).

The check itself (:func:`check_feed`, :func:`bind_feeds`) and the specs (:class:`InputSpec`,
:class:`OutputSpec`) live in :mod:`.standalone`, which needs NumPy only: the runner copied
into every artifact checks feeds with that same code, so a bad feed raises the same error,
with the same message, through a compiled program, ``sg.load`` and the standalone runner.
"""
from __future__ import annotations

from .standalone import InputSpec, OutputSpec, bind_feeds, check_feed

__all__ = ["InputSpec", "OutputSpec", "bind_feeds", "build_signature", "check_feed",
           "dims_signature", "feedable_sources"]


def dims_signature(value) -> tuple | None:
    """``value``'s dims as a signature shows them (ints, names, ``"?0"``, ``"batch*784"``);
    None when every dim is static."""
    return None if value.dims is value.shape else tuple(
        d if type(d) is int else str(d) for d in value.dims)


def feedable_sources(ops) -> set:
    """The source Values (``data`` inputs, parameters) that the ops ``ops`` include."""
    return {op.results[0] for op in ops if op.opdef.feedable}


def build_signature(program, for_fetches, for_updates=frozenset()):
    """InputSpecs for the program's data inputs then parameters. ``for_fetches`` and
    ``for_updates``: the sets of source Values the fetches and the state outputs depend on."""
    specs = [InputSpec(v.name, v.shape, v.dtype, "data", v in for_fetches or v in for_updates,
                       v not in for_fetches and v in for_updates, dims_signature(v))
             for v in program.inputs]
    specs += [InputSpec(v.name, v.shape, v.dtype, "parameter", False)
              for v in program.parameters]
    return specs
