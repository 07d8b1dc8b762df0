"""What the pass pipeline reads besides its own options (``PIPELINE_OPTIONS``): the backend's
fusion policy.

Passes read no backend's knobs. A backend says how fusion should serve it through a
:class:`FusionPolicy` (``Backend.fusion_policy(options)``); :func:`symgrad.compile` hands the
passes a :class:`PassOptions` built from the pipeline's options and that policy.
"""
from __future__ import annotations

import dataclasses

@dataclasses.dataclass(frozen=True)
class FusionPolicy:
    """How a backend wants its groups. ``alone_min_elements``: a fusible op that fuses with
    nothing still becomes a group of its own when its static size has at least this many
    elements and a leading dim other than 1 (the backend splits such loops between threads,
    where one library call would run on one thread); None: never."""

    alone_min_elements: int | None = None


@dataclasses.dataclass(frozen=True)
class PassOptions:
    """The options every pass receives (``pass(program, fetches, options)``)."""

    fusion: bool = True
    max_group_size: int = 64
    policy: FusionPolicy = FusionPolicy()

    @classmethod
    def of(cls, options, policy: FusionPolicy = FusionPolicy()) -> "PassOptions":
        """The pass options of compile options ``options`` (anything with the pipeline's
        option attributes) under a backend's ``policy``."""
        return cls(options.fusion, options.max_group_size, policy)
