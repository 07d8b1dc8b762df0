"""Control flow in an exported library: ``cond``, ``scan``, ``while_loop`` and ``reverse_loop``
as C branches and loops over their blocks' C code (``fori_loop`` is one of the loops).

A block's ops are lowered by the generator's own rules (:meth:`LibraryGenerator.lower_ops`),
into lines nested in the loop or branch; the values they compute live in buffers allocated
at each step and freed after their last use in the block. Rendered from
``codegen_templates/c/library/region.c.j2``:

- a loop's carries are buffers of the entry (one per carry, the body's arguments), set to
  the initial values before the loop. At the end of a step each takes its next value: a
  buffer the step allocated is moved into the carry (the old one freed); any other value
  (a capture, an argument, a value yielded twice) is copied into a spare buffer first, and
  the two swapped once every next value is read (so carries may trade places). After the
  loop the carries are the op's final results;
- a scan's per-step outputs are written into arrays of ``length`` rows allocated before the
  loop (the length: the attribute, the leading dim of its ``xs`` or its length input, a
  negative one running no step); the ``xs`` are read in place, a step's slice at
  ``xs + t * row``; ``reverse`` runs ``t`` from the last step down;
- a while_loop's per-step outputs (the residuals its gradient records) go into arrays that
  double when full (16 rows first); the trip count is a local of the entry, which the
  stacked outputs' leading dim and a ``counted`` loop's trip count result read after it;
- a ``cond`` is ``if (pred) {...} else {...}``: each branch moves or copies what it yields
  into the op's results;
- a ``reverse_loop`` (the backward of a loop checkpointed by a run-time schedule:
  ``("binomial", s)``, or ``k``/``"sqrt"`` on a while loop) runs the actions of its schedule,
  computed in C by ``sg_reverse_plan`` (``c/library/reverse_plan.c.j2``, the same actions as
  :func:`~symgrad.ops.checkpoint._sg_reverse_plan`), storing and restoring its carries in
  slots.

Emitted (an RNN's backward scan, abridged)::

    sg_n3 = sg_s0;
    v27 = (double *)malloc((size_t)(sg_s1) * (size_t)(5) * sizeof(double) + 1);
    ...
    memcpy(v27, v17, (size_t)(sg_s1) * (size_t)(5) * sizeof(double));
    for (int64_t sg_i3 = 0; sg_i3 < sg_n3; sg_i3++) {
        const int64_t sg_t3 = sg_n3 - 1 - sg_i3;
        /* fused group 2 (4 ops) -> %38 */
        ... (reads v27, (v21 + sg_t3 * ((size_t)(sg_s1) * (size_t)(5))), ...)
        /* the next carries */
        free(v27);
        v27 = v43;
        v43 = NULL;
        ...
    }
"""
from __future__ import annotations

from ....ir.printer import format_op_head
from ....ops.control_flow import cond_p, loop_layout, scan_p, while_p
from ....ops.reverse_loop import reverse_loop_counts, reverse_loop_p
from ..ctype import c_comment, c_type
from ..loops import PLAN_KINDS
from .dims import c_string


INITIAL_ROWS = 16    # rows first allocated for a while loop's stacked values

def indented(lines, depth=1) -> list:
    """``lines`` (each possibly several lines of C) indented ``depth`` more levels."""
    pad = "    " * depth
    return ["\n".join(pad + part if part else part for part in line.split("\n"))
            for line in lines]


class _Block:
    """A block lowered into C lines, with the test of which values its step owns."""

    def __init__(self, gen, block):
        self.gen = gen
        self.block = block
        self.defined = {v for op in block.ops for v in op.results}
        self.lines = gen.lower_ops(block.ops, {gen.origin(v) for v in block.yields})

    def buffer(self, value):
        """The C variable of the buffer the step allocated for ``value`` (through aliases),
        or None when ``value`` lives outside the step (a capture, an argument)."""
        origin = self.gen.origin(value)
        return self.gen.owned.get(origin) if origin in self.defined else None

    def free_yields(self, moved=()) -> list:
        """Free what the step allocated for its yields, but the ``moved`` buffers."""
        buffers = dict.fromkeys(b for b in map(self.buffer, self.block.yields)
                                if b and b not in moved)
        return [f"    free({b});\n    {b} = NULL;" for b in buffers]


