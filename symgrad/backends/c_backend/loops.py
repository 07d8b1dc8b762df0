"""Loops whose blocks C computes whole, run as loops in C.

The host module writes a ``scan`` as a Python ``for`` loop, a ``while_loop`` as a Python
``while``, and a checkpointed loop's backward (``reverse_loop``) as a Python loop over its
schedule's actions
(:mod:`symgrad.backends.host.regions`): each step slices its inputs, calls the block's segment
and stores its outputs, a few microseconds of Python a step. When every op of a loop's block
is a member of one segment (loop groups, native ops, row ops, views the segment absorbs:
:meth:`.host.CHostGenerator.classify`; the block's constants are made once, before the loop)
and every dim of its blocks is known before the loop, the loop itself is C: one entry takes
the loop's inputs and the values its blocks read, with the arrays of its results (allocated
by the host), and calls the blocks' steps with pointers into them::

    # %12, %51 = scan(%h0, %xs) captures(%W, %U, %b)
    # C segment 0: scan of %7 = matmul(%5, %W) beside %8 = ...; fused group 0 ..., a loop in C
    t12 = np.empty((32, 128), np.float32)
    t51 = np.empty((100, 32, 128), np.float32)
    _sg_s0((h0, xs, W, U, b, t12, t51, 100, ))

- ``scan`` (``c/loop.c.j2``): the body once a step, last to first when ``reverse``;
- ``while_loop`` (``c/while.c.j2``) that stacks no per-step value: the cond block, then
  the body while the cond's bool holds, counting the trips where the program reads the count;
- ``reverse_loop`` (``c/reverse_loop.c.j2``): the actions of its schedule, computed in C
  (``sg_reverse_plan``, the same actions as Python's), advancing the carries through the
  ``advance`` block, storing and restoring them in slots, and reversing a step through the
  ``reverse`` block.

Each running value (a carry, a cotangent) has two buffers, this step's and the next's, and
each step copies its yields: a per-step value into its row of the stack, a running value into
its next buffer (so a block may yield its carries swapped, or a value both as a carry and per
step), except one the block writes to a buffer of its own that nothing else yields, whose
buffer and the running value's are exchanged (``c/loop_parts.c.j2``). A while loop that
stacks its steps' residuals, and a loop with a block the host computes part of, stay Python
loops of segment calls.
"""
from __future__ import annotations

import dataclasses

from ...ops.control_flow import loop_layout, scan_p, while_p
from ...ops.core import SOURCE
from ...ops.reverse_loop import reverse_loop_counts, reverse_loop_p
from ..dim_code import shape_code
from ..host.literals import dtype_code
from .ctype import c_type, value_label
from .entry_sizes import EntrySizes
from .segments import SegmentRenderer
from .units import Piece

# sg_reverse_plan's kinds (c/library/reverse_plan.c.j2), by the name ops/checkpoint.py gives
PLAN_KINDS = {"every": 0, "sqrt": 1, "binomial": 2}


@dataclasses.dataclass
class _Block:
    """One block of a loop run in C, as one segment: its ``renderer``, ``steps`` and
    ``summary``, and the host ``lines`` making its constants before the loop."""

    block: object
    renderer: SegmentRenderer
    steps: list
    summary: str
    lines: list

    @property
    def made(self) -> set:
        return {v for member in self.renderer.members for v in member.results}

    def reads(self) -> list:
        """The values from outside it that the block reads or yields."""
        made, args = self.made, {id(arg) for arg in self.block.args}
        return [v for v in self.renderer.inputs + list(self.block.yields)
                if v not in made and id(v) not in args]

    def context(self, pointer) -> dict:
        """Its part of the entry's template context: per buffer its ``pointers``
        (``pointer(value)``), its ``steps``, the bytes of its ``outs`` and its
        ``temporaries``."""
        renderer = self.renderer
        return dict(pointers=[pointer(v) for v in renderer.inputs + renderer.outputs],
                    steps=[step.name for step in self.steps],
                    outs=[_bytes(renderer, v) for v in renderer.outputs],
                    temporaries=renderer.temporaries)


def _bytes(renderer, value) -> str:
    """C expression of the bytes of ``value``."""
    return " * ".join([f"(size_t)({renderer.c_dim(d)})" for d in value.dims] +
                      [f"sizeof({c_type(value.dtype)})"])


