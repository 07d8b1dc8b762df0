"""Scans whose whole body C computes, run as one loop in C.

The host module writes a ``scan`` as a Python ``for`` loop (:mod:`symgrad.backends.host.regions`):
each step slices its inputs, calls the body's segment and stores its outputs, a few
microseconds of Python a step. When every op of the body is a member of one segment (loop
groups, native ops, row ops, views the segment absorbs: :meth:`.host.CHostGenerator.classify`)
and every dim of the body is known before the loop, the loop itself is C (the body's
constants are made once, before it): one entry
(``c/loop.c.j2``) takes the carries' initial values, the per-step inputs and the values the
body reads, and the arrays of the final carries and the stacked per-step values (allocated by
the host), then calls the body's steps once a step with pointers into them::

    # %12, %51 = scan(%h0, %xs) captures(%W, %U, %b)
    # C segment 0: scan of %7 = matmul(%5, %W) beside %8 = matmul(%6, %U); fused group 0 ..., a loop in C
    t12 = np.empty((32, 128), np.float32)
    t51 = np.empty((100, 32, 128), np.float32)
    _sg_s0((h0, xs, W, U, b, t12, t51, 100, ))

Each carry has two buffers, this step's and the next's, and each step copies its yields: a
per-step value into its row of the stack, a carry into the next step's buffer (so a body may
yield its carries swapped, or a value both as a carry and per step), except a carry the body
writes to a buffer of its own that nothing else yields, whose buffer and the carry's are
exchanged. Other scans, a ``while`` loop and the checkpointed ``reverse_loop`` stay Python
loops of segment calls.
"""
from __future__ import annotations

from ...ops.control_flow import loop_layout, scan_p
from ...ops.core import SOURCE
from ..dim_code import shape_code
from ..host.literals import dtype_code
from .ctype import c_type, value_label
from .segments import SegmentRenderer
from .units import Piece


def _block_values(block) -> list:
    return list(block.args) + [v for op in block.ops for v in op.results]


def native_scan(gen, op, environment) -> list | None:
    """The host lines running scan ``op`` as one C loop, or None when it is not one that C
    runs whole (see the module's docstring); ``gen``: the C host generator."""
    layout = loop_layout(op)
    if op.opdef is not scan_p or layout.counted or not layout.body.ops or \
            any(v in gen.overwritten for v in op.results):
        return None
    body = layout.body
    if not all(gen.dim_names.known(d) for v in _block_values(body) for d in v.dims):
        return None
    lines = []
    sources = [body_op for body_op in body.ops if body_op.opdef.category == SOURCE]
    for source in sources:   # a constant of the body: made once, before the loop (first, so
        made_lines = gen.lower_op(source)   # that the members read a scalar as a literal)
        lines += [gen.text.line(source)] + made_lines if made_lines else []
    kinds = gen.classify(body.ops, body.yields)
    if len(sources) + sum(kinds.members) + len(kinds.absorbed) != len(body.ops):
        return None
    if any(v in gen.views or v in gen.scalars for v in body.yields):
        return None   # a view's layout is not its operand's; a literal has no buffer
    chosen = [k for k, member in enumerate(kinds.members) if member]
    members = gen.segment_members([body.ops[k] for k in chosen],
                                  [kinds.plans[k] for k in chosen],
                                  [kinds.natives[k] for k in chosen],
                                  [kinds.rows[k] for k in chosen])
    made = {v for member in members for v in member.results}
    number = len(gen.segments)
    renderer = SegmentRenderer(number, members, {v for v in body.yields if v in made},
                               gen.dim_code, gen.resolve)
    _, steps, summary = renderer.steps(environment)

    carry = {arg: j for j, arg in enumerate(layout.carry_args)}
    sliced = {arg: j for j, arg in enumerate(layout.x_args)}
    # the outer arrays: the initial carries, the per-step inputs, the other values the body
    # reads or yields, then the final carries and the stacks
    outer = list(dict.fromkeys(
        list(layout.inits) + list(layout.xs) +
        [v for v in renderer.inputs + list(body.yields)
         if v not in carry and v not in sliced and v not in made]))
    outputs = list(layout.finals) + list(layout.stacked_results)
    at = {v: k for k, v in enumerate(outer)}
    out = {v: j for j, v in enumerate(renderer.outputs)}

    def pointer(value) -> str:
        if value in out:
            return f"sg_out[{out[value]}]"
        if value in carry:
            return f"sg_cur[{carry[value]}]"
        if value in sliced:
            j = sliced[value]
            return f"(char *)sg_b[{at[layout.xs[j]]}].buf + sg_step * sg_row{j}"
        return f"sg_b[{at[value]}].buf"

    def size(value) -> str:
        return " * ".join([f"(size_t)({renderer.c_dim(d)})" for d in value.dims] +
                          [f"sizeof({c_type(value.dtype)})"])

    # a carry the body writes to a buffer of its own, yielded nowhere else: the buffer
    # becomes the next step's carry, the carry's the body's next buffer
    yielded = [id(v) for v in body.yields]
    own = {v: out[v] for v in layout.carry_yields if v in out and yielded.count(id(v)) == 1}
    first_output = len(outer)
    code = environment.get_template("c/loop.c.j2").render(
        number=number, summary=f"{op.name} of {summary}",
        args=[dict(writable=int(k >= first_output), type=c_type(v.dtype), ndim=v.ndim,
                   what=value_label(v)) for k, v in enumerate(outer + outputs)],
        checks=renderer.sizes.checks(outer),
        xs=[size(arg) for arg in layout.x_args],
        carries=[dict(number=j, bytes=size(arg), init=at[init], final=first_output + j,
                      source=pointer(source), out=own.get(source))
                 for j, (arg, init, source) in enumerate(zip(layout.carry_args, layout.inits,
                                                             layout.carry_yields))],
        outs=[size(v) for v in renderer.outputs],
        stacks=[dict(arg=first_output + len(layout.finals) + j, bytes=size(source),
                     source=pointer(source))
                for j, source in enumerate(layout.stacked_yields)],
        body=[pointer(v) for v in renderer.inputs + renderer.outputs],
        steps=[step.name for step in steps], temporaries=renderer.temporaries,
        sizes=len(renderer.sizes.dims), reverse=layout.reverse,
        flush=gen.options.flush_denormals, native=renderer.native, labels=renderer.labels)
    for step in steps:
        gen.c_steps.setdefault(step.name, step)
    gen.segments.append(Piece(code, calls=tuple(step.name for step in steps)))

    if layout.length is not None:
        length = str(layout.length)
    elif layout.has_length_input:
        length = f"int({gen.expr(layout.length_input)})"
    else:
        length = gen.dim_code(layout.xs[0].dims[0])
    lines.append(f"# C segment {number}: {op.name} of {summary}, a loop in C")
    shapes = [gen.shape_of(arg) for arg in layout.carry_args] + \
        [[length] + gen.shape_of(value) for value in layout.stacked_yields]
    for result, shape in zip(outputs, shapes):
        lines.append(f"{gen.namer.value(result)} = np.empty({shape_code(shape)}, "
                     f"{dtype_code(result.dtype)})")
    arguments = [gen.expr(v) for v in outer] + [gen.namer.value(v) for v in outputs] + \
        [gen.dim_code(d) for d in renderer.sizes.dims] + [length]
    lines.append(gen.entry_call(f"s{number}", arguments))
    return lines