def _count(gen, value, skip=0) -> str:
    return " * ".join(f"(size_t)({d})" for d in gen.dims.dims_of(value)[skip:]) or "1"


def _copy(target, source, count, ctype) -> str:
    return f"    memcpy({target}, {source}, {count} * sizeof({ctype}));"


def _results(gen, values) -> list:
    """Declare an owned buffer per result of a region op (``v<id>``)."""
    names = []
    for value in values:
        name = f"v{value.id}"
        gen.declare(name, c_type(value.dtype))
        gen.pointer[value] = gen.owned[value] = name
        names.append(name)
    return names


def _hand_over(gen, step, targets, yields, spares) -> list:
    """The C lines giving each carry buffer in ``targets`` its next value from ``yields``:
    moved from the buffer the step allocated for it where ``spares`` has None, else copied
    into the spare buffer ``spares`` names and swapped in once every next value has been
    read; then the step's other yield buffers freed."""
    copies, swaps, moved = [], [], set()
    for target, value, spare in zip(targets, yields, spares):
        if spare is None:
            buffer = step.buffer(value)
            moved.add(buffer)
            swaps.append(f"    free({target});\n    {target} = {buffer};\n    {buffer} = NULL;")
            continue
        ctype = c_type(value.dtype)
        copies.append(_copy(spare, gen.read(value), _count(gen, value), ctype))
        swaps.append(f"    {{ {ctype} *sg_old = {target}; {target} = {spare}; "
                     f"{spare} = sg_old; }}")
    return ["    /* the next carries */"] * bool(targets) + copies + swaps + \
        step.free_yields(moved)


def _carries(gen, args, inits) -> tuple:
    """Declare the carry buffers of a loop (``v<arg id>``, the body's arguments); returns
    ``(names, lines setting them to the initial values before the loop)``."""
    names, lines = [], []
    for k, (arg, init) in enumerate(zip(args, inits)):
        ctype, count = c_type(init.dtype), _count(gen, init)
        name = f"v{arg.id}"
        gen.declare(name, ctype)
        gen.pointer[arg] = name
        names.append(name)
        lines += gen.malloc_lines(name, ctype, count, f"carry {k} of a loop")
        lines.append(_copy(name, gen.read(init), count, ctype))
    return names, lines


def _spares(gen, step, names, yields, inits) -> tuple:
    """``(spares, allocations before the loop, frees after it)``: a spare buffer
    (``sg_spare<arg>``) for each carry the step copies its next value into (None for one it
    moves: see :func:`_hand_over`)."""
    spares, before, after, moved = [], [], [], set()
    for k, (name, value) in enumerate(zip(names, yields)):
        buffer = step.buffer(value)
        if buffer is not None and buffer not in moved:
            moved.add(buffer)
            spares.append(None)
            continue
        spare, ctype = f"sg_spare{name[1:]}", c_type(inits[k].dtype)
        gen.declare(spare, ctype)
        spares.append(spare)
        before += gen.malloc_lines(spare, ctype, _count(gen, inits[k]), f"carry {k} of a loop")
        after.append(f"    free({spare});\n    {spare} = NULL;")
    return spares, before, after


def _finals(gen, layout, names) -> None:
    """The loop's final carries are its carry buffers (owned by the entry from here)."""
    for value, name in zip(layout.finals, names):
        gen.pointer[value] = gen.owned[value] = name


def _render(gen, macro, **parts) -> list:
    """The lines of ``macro`` of ``c/library/region.c.j2`` rendered with ``parts``."""
    text = gen.environment.get_template("c/library/region.c.j2").module
    return getattr(text, macro)(**parts).rstrip("\n").split("\n")