def _segment(gen, block, number, sizes, environment) -> _Block | None:
    """``block`` as one segment of the loop entry ``number`` (``sizes``: the entry's), or None
    when an op of it is not a member, a dim of it is not known before the loop, or it yields
    a view or a literal."""
    values = list(block.args) + [v for op in block.ops for v in op.results]
    if not block.ops or not all(gen.dim_names.known(d) for v in values for d in v.dims):
        return None
    lines = []
    sources = [op for op in block.ops if op.opdef.category == SOURCE]
    for source in sources:   # made once, before the loop (first, so that the members read
        made = gen.lower_op(source)   # a scalar as a literal)
        lines += [gen.text.line(source)] + made if made else []
    kinds = gen.classify(block.ops, block.yields)
    if len(sources) + sum(kinds.members) + len(kinds.absorbed) != len(block.ops) or \
            any(v in gen.views or v in gen.scalars for v in block.yields):
        return None   # a view's layout is not its operand's; a literal has no buffer
    chosen = [k for k, member in enumerate(kinds.members) if member]
    members = gen.segment_members([block.ops[k] for k in chosen],
                                  [kinds.plans[k] for k in chosen],
                                  [kinds.natives[k] for k in chosen],
                                  [kinds.rows[k] for k in chosen], kinds.readers,
                                  kinds.read_after)
    made = {v for member in members for v in member.results}
    renderer = SegmentRenderer(number, members, {v for v in block.yields if v in made},
                               gen.dim_code, gen.resolve, sizes)
    _, steps, summary = renderer.steps(environment)
    return _Block(block, renderer, steps, summary, lines)


def _running(renderer, block_pointer, args, yields, own, **numbers) -> list:
    """The template's dicts of the running values whose block arguments are ``args`` and
    whose next values are ``yields`` (``own``: the block's buffer of each yield it writes and
    yields nowhere else), with the argument numbers ``numbers`` (name -> list)."""
    return [dict(number=j, bytes=_bytes(renderer, arg), source=block_pointer(source),
                 out=own.get(source), **{name: at[j] for name, at in numbers.items()})
            for j, (arg, source) in enumerate(zip(args, yields))]


def _own_buffers(block, running_yields) -> dict:
    """The block's buffer number of each of ``running_yields`` that it writes and yields
    once only."""
    out = {v: j for j, v in enumerate(block.renderer.outputs)}
    yielded = [id(v) for v in block.block.yields]
    return {v: out[v] for v in running_yields if v in out and yielded.count(id(v)) == 1}


def _entry(gen, code, blocks) -> None:
    """Add the loop entry ``code`` and its ``blocks``' steps to the program's C."""
    steps = [step for block in blocks for step in block.steps]
    for step in steps:
        gen.c_steps.setdefault(step.name, step)
    gen.segments.append(Piece(code, calls=tuple(step.name for step in steps)))


def _call(gen, number, note, blocks, outer, outputs, shapes, sizes, length) -> list:
    """The host lines of the loop entry's call: its blocks' constants, the results'
    allocations (``shapes``), the call (``length``: the trip count's expression, None for a
    while loop)."""
    lines = [line for block in blocks for line in block.lines]
    lines.append(f"# C segment {number}: {note}, a loop in C")
    for result, shape in zip(outputs, shapes):
        lines.append(f"{gen.namer.value(result)} = np.empty({shape_code(shape)}, "
                     f"{dtype_code(result.dtype)})")
    arguments = [gen.expr(v) for v in outer] + [gen.namer.value(v) for v in outputs] + \
        [gen.dim_code(d) for d in sizes.dims] + ([length] if length is not None else [])
    lines.append(gen.entry_call(f"s{number}", arguments))
    return lines


def _leading(gen, xs) -> str:
    """The host's expression of the trip count of a loop over ``xs``: its leading dim."""
    dim = xs.dims[0]
    return gen.dim_code(dim) if gen.dim_names.known(dim) else f"{gen.expr(xs)}.shape[0]"


def _arguments(outer, outputs) -> list:
    """The entry's arrays for ``entry.acquire``: ``outer`` read, ``outputs`` written."""
    first_output = len(outer)
    return [dict(writable=int(k >= first_output), type=c_type(v.dtype), ndim=v.ndim,
                 what=value_label(v)) for k, v in enumerate(outer + outputs)]


def _pointers(at, running, sliced, out) -> callable:
    """``pointer(value)``: the C pointer a block reads ``value`` at (``running``: block
    argument -> C buffer; ``sliced``: block argument -> (argument of its stack, its row's
    bytes); ``out``: the block's own buffers; else an argument of the entry, ``at``)."""
    def pointer(value) -> str:
        if value in out:
            return out[value]
        if value in running:
            return running[value]
        if value in sliced:
            k, row = sliced[value]
            return f"(char *)sg_b[{k}].buf + sg_step * {row}"
        return f"sg_b[{at[value]}].buf"
    return pointer


