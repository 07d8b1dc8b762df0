"""Epilogues of native ops: the loop group that alone reads a convolution's result, computed
in the convolution's GEMM output loop.

A ``conv2d`` followed by its bias and activation is, after fusion, a native op (the GEMM) and
one loop group (``add`` of the bias reshaped to ``[1, C, 1, 1]``, ``relu``, and the mask
``relu``'s gradient reads). In a segment the native op would write its result into a
temporary and the group read it back. When the group is the only reader of the result,
:func:`fuse` makes the two one :class:`EpilogueMember`: the convolution's function computes the
group on each block of the result right after the GEMM that wrote it (one sample's rows of
one group of channels, while they are in cache), and the result itself never gets a buffer of
its own: the GEMM writes into the group's first output of the result's type, which the
epilogue then overwrites element by element.

Which native kinds take one, and the axis of the result a per-channel operand runs along, is
the table :data:`BLOCKS`. The elementwise ops an epilogue computes are the C lowering table's
(:mod:`.lowering`, the rules of a segment's loop groups: :class:`.kernels.GroupRenderer`), so a
bias, ``relu``, ``leaky_relu``, ``gelu``, a residual sum... all fuse, and each output is the
group's own, bit for bit. A group fuses when (:func:`fuse`):

- it is a map group C computes (no reduction) over exactly the result's dims, every output
  has those dims and none is a parameter's new value written in place;
- every other array it reads is shaped like the result (read at the same element) or
  broadcast along every axis but the channels (a bias ``[1, C, 1, 1]``, ``[C, 1, 1]``, one
  element), read once per row, and is computed before the convolution (or outside the
  segment), which then runs where it was, the group with it;
- one of its outputs has the result's dtype (the GEMM's target).

``matmul`` takes none: a per-block epilogue in its GEMM's blocks (``c/native.h.j2``) was built
and measured on 2026-11-27; W1's step took 0.998x to 1.03x the time without it (paired in
one process, six runs, five of them slower), and it gained nothing at batch 4096 either (see
``docs/codegen.md``).

The epilogue's function (``c/epilogue.c.j2``), which the convolution's chunk calls after each
GEMM with its block's rows (``sg_o0`` is the GEMM's target, ``sg_e0`` the bias)::

    static void sg_n_19f4fd616535526d_epilogue(const sg_epilogue *sg_e, int64_t sg_r0,
                                               int64_t sg_r1)
    {
        const float *restrict sg_e0 = sg_e->in[0];
        float *restrict sg_o0 = sg_e->out[0];
        bool *restrict sg_o1 = sg_e->out[1];
        for (int64_t sg_r = sg_r0; sg_r < sg_r1; sg_r++) {
            const int64_t sg_row = sg_r * 1024, sg_ch = sg_r % 16;
            const float sg_chan0 = sg_e0[sg_ch];
            #pragma omp simd
            for (int64_t sg_q = 0; sg_q < 1024; sg_q++) {
                const int64_t sg_at = sg_row + sg_q;
                const float sg_v = sg_o0[sg_at];
                const float v0 = ((sg_v) + (sg_chan0));   /* %10 = add(%8, %9) */
                /* %11 = relu(%10) */
                const float v1 = (((v0) > (float)0 || (v0) != (v0)) ? (v0) : (float)0);
                /* %46 = greater(%10, %38); backward of %11 = relu(%10) */
                const bool v2 = ((v0) > (0.0f));
                sg_o0[sg_at] = v1;
                sg_o1[sg_at] = v2;
            }
        }
    }
"""
from __future__ import annotations

import dataclasses
import math

from .ctype import c_type
from .kernels import GroupRenderer
from .segments import Member

# native kind -> the axis of its result that a per-channel operand (a bias) runs along, whose
# every element starts a row of the blocks its GEMM writes (conv2d: per sample and group, the
# rows of the group's output channels, each a plane of the result)
BLOCKS = {"conv2d": 1}


@dataclasses.dataclass
class EpilogueMember:
    """A native op (``native``, an :class:`.segments.OpMember`, its template kind ``kind``)
    computing loop group ``group`` (a :class:`.segments.Member`) on its result's blocks: its
    function (rendered with :func:`render_context`) takes the op's inputs, then ``operands``
    (the group's other arrays, ``(value, read)`` with ``read`` ``"full"`` or
    ``"channel"``), then the group's outputs; the op's result is never stored."""

    native: object
    kind: str
    group: object
    operands: list
    function: object = None
    reduction: str = ""

    @property
    def op(self):
        return self.native.op

    @property
    def inputs(self) -> list:
        return self.native.inputs + [value for value, _ in self.operands]

    @property
    def results(self) -> list:
        return self.group.results

    @property
    def dims(self) -> list:
        return self.native.dims

    @property
    def note(self) -> str:
        return f"{self.native.note}, its epilogue {self.group.note}"

    def aligned(self, value, space):
        return None   # the entry checks every argument against the binding

    @property
    def target(self) -> int:
        """The number of the group's output the GEMM writes into."""
        dtype = self.native.results[0].dtype
        return next(k for k, v in enumerate(self.group.results) if v.dtype == dtype)


def _channel_operand(value, result, axis) -> bool:
    """Is ``value`` broadcast along every axis of ``result`` but ``axis``?"""
    lead = result.ndim - value.ndim
    return lead >= 0 and all(
        d == 1 or (k + lead == axis and value.dims[k] == result.dims[axis])
        for k, d in enumerate(value.shape))