def _lower_scan(gen, op) -> None:
    layout = loop_layout(op)
    number = gen.region_number()
    length, step_index = f"sg_n{number}", f"sg_t{number}"
    gen.local(f"{length} = 0")
    if layout.length is not None:
        count = str(layout.length)
    elif layout.has_length_input:
        source = f"{gen.read(layout.length_input)}[0]"
        count = f"{source} > 0 ? (int64_t){source} : 0"
    else:
        count = gen.dims.dim_code(layout.xs[0].dims[0], f"the length of {op.name}")
    for value in layout.stacked_results:
        gen.dims.bind(value.dims[0], length)
    # stacks whose rows have a dim a step defines (a slice of a run-time dim in the body):
    # allocated at the first step, the later ones checked to give rows of the same size
    lazy = {value for value in layout.stacked_results if not _rows_known(gen, value)}
    names, before = _carries(gen, layout.carry_args, layout.inits)
    for arg, xs in zip(layout.x_args, layout.xs):
        gen.pointer[arg] = f"({gen.read(xs)} + {step_index} * ({_count(gen, xs, 1)}))"
    step = _Block(gen, layout.body)
    allocations, writes, after = _stacks(gen, op, layout.stacked_results,
                                         layout.stacked_yields, lazy, length, step_index)
    before += allocations
    spares, allocate, free = _spares(gen, step, names, layout.carry_yields, layout.inits)
    handover = _hand_over(gen, step, names, layout.carry_yields, spares)
    gen.body += _render(gen, "scan", note=c_comment(format_op_head(op)), number=number,
                        length=length, count=count, reverse=layout.reverse,
                        before=before + allocate,
                        body=indented(step.lines + writes + handover), after=free + after)
    _finals(gen, layout, names)


def _stacks(gen, op, values, sources, lazy, length, step_index) -> tuple:
    """``(allocations before the loop, writes at a step, lines after it)`` of the per-step
    outputs ``values`` of a loop of ``length`` steps (their buffers the op's results), step
    ``step_index`` writing ``sources`` into its rows; those of ``lazy`` are allocated at the
    first step (:func:`_first_rows`)."""
    before, writes, after = [], [], []
    for name, value, source in zip(_results(gen, values), values, sources):
        ctype, row = c_type(value.dtype), _count(gen, value, 1)
        if value in lazy:
            writes += _first_rows(gen, op, name, ctype, row, f"({length}) * ({row})",
                                  gen.new_local("sg_width"), f"%{value.id}")
            after += _empty_stack(gen, name, ctype, f"%{value.id}")
        else:
            before += gen.malloc_lines(name, ctype, _count(gen, value), f"%{value.id}")
        writes.append(_copy(f"{name} + {step_index} * ({row})", gen.read(source), row, ctype))
    return before, writes, after


def _rows_known(gen, value) -> bool:
    """Are the dims of the rows of stacked output ``value`` known before its loop runs?"""
    return all(gen.dims.known(dim) for dim in value.dims[1:])


def _first_rows(gen, op, name, ctype, row, rows, width, what) -> list:
    """At a step, the lines allocating stack ``name`` (``rows`` items) at the first step and
    checking that every later one gives a row of the same size (``width``: the entry's
    local holding the first size)."""
    message = c_string(f"{op.name}: the per-step output {what} changes size between steps "
                       f"(")
    return [f"    if ({name} == NULL) {{", f"        {width} = {row};",
            *indented(gen.malloc_lines(name, ctype, rows, what)),
            f"    }} else if ((int64_t)({row}) != {width}) {{",
            f'        sg_status = sg_fail(SG_ERROR_VALUE, "{message}%lld, then %lld '
            f'elements)", (long long){width}, (long long)({row}));',
            "        goto done;", "    }"]


def _empty_stack(gen, name, ctype, what) -> list:
    """After a loop: a stack no step allocated (none ran) as an empty buffer."""
    return [f"    if ({name} == NULL) {{", *indented(gen.malloc_lines(name, ctype, "0", what)),
            "    }"]


