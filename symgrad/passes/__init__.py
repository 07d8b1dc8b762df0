"""The pass pipeline: pure ``Program -> Program`` rewrites run before code generation.

Every pass is ``pass(program, fetches, options) -> (program, fetches, stats)``, ``options`` a
:class:`~.options.PassOptions` (the pipeline's own options and the backend's fusion policy:
passes read no backend knob): it builds a new
program (the input is never modified), maps the fetches into it and reports counters. A pass
with nothing to change returns its input program itself, so treat the programs passes return
as read-only. :func:`optimize` runs a list of passes by name (``None``:
:data:`DEFAULT_PIPELINE`) and returns the optimized program, its fetches and a
:class:`PassReport`. Passes whose only product is an analysis stored on the program
(:data:`ANNOTATIONS`) store it, inside :func:`optimize`, directly on a program that an earlier
pass of the same run built (no one else holds it) instead of copying it first.

Every pass is linear in program size: a forward or backward sweep over the ops with constant
work per op (dictionary lookups, no text formatting, no shape rules for copied ops).
"""
from __future__ import annotations

import dataclasses
import functools

from ..gc_pause import gc_paused
from ..ir.graph import walk_ops
from ..ir.printer import counted, format_program
from ..option_schema import Option, unknown_name_message
from ..ops.fused import FUSION, is_fusion
from .cse import cse
from .fusion import fuse, partition, split_body
from .hoist import hoist
from .memory import attach_plan, memory_plan
from .options import FusionPolicy, PassOptions
from .prune import prune
from .simplify import simplify

PASSES = {
    "prune": prune,
    "dce": prune,
    "cse": cse,
    "simplify": simplify,
    "hoist": hoist,
    "fusion": fuse,
    "memory_plan": memory_plan,
}
# the pipeline's own options (each backend declares its own: ``Backend.options``)
PIPELINE_OPTIONS = (
    Option("passes", str, None, "names of the passes to run, in pipeline order, or None for "
           "the backend's default pipeline (the interpreter runs none; code generators run "
           "all)", nullable=True, sequence=True, choices=tuple(PASSES)),
    Option("fusion", bool, True, "build fused groups (switch off to get one kernel or NumPy "
           "call per op)"),
    Option("max_group_size", int, 64, "cap on the ops of one fused group", minimum=1),
)

DEFAULT_PIPELINE = ("prune", "cse", "simplify", "hoist", "dce", "fusion", "memory_plan")
# pass name -> ``annotate(program, fetches, options) -> stats``, storing the pass's analysis
# on ``program`` itself (the pass = a copy of its input, annotated)
ANNOTATIONS = {"memory_plan": attach_plan}
ADDED_STATS = ("cse_merged", "simplified", "pruned_ops")   # summed over passes

__all__ = ["ANNOTATIONS", "DEFAULT_PIPELINE", "FUSION", "PASSES", "PIPELINE_OPTIONS",
           "FusionPolicy", "PassOptions",
           "PassReport", "count_ops", "cse", "fuse", "hoist", "is_fusion", "memory_plan",
           "optimize",
           "partition", "prune", "simplify", "split_body"]


@dataclasses.dataclass
class PassReport:
    """``stats``: counters merged into ``CompiledProgram.stats``; ``ir``: the optimized
    program's text with fusion groups marked (computed on first access)."""

    stats: dict
    program: object

    @functools.cached_property
    def ir(self) -> str:
        return format_program(self.program, annotate=_annotate)


def count_ops(program) -> int:
    """Ops of the program, nested ones included, counting the ops inside fused groups rather
    than the groups."""
    return sum(not is_fusion(op) for op in walk_ops(program.ops))


def _annotate(op):
    if is_fusion(op):
        return f"fused group {op.attrs['group']}: {counted(len(op.blocks[0].ops), 'op')}"
    return None




def optimize(program, fetches, options, passes=None):
    """Run ``passes`` (names, in order; ``None`` = :data:`DEFAULT_PIPELINE`) on ``program``.
    ``options``: a :class:`PassOptions`, or compile options (then under the default
    :class:`FusionPolicy`)."""
    if not isinstance(options, PassOptions):
        options = PassOptions.of(options)
    names = DEFAULT_PIPELINE if passes is None else tuple(passes)
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise ValueError(unknown_name_message("pass", unknown[0], PASSES))
    stats: dict = {}
    fetches = list(fetches)
    owned = False   # is ``program`` built by a pass of this run (not the caller's)?
    with gc_paused():
        for name in names:
            if owned and name in ANNOTATIONS:
                pass_stats = ANNOTATIONS[name](program, fetches, options)
            else:
                new, fetches, pass_stats = PASSES[name](program, fetches, options)
                owned = owned or new is not program
                program = new
            for key, value in pass_stats.items():
                stats[key] = stats.get(key, 0) + value if key in ADDED_STATS else value
    stats["ops_after"] = count_ops(program)
    stats.setdefault("fused_groups", 0)
    stats["passes"] = names
    return program, fetches, PassReport(stats, program)
