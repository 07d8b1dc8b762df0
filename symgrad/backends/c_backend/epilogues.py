"""Epilogues of native ops: the loop group that alone reads a convolution's result, computed
in the convolution's GEMM output loop.

A ``conv2d`` followed by its bias and activation is, after fusion, a native op (the GEMM)
and one loop group (``add`` of the bias reshaped to ``[1, C, 1, 1]``, ``relu``, and the mask
``relu``'s gradient reads): the native op would write its result and the group read it back
in a segment of its own. When that group is the only reader of the result,
:func:`find` makes the group the native op's *epilogue*: the entry point computes it on each
block of the result right after the GEMM that wrote it (while it is in cache), and the result
itself never reaches memory of its own: the GEMM writes into the group's first output of its
type and shape, which the epilogue then overwrites element by element.

Which native kinds take one, and the block a GEMM writes, is the table :data:`BLOCKS`; which
elementwise ops an epilogue computes is the C lowering table (:mod:`.lowering`, the same rules
as a segment's), so a bias, ``relu``, ``leaky_relu``, ``gelu``, a residual sum... all fuse,
and each output is the group's own, bit for bit. A group fuses when (:func:`find`):

- it is a map group C computes (:func:`.kernels.lowerable`, no reduction) over exactly the
  result's dims, and every output has those dims (none updates a parameter in place);
- every other array it reads is either shaped like the result (read at the same element),
  or broadcast along every axis but the block's channel axis (a bias ``[1, C, 1, 1]``,
  ``[C, 1, 1]``, a single element), read once per channel;
- one of its outputs has the result's dtype (the GEMM's target).

The host then calls the native op where the group was (:func:`in_order` moves it down: no
op in between reads its result) and skips the group. The epilogue's C loop, per sample ``i``
and channel ``ch`` of the block (``c/window_parts.c.j2``)::

    const float sg_c0 = sg_e0[sg_ch];             /* the bias, once per channel */
    #pragma omp simd
    for (int64_t sg_q = 0; sg_q < 1024; sg_q++) {
        const int64_t sg_at = sg_row + sg_q;
        const float v0 = sg_o0[sg_at];               /* the GEMM's result */
        const float v1 = v0 + sg_c0;                 /* %10 = add(%8, %9) */
        const float v2 = fmax(v1, (float)0);         /* %11 = relu(%10) */
        const bool v3 = v1 > (float)0;               /* %50 = greater(%10, 0) */
        sg_o0[sg_at] = v2;
        sg_o1[sg_at] = v3;
    }
"""
from __future__ import annotations

import dataclasses

from .ctype import c_type
from .kernels import GroupRenderer, lowerable, pointer_inputs

# native kind -> the axis of its result a GEMM block runs along (its rows): conv2d's GEMM
# writes, per sample and group, the rows of the group's output channels
BLOCKS = {"conv2d": 1}


@dataclasses.dataclass
class Epilogue:
    """Loop group ``group`` (its ``plan``) computed in native op ``op``'s output loop;
    ``target``: the number of the output the GEMM writes into."""

    op: object
    group: object
    plan: object
    target: int

    def operands(self, scalars) -> list:
        """``(value, read)`` of each array the group reads besides the op's result (a
        constant in ``scalars`` is inlined instead): ``read`` is ``"full"`` (shaped like
        the result) or ``"channel"`` (one element per channel, or one in all); None when one
        is neither."""
        result = self.op.results[0]
        axis = BLOCKS[self.op.opdef.name]
        found = []
        for value in pointer_inputs(self.plan, scalars):
            if value is result:
                continue
            if tuple(value.dims) == tuple(result.dims):
                found.append((value, "full"))
            elif _channel_operand(value, result.shape, axis):
                found.append((value, "channel"))
            else:
                return None
        return found


def _channel_operand(value, dims, axis) -> bool:
    """Is ``value`` broadcast along every axis of a result of ``dims`` but ``axis``?"""
    lead = len(dims) - value.ndim
    return lead >= 0 and all(d == 1 for k, d in enumerate(value.shape)
                             if k + lead != axis or d != dims[axis])