def _lower_while(gen, op) -> None:
    layout = loop_layout(op)
    cond_block, body = op.blocks
    number = gen.region_number()
    trips = f"sg_n{number}"
    gen.local(f"{trips} = 0")
    for value in layout.stacked_results:
        gen.dims.bind(value.dims[0], trips)
    lazy = {value for value in layout.stacked_results if not _rows_known(gen, value)}
    names, before = _carries(gen, cond_block.args, layout.inits)
    for arg, cond_arg in zip(body.args, cond_block.args):
        gen.pointer[arg] = gen.pointer[cond_arg]
    test = _Block(gen, cond_block)
    step = _Block(gen, body)
    stacks = _results(gen, layout.stacked_results)
    capacities = []
    for name, value, source in zip(stacks, layout.stacked_results, layout.stacked_yields):
        capacity = f"sg_rows{value.id}"
        gen.local(f"{capacity} = 0")
        what = f"%{value.id}"
        capacities.append(dict(
            name=name, capacity=capacity, ctype=c_type(value.dtype), row=_count(gen, value, 1),
            what=c_string(what), source=gen.read(source),
            width=gen.new_local("sg_width") if value in lazy else None,
            changed=c_string(f"{op.name}: the per-step output {what} changes size between "
                             f"steps (")))
        before.append(f"    {capacity} = 0;")
    spares, allocate, free = _spares(gen, step, names, layout.carry_yields, layout.inits)
    handover = _hand_over(gen, step, names, layout.carry_yields, spares)
    counted = None
    if layout.counted:
        counted = _results(gen, [layout.trip_count])[0]
    gen.body += _render(gen, "while_loop", note=c_comment(format_op_head(op)), number=number,
                        trips=trips, before=before + allocate,
                        test=indented(test.lines), pred=gen.read(cond_block.yields[0]),
                        free_test=indented(test.free_yields(), 2),
                        body=indented(step.lines), stacks=capacities,
                        handover=indented(handover), after=free, first=INITIAL_ROWS,
                        counted=counted,
                        counted_lines=gen.malloc_lines(counted, "int64_t", "1",
                                                       "a trip count") if counted else [])
    _finals(gen, layout, names)


def _lower_cond(gen, op) -> None:
    count = op.attrs["num_operands"]
    operands = op.inputs[1:1 + count]
    results = _results(gen, op.results)
    branches = []
    for block in op.blocks:
        for arg, operand in zip(block.args, operands):
            gen.pointer[arg] = gen.read(operand)
        branch = _Block(gen, block)
        lines = list(branch.lines)
        moved = set()
        for name, value in zip(results, block.yields):
            buffer = branch.buffer(value)
            if buffer is not None and buffer not in moved:
                moved.add(buffer)
                lines.append(f"    {name} = {buffer};\n    {buffer} = NULL;")
                continue
            ctype = c_type(value.dtype)
            lines += gen.malloc_lines(name, ctype, _count(gen, value), f"%{value.id}")
            lines.append(_copy(name, gen.read(value), _count(gen, value), ctype))
        branches.append(indented(lines + branch.free_yields(moved)))
    gen.body += _render(gen, "cond", note=c_comment(format_op_head(op)),
                        pred=gen.read(op.inputs[0]), then=branches[0], otherwise=branches[1])