def _operands(group, result, axis, opaque) -> list | None:
    """``(value, read)`` of each array loop group ``group`` reads besides ``result``, or None
    when one is neither shaped like it nor a per-channel broadcast, or is ``opaque`` (a view
    whose buffer is not laid out as the value: an absorbed transpose)."""
    found = []
    for value in group.inputs:
        if value is result:
            continue
        if value in opaque:
            return None
        if tuple(value.dims) == tuple(result.dims):
            found.append((value, "full"))
        elif _channel_operand(value, result, axis):
            found.append((value, "channel"))
        else:
            return None
    return found


def _candidate(native, group, kind, overwritten, opaque):
    """The :class:`EpilogueMember` of ``native`` (of kind ``kind``) computing ``group``, or
    None when the group does not fuse (see the module docstring)."""
    result = native.results[0]
    if not isinstance(group, Member) or group.plan.reduction is not None or \
            tuple(group.plan.dims) != tuple(result.dims):
        return None
    if any(tuple(v.dims) != tuple(result.dims) or v in overwritten for v in group.results) or \
            not any(v.dtype == result.dtype for v in group.results):
        return None
    operands = _operands(group, result, BLOCKS[kind], opaque)
    return None if operands is None else EpilogueMember(native, kind, group, operands)


def fuse(members, kinds, readers, escaping, resolve, overwritten=(), opaque=()) -> tuple:
    """``(members, kinds)`` of a segment with each native op of a kind in :data:`BLOCKS`
    whose result only one later loop group reads made an :class:`EpilogueMember` of the two,
    where the group was fusable (module docstring), at the native op's place (its kind then
    None). ``readers``: the block's ops reading each value; ``escaping``: the values read
    after the segment; ``resolve(value)``: the value whose buffer holds it; ``overwritten``:
    parameters' new values written in place; ``opaque``: views whose buffer is laid out
    otherwise (transposes)."""
    place = {member.op: k for k, member in enumerate(members)}
    made_at = {v: k for k, member in enumerate(members) for v in member.results}
    overwritten, opaque = set(overwritten), set(opaque)
    fused, taken = {}, set()
    for k, (member, kind) in enumerate(zip(members, kinds)):
        result = member.results[0] if kind in BLOCKS else None
        if result is None or result in escaping:
            continue
        reading = set(readers.get(result, ()))
        if len(reading) != 1:
            continue
        j = place.get(reading.pop())
        if j is None or j <= k or j in taken:
            continue
        candidate = _candidate(member, members[j], kind, overwritten, opaque)
        if candidate is None or any(k <= made_at.get(resolve(v), -1) < j
                                    for v, _ in candidate.operands):
            continue
        fused[k] = candidate
        taken.add(j)
    order = [k for k in range(len(members)) if k not in taken]
    return ([fused.get(k, members[k]) for k in order],
            [None if k in fused else kinds[k] for k in order])


def render_context(member, scalars, options, environment) -> dict:
    """The ``epilogue`` context of ``c/native_op.c.j2`` and ``c/epilogue.c.j2`` for ``member``
    (an :class:`EpilogueMember`) with the constants ``scalars`` inlined: ``parameters`` (the
    native function's parameters after the op's inputs: the ``operands`` operands ``sg_e<j>``
    then the outputs ``sg_o<k>``), ``pointers`` (their declarations in the epilogue, from its
    ``sg_epilogue``), ``channel`` (the loads of the per-channel operands), ``body`` (the
    lines per element, ``sg_at`` its offset), ``cols`` and ``channels`` (the length of a
    row of the result and the channels whose rows follow each other: :data:`BLOCKS`),
    ``target``, the C types of the operands (``reads``) and outputs (``writes``), how many
    ``outputs`` and the group's ``note``."""
    plan, result = member.group.plan, member.native.results[0]
    renderer = GroupRenderer(plan, scalars, options, environment)
    operands, outputs = member.operands, member.group.results
    reads = [c_type(v.dtype) for v, _ in operands]
    writes = [c_type(v.dtype) for v in outputs]
    parameters = [f"const {t} *sg_e{j}" for j, t in enumerate(reads)]
    parameters += [f"{t} *restrict sg_o{k}" for k, t in enumerate(writes)]
    pointers = [f"const {t} *restrict sg_e{j} = sg_e->in[{j}];" for j, t in enumerate(reads)]
    pointers += [f"{t} *restrict sg_o{k} = sg_e->out[{k}];" for k, t in enumerate(writes)]
    local, channel = {result: "sg_v"}, []
    for j, (value, read) in enumerate(operands):
        if read == "full":
            local[value] = f"sg_e{j}[sg_at]"
        else:
            local[value] = f"sg_chan{j}"
            at = "sg_ch" if any(d != 1 for d in value.shape) else "0"
            channel.append(f"const {c_type(value.dtype)} sg_chan{j} = sg_e{j}[{at}];")
    body = [f"const {c_type(result.dtype)} sg_v = sg_o{member.target}[sg_at];"]
    body += [f"{code}   /* {note} */" if note else code
             for code, note in renderer.op_lines(plan.map_ops, local)]
    body += [f"sg_o{k}[sg_at] = {renderer.read(v, None, local)};"
             for k, v in enumerate(plan.outputs)]
    axis = BLOCKS[member.kind]
    return dict(parameters=parameters, pointers=pointers, channel=channel, body=body,
                cols=math.prod(result.shape[axis + 1:]), channels=result.shape[axis],
                operands=len(operands), outputs=len(outputs), target=member.target,
                reads=reads, writes=writes, note=member.group.note)
