"""C entry points: one per *segment*, a run of consecutive loop groups of one block.

The host module calls a segment with one tuple: its inputs (values computed outside it), then
its outputs (the values used after it, which the host allocates with ``np.empty``), then the
sizes of the symbolic dims it uses, as Python ints that the host renders from the binding
(:mod:`symgrad.backends.dim_code`; the C code reads them into ``int64_t sg_size[]`` and never
takes a size from an array). The entry takes each array's buffer (C-contiguous; an input that
is not is copied), checks ranks, item sizes and dims (every array against the sizes given and
the static dims, and a dim unknown when the program was built must be the same wherever it
appears, since unknown dims are never broadcast), releases the GIL and calls its *steps* in
turn: functions of a bounded number of groups each (:mod:`.units`; ``c/step.c.j2``), given the
buffers and the sizes, which allocate the segment's own temporaries (an array of pointers the
entry holds), call the group functions in order and free each temporary after its last reader.
Errors are Python exceptions (``TypeError``, ``ValueError``, ``MemoryError``) raised from the
host's call.
"""
from __future__ import annotations

import dataclasses
import hashlib

from .ctype import c_type, value_label
from .entry_sizes import EntrySizes
from .kernels import group_heading
from .units import Piece, guarded, steps_of


@dataclasses.dataclass
class Member:
    """One loop group of a segment: its plan, its (possibly shared) C function and the values
    it passes to it by pointer."""

    plan: object
    function: object
    inputs: list


class SegmentRenderer:
    """Renders segment ``number`` of ``members``; ``escaping``: the values used after it;
    ``dim_code(dim)``: the host's expression of a symbolic dim's size."""

    def __init__(self, number, members, escaping, dim_code):
        self.number = number
        self.members = members
        produced = {}
        for index, member in enumerate(members):
            for value in member.plan.op.results:
                produced[value] = index
        inputs = {}
        for member in members:
            for value in member.inputs:
                if value not in produced:
                    inputs.setdefault(value, None)
        self.inputs = list(inputs)
        self.outputs = [v for m in members for v in m.plan.op.results if v in escaping]
        self.dim_code = dim_code
        self.arg = {v: k for k, v in enumerate(self.inputs + self.outputs)}
        self.sizes = EntrySizes()       # the symbolic dims it takes sizes of (sg_size[j])
        self.c_dim = self.sizes.c_dim

    # --- dims ------------------------------------------------------------------------------
    def c_dims(self, value) -> list:
        return [self.c_dim(d) for d in value.dims]

    @staticmethod
    def reduced_dims(plan, space) -> list:
        """Dims of ``plan``'s reduced space (its epilogue's) given its space's dims."""
        if plan.keepdims:
            return ["1" if a in plan.axes else d for a, d in enumerate(space)]
        return [d for a, d in enumerate(space) if a not in plan.axes]

    def host_shapes(self) -> dict:
        """Python shape expressions of the outputs, for the host's ``np.empty``."""
        return {v: [self.dim_code(d) for d in v.dims] for v in self.outputs}

    def size_arguments(self) -> list:
        """The host's expressions of the sizes the entry takes after the arrays (call after
        :meth:`render`)."""
        return [self.dim_code(dim) for dim in self.sizes.dims]

    # --- the entry ---------------------------------------------------------------------------
    def render(self, environment) -> tuple[str, list]:
        """``(entry, steps)``: the entry's code and the step functions (:class:`.units.Piece`)
        it calls in turn, each a run of its groups of bounded size (:func:`.units.steps_of`)."""
        args = self.inputs + self.outputs
        groups, temporaries = [], {}
        checks = self.sizes.checks(self.inputs)   # the inputs are its first arguments
        checked = {(check["got"], check["want"]) for check in checks}
        last_use = {}
        for index, member in enumerate(self.members):
            for value in member.inputs:
                last_use[value] = index
        ending = {}    # member index -> the values it is the last to read
        for value, index in last_use.items():
            ending.setdefault(index, []).append(value)
        for index, member in enumerate(self.members):
            plan = member.plan
            space = [self.c_dim(d) for d in plan.dims]
            reduced = self.reduced_dims(plan, space)
            loop_reads = {v for op in plan.loop_ops for v in op.inputs}
            for value in member.inputs:   # run-time dims must agree
                # a value the loop reads aligns with the iteration space, one only the
                # epilogue reads with the reduced space; a symbolic dim is one size anywhere
                aligned = space if value in loop_reads else reduced
                lead = len(aligned) - value.ndim
                k = self.arg.get(value)
                for axis, dim in enumerate(value.shape):
                    if k is None or dim is not None:   # a temporary, or a static dim
                        continue
                    got, want = f"sg_b[{k}].shape[{axis}]", aligned[lead + axis]
                    if (got, want) not in checked:
                        checks.append(dict(got=got, want=want, what=value_label(value),
                                           axis=axis))
                        checked.add((got, want))
            pointers = [self.pointer(value, temporaries) for value in member.inputs]
            allocate = {}   # (C type, element count) -> the temporaries' numbers
            for value in plan.op.results:
                if value not in self.arg:
                    temporaries[value] = len(temporaries)
                    count = " * ".join(f"(size_t)({d})" for d in self.c_dims(value)) or "1"
                    allocate.setdefault((c_type(value.dtype), count), []).append(
                        temporaries[value])
                pointers.append(self.pointer(value, temporaries))
            release = [temporaries[v] for v in ending.get(index, ()) if v in temporaries]
            release += [temporaries[v] for v in plan.op.results
                        if v in temporaries and v not in last_use]
            groups.append(dict(function=member.function.name, dims=space, pointers=pointers,
                               allocate=[(numbers, kind, count) for (kind, count), numbers
                                         in allocate.items()],
                               release=release, note=group_heading(plan),
                               reduction=plan.combine.ufunc.__name__ if plan.reduction
                               is not None else ""))
        steps = [self.step([groups[k] for k in run], environment) for run in
                 steps_of([2 + len(g["allocate"]) for g in groups])]
        summary = "; ".join(g["note"] for g in groups) if len(steps) == 1 else \
            f"{len(groups)} loop groups in {len(steps)} steps"
        entry = environment.get_template("c/segment.c.j2").render(
            number=self.number, summary=summary,
            args=[dict(writable=int(k >= len(self.inputs)), type=c_type(v.dtype), ndim=v.ndim,
                       what=value_label(v)) for k, v in enumerate(args)],
            checks=checks,
            steps=[step.name for step in steps], temporaries=len(temporaries),
            sizes=len(self.sizes.dims))
        return entry, steps

    @staticmethod
    def step(groups, environment) -> Piece:
        """The step function calling ``groups`` in turn, named from a hash of its code."""
        template = environment.get_template("c/step.c.j2")
        code = template.render(name="@NAME@", groups=groups)
        name = "sg_p_" + hashlib.sha256(code.encode()).hexdigest()[:16]
        code = code.replace("@NAME@", name)
        return Piece(guarded(name, code), name,
                     f"SG_LINK int {name}(const sg_buffer *restrict sg_b, "
                     f"const int64_t *restrict sg_size, void **restrict sg_t, "
                     f"const char **restrict sg_reduction);",
                     tuple(dict.fromkeys(g["function"] for g in groups)))

    def pointer(self, value, temporaries) -> str:
        k = self.arg.get(value)
        return f"sg_b[{k}].buf" if k is not None else f"sg_t[{temporaries[value]}]"