def native_scan(gen, op, environment) -> list | None:
    """The host lines running scan ``op`` as one C loop, or None when it is not one that C
    runs whole (see the module's docstring); ``gen``: the C host generator."""
    layout = loop_layout(op)
    if op.opdef is not scan_p or layout.counted or \
            any(v in gen.overwritten for v in op.results):
        return None
    number, sizes = len(gen.segments), EntrySizes()
    body = _segment(gen, layout.body, number, sizes, environment)
    if body is None:
        return None
    outer = list(dict.fromkeys(list(layout.inits) + list(layout.xs) + body.reads()))
    outputs = list(layout.finals) + list(layout.stacked_results)
    at = {v: k for k, v in enumerate(outer)}
    renderer = body.renderer
    pointer = _pointers(
        at, {arg: f"sg_cur[{j}]" for j, arg in enumerate(layout.carry_args)},
        {arg: (at[x], f"sg_row{j}") for j, (arg, x) in enumerate(zip(layout.x_args, layout.xs))},
        {v: f"sg_out[{j}]" for j, v in enumerate(renderer.outputs)})
    first_output = len(outer)
    context = body.context(pointer)
    code = environment.get_template("c/loop.c.j2").render(
        number=number, summary=f"{op.name} of {body.summary}", args=_arguments(outer, outputs),
        checks=sizes.checks(outer), xs=[_bytes(renderer, arg) for arg in layout.x_args],
        carries=_running(renderer, pointer, layout.carry_args, layout.carry_yields,
                         _own_buffers(body, layout.carry_yields),
                         init=[at[v] for v in layout.inits],
                         final=[first_output + j for j in range(len(layout.finals))]),
        stacks=[dict(arg=first_output + len(layout.finals) + j, bytes=_bytes(renderer, v),
                     source=pointer(v)) for j, v in enumerate(layout.stacked_yields)],
        body=context["pointers"], outs=context["outs"], steps=context["steps"],
        temporaries=context["temporaries"],
        sizes=len(sizes.dims), reverse=layout.reverse, flush=gen.options.flush_denormals,
        native=renderer.native, labels=renderer.labels)
    _entry(gen, code, [body])
    if layout.length is not None:
        length = str(layout.length)
    elif layout.has_length_input:
        length = f"int({gen.expr(layout.length_input)})"
    else:
        length = _leading(gen, layout.xs[0])
    shapes = [gen.shape_of(arg) for arg in layout.carry_args] + \
        [[length] + gen.shape_of(value) for value in layout.stacked_yields]
    return _call(gen, number, f"{op.name} of {body.summary}", [body], outer, outputs, shapes,
                 sizes, length)


def native_reverse_loop(gen, op, environment) -> list | None:
    """The host lines running ``reverse_loop`` ``op`` as one C entry, or None when it is not
    one that C runs whole (see the module's docstring)."""
    if op.opdef is not reverse_loop_p or any(v in gen.overwritten for v in op.results):
        return None
    carries, xs_count, cts, ycts = reverse_loop_counts(op.attrs)
    inputs = list(op.inputs)
    inits, xs = inputs[:carries], inputs[carries:carries + xs_count]
    ct_inits = inputs[carries + xs_count:carries + xs_count + cts]
    y_stacks = inputs[carries + xs_count + cts:carries + xs_count + cts + ycts]
    number, sizes = len(gen.segments), EntrySizes()
    advance_block, reverse_block = op.blocks
    advance = _segment(gen, advance_block, number, sizes, environment)
    backward = _segment(gen, reverse_block, number, sizes, environment) \
        if advance is not None else None
    if backward is None:
        return None
    outer = list(dict.fromkeys(inits + xs + ct_inits + y_stacks + advance.reads() +
                               backward.reads()))
    outputs = list(op.results)
    at = {v: k for k, v in enumerate(outer)}
    first_output = len(outer)
    carry_args = advance_block.args[:carries]
    ct_args = reverse_block.args[:cts]
    y_args = reverse_block.args[cts:cts + ycts]
    reverse_carries = reverse_block.args[cts + ycts:cts + ycts + carries]
    reverse_xs = reverse_block.args[cts + ycts + carries:]
    x_rows = {arg: (at[x], f"sg_row{j}") for j, (arg, x) in
              enumerate(zip(advance_block.args[carries:], xs))}
    advance_pointer = _pointers(
        at, {arg: f"sg_cur[{j}]" for j, arg in enumerate(carry_args)}, x_rows,
        {v: f"sg_aout[{j}]" for j, v in enumerate(advance.renderer.outputs)})
    backward_pointer = _pointers(
        at, {**{arg: f"sg_ct[{j}]" for j, arg in enumerate(ct_args)},
             **{arg: f"sg_cur[{j}]" for j, arg in enumerate(reverse_carries)}},
        {**{arg: (at[y], f"sg_yrow{j}") for j, (arg, y) in enumerate(zip(y_args, y_stacks))},
         **{arg: (at[x], f"sg_row{j}") for j, (arg, x) in enumerate(zip(reverse_xs, xs))}},
        {v: f"sg_bout[{j}]" for j, v in enumerate(backward.renderer.outputs)})
    kind, param = op.attrs["plan"]
    renderer = backward.renderer
    stacked = reverse_block.yields[cts:]
    summary = f"{op.name} of {advance.summary}; {backward.summary}"
    code = environment.get_template("c/reverse_loop.c.j2").render(
        number=number, summary=summary, args=_arguments(outer, outputs),
        checks=sizes.checks(outer),
        xs=[_bytes(renderer, arg) for arg in advance_block.args[carries:]],
        ys=[_bytes(renderer, arg) for arg in y_args],
        carries=_running(advance.renderer, advance_pointer, carry_args,
                         advance_block.yields[:carries],
                         _own_buffers(advance, advance_block.yields[:carries]),
                         init=[at[v] for v in inits]),
        cts=_running(renderer, backward_pointer, ct_args, reverse_block.yields[:cts],
                     _own_buffers(backward, reverse_block.yields[:cts]),
                     init=[at[v] for v in ct_inits],
                     final=[first_output + j for j in range(cts)]),
        stacks=[dict(arg=first_output + cts + j, bytes=_bytes(renderer, v),
                     source=backward_pointer(v)) for j, v in enumerate(stacked)],
        advance=advance.context(advance_pointer), reverse=backward.context(backward_pointer),
        kind=PLAN_KINDS[kind], param=int(param or 0), sizes=len(sizes.dims),
        reverse_steps=op.attrs["reverse"], flush=gen.options.flush_denormals,
        native=advance.renderer.native or renderer.native,
        labels=advance.renderer.labels or renderer.labels)
    _entry(gen, code, [advance, backward])
    if op.attrs["length"] is not None:
        length = str(op.attrs["length"])
    elif xs:
        length = _leading(gen, xs[0])
    else:
        length = f"int({gen.expr(inputs[carries + xs_count + cts + ycts])})"
    shapes = [gen.shape_of(arg) for arg in ct_args] + \
        [[length] + gen.shape_of(value) for value in stacked]
    return _call(gen, number, summary, [advance, backward], outer, outputs, shapes, sizes,
                 length)