def _epilogue(op, group, plan_of, excluded) -> Epilogue | None:
    """The epilogue of native ``op`` computing ``group``, or None when it cannot (see the
    module docstring)."""
    result = op.results[0]
    plan = plan_of(group)
    if plan is None or plan.reduction is not None or not lowerable(plan) or \
            tuple(plan.dims) != tuple(result.dims):
        return None
    if any(tuple(v.dims) != tuple(result.dims) or v in excluded for v in group.results):
        return None
    target = next((k for k, v in enumerate(group.results) if v.dtype == result.dtype), None)
    if target is None:
        return None
    epilogue = Epilogue(op, group, plan, target)
    # the group's constants are not inlined yet: every capture must be an operand it takes
    return epilogue if epilogue.operands({}) is not None else None


def find(ops, readers, read_after, kind_of, plan_of, excluded=()) -> dict:
    """``{native op: Epilogue}`` for the ops of one block (``readers``: the ops of the block
    reading each value; ``read_after``: the values read after it; ``kind_of(op)``: an op's
    native kind or None; ``plan_of(op)``: a loop group's plan when C computes it, else None;
    ``excluded``: values an output may not be, such as the new values of parameters updated
    in place)."""
    found, taken = {}, set()
    for op in ops:
        if kind_of(op) not in BLOCKS or op.results[0] in read_after:
            continue
        group = readers.get(op.results[0], ())
        if len(set(group)) != 1 or group[0] in taken:
            continue
        epilogue = _epilogue(op, group[0], plan_of, set(excluded))
        if epilogue is not None:
            found[op] = epilogue
            taken.add(group[0])
    return found


def in_order(ops, epilogues) -> list:
    """``ops`` with each native op of ``epilogues`` moved to just before its group (no op in
    between reads its result, so the order stays a topological one)."""
    moved = {e.op for e in epilogues.values()}
    before = {e.group: e.op for e in epilogues.values()}
    ordered = []
    for op in ops:
        if op in moved:
            continue
        if op in before:
            ordered.append(before[op])
        ordered.append(op)
    return ordered


def render_context(epilogue, scalars, options, environment) -> dict:
    """The ``epilogue`` context of ``c/window_parts.c.j2`` for the constants ``scalars``
    inlined by the time the op is lowered: ``operands`` (the arrays the entry takes for it),
    ``pointers`` (declarations of the operands ``sg_e<j>`` and outputs ``sg_o<k>`` from the
    ``sg_conv``'s ``ep_in`` and ``ep_out``), ``channel`` (the loads once per channel),
    ``body`` (the lines per element, ``sg_at`` its offset) and ``target``."""
    plan, result = epilogue.plan, epilogue.op.results[0]
    renderer = GroupRenderer(plan, scalars, options, environment)
    T = c_type(result.dtype)
    operands = epilogue.operands(scalars)
    pointers = [f"const {c_type(v.dtype)} *restrict sg_e{j} = sg_a->ep_in[{j}];"
                for j, (v, _) in enumerate(operands)]
    pointers += [f"{c_type(v.dtype)} *restrict sg_o{k} = sg_a->ep_out[{k}];"
                 for k, v in enumerate(epilogue.group.results)]
    local, channel = {result: "sg_v"}, []
    for j, (value, read) in enumerate(operands):
        if read == "full":
            local[value] = f"sg_e{j}[sg_at]"
        else:
            local[value] = f"sg_c{j}"
            at = "sg_ch" if any(d != 1 for d in value.shape) else "0"
            channel.append(f"const {c_type(value.dtype)} sg_c{j} = sg_e{j}[{at}];")
    body = [f"const {T} sg_v = sg_o{epilogue.target}[sg_at];"]
    body += [f"{code}   /* {note} */" if note else code
             for code, note in renderer.op_lines(plan.map_ops, local)]
    body += [f"sg_o{k}[sg_at] = {renderer.read(v, None, local)};"
             for k, v in enumerate(plan.outputs)]
    return dict(operands=[v for v, _ in operands], pointers=pointers, channel=channel, body=body,
                target=epilogue.target)
