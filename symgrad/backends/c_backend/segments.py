"""C entry points: one per *segment*, a run of consecutive loop groups and native ops of one
block.

The host module calls a segment with one tuple: its inputs (values computed outside it), then
its outputs (the values used after it, which the host allocates with ``np.empty``), then the
sizes of the symbolic dims it uses, as Python ints that the host renders from the binding
(:mod:`symgrad.backends.dim_code`; the C code reads them into ``int64_t sg_size[]`` and never
takes a size from an array). The entry takes each array's buffer (C-contiguous; an input that
is not is copied), checks ranks, item sizes and dims (every array against the sizes given and
the static dims, and a dim unknown when the program was built must be the same wherever it
appears, since unknown dims are never broadcast), releases the GIL and calls its *steps* in
turn: functions of a bounded number of members each (:mod:`.units`; ``c/step.c.j2``), given
the buffers and the sizes, which allocate the segment's own temporaries (an array of pointers
the entry holds), call the members' functions in order and free each temporary after its last
reader.

A member is a loop group (:class:`Member`: its function from ``c/group.c.j2``), a native op
(:class:`OpMember`: matmul, a convolution, pooling, their gradients, from ``c/native_op.c.j2``,
see :mod:`.native_ops`), a convolution computing the loop group after it on each block its
GEMM writes (:class:`.epilogues.EpilogueMember`), two independent matmuls side by side
(:class:`PairMember`, from ``c/matmul_pair.c.j2``) or a row op (:class:`OpMember`: the
softmax family and ``one_hot``, from ``c/row_op.c.j2``, see :mod:`.row_ops`), called alike:
``fn(sg_d, pointers...)`` with the sizes it reads in ``sg_d``. A view the segments absorb (a
reshape, a transpose of a matrix or a stack read by matmuls: :mod:`.views`) is no member: its
readers get its operand's buffer; a broadcast they read is a loop group of its own
(:func:`~.kernels.broadcast_plan`). So a training step whose ops C computes (W1, W7, W8 of
``benchmarks/cpu.py``) is one call, where each matmul and row op used to return to Python.
Errors are Python exceptions (``TypeError``, ``ValueError``, ``MemoryError``,
``RuntimeError`` without a BLAS) raised from the host's call.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib

from .ctype import c_type, value_label
from .entry_sizes import EntrySizes
from .kernels import describe, group_heading
from .native_ops import pair_note
from .units import Piece, guarded, steps_of


@dataclasses.dataclass
class Member:
    """One loop group of a segment: its plan, its (possibly shared) C function and the values
    it passes to it by pointer."""

    plan: object
    function: object
    inputs: list

    @property
    def op(self):
        return self.plan.op

    @property
    def results(self) -> list:
        return self.plan.op.results

    @property
    def dims(self) -> list:
        """The dims of its iteration space, the function's ``sg_d``."""
        return self.plan.dims

    @property
    def note(self) -> str:
        return group_heading(self.plan)

    @property
    def reduction(self) -> str:
        """The name of its reduction (for the error of an empty extent), else ``""``."""
        return self.plan.combine.ufunc.__name__ if self.plan.reduction is not None else ""

    def aligned(self, value, space) -> list:
        """The dims (C) that input ``value`` aligns with, given the space's: a value the loop
        reads aligns with the iteration space, one only the epilogue reads with the reduced
        space."""
        if value in self.loop_reads:
            return space
        return self.plan.reduced_dims(space)

    @functools.cached_property
    def loop_reads(self) -> set:
        """The values its loop (not only its epilogue) reads."""
        return {v for op in self.plan.loop_ops for v in op.inputs}


@dataclasses.dataclass
class OpMember:
    """One native op (:mod:`.native_ops`) or row op (:mod:`.row_ops`) of a segment: the op,
    its C function and the dims whose sizes it reads (``native_dims``, ``row_dims``);
    ``reduction``: the name its empty-extent error gives (a row op's ``"maximum"``);
    ``labels``: it checks class labels (a label outside the classes fails the step with 5,
    which the entry raises). Its inputs' dims need no check of their own: the entry checks
    every argument against the binding, and the op's shape rule relates its operands' dims."""

    op: object
    function: object
    dims: list
    reduction: str = ""
    labels: bool = False

    @property
    def inputs(self) -> list:
        return self.op.inputs

    @property
    def results(self) -> list:
        return self.op.results

    @property
    def note(self) -> str:
        return describe(self.op)

    def aligned(self, value, space):
        return None


@dataclasses.dataclass
class PairMember:
    """Two independent matmuls of a segment (:class:`OpMember` each) computed by one function,
    side by side (:func:`.native_ops.render_matmul_pair`): its inputs are the first's operands
    then the second's, its results the first's then the second's result, its dims the first's
    then the second's."""

    first: OpMember
    second: OpMember
    function: object
    reduction: str = ""

    @property
    def inputs(self) -> list:
        return self.first.inputs + self.second.inputs

    @property
    def results(self) -> list:
        return self.first.results + self.second.results

    @property
    def dims(self) -> list:
        return self.first.dims + self.second.dims

    @property
    def note(self) -> str:
        return pair_note([self.first.op, self.second.op])

    def aligned(self, value, space):
        return None