def native_while(gen, op, environment) -> list | None:
    """The host lines running ``while_loop`` ``op`` as one C entry, or None when it is not one
    that C runs whole (see the module's docstring; it stacks no per-step value)."""
    layout = loop_layout(op)
    if op.opdef is not while_p or layout.stacked_yields or \
            any(v in gen.overwritten for v in op.results):
        return None
    cond_block, body_block = op.blocks
    number, sizes = len(gen.segments), EntrySizes()
    cond = _segment(gen, cond_block, number, sizes, environment)
    body = _segment(gen, body_block, number, sizes, environment) if cond is not None else None
    if body is None:
        return None
    outer = list(dict.fromkeys(list(layout.inits) + cond.reads() + body.reads()))
    outputs = list(layout.finals) + ([layout.trip_count] if layout.counted else [])
    at = {v: k for k, v in enumerate(outer)}
    first_output = len(outer)
    running = {arg: f"sg_cur[{j}]" for args in (cond_block.args, body_block.args)
               for j, arg in enumerate(args)}
    cond_pointer = _pointers(at, running, {},
                             {v: f"sg_cond_out[{j}]" for j, v in enumerate(cond.renderer.outputs)})
    body_pointer = _pointers(at, running, {},
                             {v: f"sg_out[{j}]" for j, v in enumerate(body.renderer.outputs)})
    renderer = body.renderer
    summary = f"{op.name} of {cond.summary}; {body.summary}"
    code = environment.get_template("c/while.c.j2").render(
        number=number, summary=summary, args=_arguments(outer, outputs),
        checks=sizes.checks(outer), pred=cond_pointer(cond_block.yields[0]),
        carries=_running(renderer, body_pointer, layout.carry_args, layout.carry_yields,
                         _own_buffers(body, layout.carry_yields),
                         init=[at[v] for v in layout.inits],
                         final=[first_output + j for j in range(len(layout.finals))]),
        cond=cond.context(cond_pointer), body=body.context(body_pointer),
        counted=first_output + len(layout.finals) if layout.counted else None,
        sizes=len(sizes.dims), flush=gen.options.flush_denormals,
        native=cond.renderer.native or renderer.native,
        labels=cond.renderer.labels or renderer.labels)
    _entry(gen, code, [cond, body])
    shapes = [gen.shape_of(arg) for arg in layout.carry_args] + \
        ([[]] if layout.counted else [])
    return _call(gen, number, summary, [cond, body], outer, outputs, shapes, sizes, None)