def _lower_reverse_loop(gen, op) -> None:
    """The backward of a loop checkpointed by a run-time schedule: the schedule's actions
    (``sg_reverse_plan``, ``c/library/reverse_plan.c.j2``: the Python function's, in C) run
    in order, advancing the carries with the ``advance`` block, storing and restoring them in
    slots (one buffer of slots per carry, as many as the schedule uses), and running the
    ``reverse`` block on a step's carries, which moves the cotangents and sums like a scan's
    carries and writes the ``xs`` cotangents into stacks of ``length`` rows."""
    advance, backward = op.blocks
    carries, xs_count, cts, ycts = reverse_loop_counts(op.attrs)
    inputs = list(op.inputs)
    inits, xs = inputs[:carries], inputs[carries:carries + xs_count]
    ct_inits = inputs[carries + xs_count:carries + xs_count + cts]
    y_stacks = inputs[carries + xs_count + cts:carries + xs_count + cts + ycts]
    number = gen.region_number()
    length, step_index = f"sg_n{number}", f"sg_t{number}"
    gen.local(f"{length} = 0")
    if op.attrs["length"] is not None:
        count = str(op.attrs["length"])
    elif xs:
        count = gen.dims.dim_code(xs[0].dims[0], f"the length of {op.name}")
    else:
        source = f"{gen.read(inputs[carries + xs_count + cts + ycts])}[0]"
        count = f"{source} > 0 ? (int64_t){source} : 0"
    stacked_results = op.results[cts:]
    for value in stacked_results:
        gen.dims.bind(value.dims[0], length)
    lazy = {value for value in stacked_results if not _rows_known(gen, value)}
    names, before = _carries(gen, advance.args[:carries], inits)
    ct_names, ct_before = _carries(gen, backward.args[:cts], ct_inits)
    for arg, name in zip(backward.args[cts + ycts:cts + ycts + carries], names):
        gen.pointer[arg] = name
    for args in (advance.args[carries:], backward.args[cts + ycts + carries:]):
        for arg, x in zip(args, xs):
            gen.pointer[arg] = f"({gen.read(x)} + {step_index} * ({_count(gen, x, 1)}))"
    for arg, y in zip(backward.args[cts:cts + ycts], y_stacks):
        gen.pointer[arg] = f"({gen.read(y)} + {step_index} * ({_count(gen, y, 1)}))"
    step = _Block(gen, advance)
    spares, allocate, free = _spares(gen, step, names, advance.yields, inits)
    advance_lines = step.lines + _hand_over(gen, step, names, advance.yields, spares)
    back = _Block(gen, backward)
    ct_spares, ct_allocate, ct_free = _spares(gen, back, ct_names, backward.yields[:cts],
                                              ct_inits)
    allocations, writes, stacks_after = _stacks(gen, op, stacked_results,
                                                backward.yields[cts:], lazy, length,
                                                step_index)
    before += allocations
    back_lines = back.lines + writes + _hand_over(gen, back, ct_names, backward.yields[:cts],
                                                  ct_spares)
    plan, slots = f"sg_plan{number}", gen.new_local("sg_slots")
    gen.declare(plan, "sg_action")
    stored = []
    for name, init in zip(names, inits):
        ctype = c_type(init.dtype)
        gen.declare(f"sg_slots{name[1:]}", ctype)
        stored.append(dict(name=name, slots=f"sg_slots{name[1:]}", count=_count(gen, init),
                           ctype=ctype))
    after = free + ct_free + stacks_after + [f"    free({b});\n    {b} = NULL;" for b in
                                             [plan] + [c["slots"] for c in stored]]
    gen.helper("c/library/reverse_plan.c.j2")
    kind, param = op.attrs["plan"]
    gen.body += _render(gen, "reverse_loop", note=c_comment(format_op_head(op)),
                        number=number, length=length, count=count,
                        reverse=op.attrs["reverse"], kind=PLAN_KINDS[kind], param=int(param),
                        plan=plan, slots=slots, carries=stored,
                        before=before + ct_before + allocate + ct_allocate,
                        advance=indented(advance_lines, 4), backward=indented(back_lines, 3),
                        after=after)
    for value, name in zip(op.results[:cts], ct_names):
        gen.pointer[value] = gen.owned[value] = name
    for name in names:   # the carries: not results of the op
        gen.body.append(f"    free({name});\n    {name} = NULL;")


# the lowering of each region op, by OpDef
_LOWERINGS = {scan_p: _lower_scan, while_p: _lower_while, cond_p: _lower_cond,
              reverse_loop_p: _lower_reverse_loop}


def region_rule(gen, op) -> bool:
    """Lower a region op by its entry of the table above (False for any other op)."""
    lower = _LOWERINGS.get(op.opdef)
    if lower is None:
        return False
    lower(gen, op)
    return True


RULES = (region_rule,)