class SegmentRenderer:
    """Renders segment ``number`` of ``members``; ``escaping``: the values used after it;
    ``dim_code(dim)``: the host's expression of a symbolic dim's size; ``resolve(value)``:
    the value whose buffer holds ``value`` (the operand of an absorbed view: :mod:`.views`),
    which its readers get; ``sizes``: the :class:`.EntrySizes` of an entry it shares."""

    def __init__(self, number, members, escaping, dim_code, resolve=lambda value: value,
                 sizes=None):
        self.number = number
        self.members = members
        self.resolve = resolve
        produced = {v for member in members for v in member.results}
        inputs = {}
        for member in members:
            for value in map(self.resolve, member.inputs):
                if value not in produced:
                    inputs.setdefault(value, None)
        self.inputs = list(inputs)
        self.outputs = [v for m in members for v in m.results if v in escaping]
        self.dim_code = dim_code
        self.arg = {v: k for k, v in enumerate(self.inputs + self.outputs)}
        # the symbolic dims it takes sizes of (sg_size[j]), shared with the entry's other
        # segments where it has several (a reverse_loop's two blocks: .loops)
        self.sizes = sizes if sizes is not None else EntrySizes()
        self.c_dim = self.sizes.c_dim
        self.temporaries = 0            # how many its steps allocate (set by steps())

    def host_shapes(self) -> dict:
        """Python shape expressions of the outputs, for the host's ``np.empty``."""
        return {v: [self.dim_code(d) for d in v.dims] for v in self.outputs}

    def size_arguments(self) -> list:
        """The host's expressions of the sizes the entry takes after the arrays (call after
        :meth:`render`)."""
        return [self.dim_code(dim) for dim in self.sizes.dims]

    # --- the entry ---------------------------------------------------------------------------
    def render(self, environment, flush=False) -> tuple[str, list]:
        """``(entry, steps)``: the entry's code and the step functions (:class:`.units.Piece`)
        it calls in turn, each a run of its members of bounded size (:func:`.units.steps_of`);
        ``flush``: the steps run with subnormals flushed to zero (option ``flush_denormals``)."""
        args = self.inputs + self.outputs
        checks, steps, summary = self.steps(environment)
        entry = environment.get_template("c/segment.c.j2").render(
            number=self.number, summary=summary,
            args=[dict(writable=int(k >= len(self.inputs)), type=c_type(v.dtype), ndim=v.ndim,
                       what=value_label(v)) for k, v in enumerate(args)],
            checks=checks,
            steps=[step.name for step in steps], temporaries=self.temporaries,
            sizes=len(self.sizes.dims), flush=flush, native=self.native, labels=self.labels)
        return entry, steps

    @property
    def native(self) -> bool:
        """Does a member call a native op (which may fail with 3 or 4)?"""
        return any(m.function.native for m in self.members)

    @property
    def labels(self) -> bool:
        """Does a member check class labels (which may fail with 5)?"""
        return any(getattr(m, "labels", False) for m in self.members)

    def steps(self, environment) -> tuple[list, list, str]:
        """``(checks, steps, summary)``: the checks of the inputs' dims against the sizes
        given (the entry's; ``sg_b[k]`` is input ``k``), the step functions calling the
        members in turn with the arguments' buffers (:attr:`inputs`, then :attr:`outputs`) and
        the temporaries (:attr:`temporaries` of them), and a line summing them up."""
        groups, temporaries = [], {}
        checks = self.sizes.checks(self.inputs)   # the inputs are its first arguments
        checked = {(check["got"], check["want"]) for check in checks}
        last_use = {}
        for index, member in enumerate(self.members):
            for value in map(self.resolve, member.inputs):
                last_use[value] = index
        ending = {}    # member index -> the values it is the last to read
        for value, index in last_use.items():
            ending.setdefault(index, []).append(value)
        for index, member in enumerate(self.members):
            space = [self.c_dim(d) for d in member.dims]
            for value in member.inputs:   # run-time dims must agree (a symbolic dim is one
                aligned = member.aligned(value, space)   # size anywhere)
                k = self.arg.get(value)
                if aligned is None or k is None:   # checked by the entry, or a temporary
                    continue
                lead = len(aligned) - value.ndim
                for axis, dim in enumerate(value.shape):
                    if dim is not None:   # a static dim
                        continue
                    got, want = f"sg_b[{k}].shape[{axis}]", aligned[lead + axis]
                    if (got, want) not in checked:
                        checks.append(dict(got=got, want=want, what=value_label(value),
                                           axis=axis))
                        checked.add((got, want))
            pointers = [self.pointer(self.resolve(v), temporaries) for v in member.inputs]
            allocate = {}   # (C type, element count) -> the temporaries' numbers
            for value in member.results:
                if value not in self.arg:
                    temporaries[value] = len(temporaries)
                    count = " * ".join(f"(size_t)({self.c_dim(d)})" for d in value.dims) or "1"
                    allocate.setdefault((c_type(value.dtype), count), []).append(
                        temporaries[value])
                pointers.append(self.pointer(value, temporaries))
            release = [temporaries[v] for v in ending.get(index, ()) if v in temporaries]
            release += [temporaries[v] for v in member.results
                        if v in temporaries and v not in last_use]
            groups.append(dict(function=member.function.name, dims=space, pointers=pointers,
                               allocate=[(numbers, kind, count) for (kind, count), numbers
                                         in allocate.items()],
                               release=release, note=member.note, reduction=member.reduction))
        steps = [self.step([groups[k] for k in run], environment) for run in
                 steps_of([2 + len(g["allocate"]) for g in groups])]
        summary = "; ".join(g["note"] for g in groups) if len(steps) == 1 else \
            f"{len(groups)} members in {len(steps)} steps"
        self.temporaries = len(temporaries)
        return checks, steps, summary

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
