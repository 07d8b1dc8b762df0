"""Lowering of the control-flow region ops to Python ``if`` / ``for`` / ``while`` statements.

A region's blocks are lowered in place, with the generator's own statement lowering (their
fused groups become module-level functions like any other), so no interpreter runs at run
time. Block arguments are the loop's variables; a branch's arguments are the names of its
operands. A ``scan`` reads like the loop a person would write, its per-step outputs written
into one stacked array allocated before the loop::

    # %10, %11 = scan(%h0, %x) captures(%w) {num_carry=1, num_xs=1, length=100, reverse=False}
    t3 = h0
    t11 = np.empty((100, 32, 128), np.float32)
    for _t in range(100):
        t4 = x[_t]
        t5 = t3 @ w  # %5 = matmul(%3, %w)
        t7 = _group0(t5, t4)
        t11[_t] = t7
        t3 = t7
    t10 = t3

A ``while_loop`` is ``while True:`` around its condition block (``if not pred: break``) and its
body; Values it stacks (residuals recorded for its gradient) go into an array that doubles
when full and is cut to the trip count after the loop. A ``cond`` is ``if pred: ... else:``.

A region nested :data:`MAX_NESTED_REGIONS` regions deep in the function being written becomes
a module-level function taking the Values the region op reads and returning its results
(``t52 = _region52(t36, x, w)``), in which nesting counts from 0 again.
"""
from __future__ import annotations

from ...ops.checkpoint import _sg_reverse_plan
from ...errors import FeedError
from ...ops.control_flow import cond_p, loop_layout, ragged_stack_message, scan_p, while_p
from ...ops.reverse_loop import reverse_loop_counts, reverse_loop_p
from .functions import indented
from ..dim_code import shape_code
from .literals import dtype_code
from .lowering import register_lowering, standin

INITIAL_CAPACITY = 16    # rows first allocated for a while loop's stacked values
# Regions nested in one generated function at most: a region nested deeper is written as a
# module-level function of its own, so indentation and nested loops stay within what Python
# compiles (100 indentation levels, 20 nested loops) however deeply a program nests them
MAX_NESTED_REGIONS = 8


def _assign(targets, sources) -> list[str]:
    """``a, b = c, d`` (one parallel assignment, so carries may swap), without ``a = a``."""
    pairs = [(t, s) for t, s in zip(targets, sources) if t != s]
    if not pairs:
        return []
    return [f"{', '.join(t for t, _ in pairs)} = {', '.join(s for _, s in pairs)}"]


def _block(gen, block, extra_reads=()) -> list:
    """The statements of ``block`` (its yields and ``extra_reads`` stay alive to its end),
    indented one level."""
    with gen.nested_region():
        lines = gen.lower_ops(block.ops, list(block.yields) + list(extra_reads))
    return [indented(line) for line in lines] or ["    pass"]


def _contiguous_captures(gen, op) -> list:
    """``t46 = np.ascontiguousarray(t46)`` before a loop, for each Value it captures that an
    axis permutation (a transpose) made: every step then reads a C-contiguous array, which a
    GEMM reads faster than a transposed one (a hoisted ``transpose(W)`` of a reverse scan:
    :mod:`symgrad.passes.hoist`) and a C segment takes without copying it at each step."""
    lines = []
    for value in op.inputs[op.opdef.explicit_inputs(op.attrs):]:
        if value.op is None or value.op.opdef.algebra.permutation is None:
            continue
        name = gen.expr(value)
        if name.isidentifier():
            lines.append(f"{name} = np.ascontiguousarray({name})  # read at every step")
    return lines


def _stack_shape(gen, length, value) -> str | None:
    """Shape source of a stack of ``length`` (a dim expression) Values like ``value``, or None
    when a dim of it is defined inside the loop's body (known once a step ran)."""
    if not all(gen.dim_names.known(d) for d in value.dims):
        return None
    return shape_code([length] + gen.shape_of(value))


def _shape_check(gen, op, value, stack, step, keyword="if") -> list:
    """``keyword`` (``if``/``elif``) and the raise of a step's output ``value`` whose shape
    is not that of the rows of ``stack`` (:func:`~symgrad.ops.control_flow.ragged_stack_message`,
    a ``FeedError``), for a stack whose shape was taken from the first step::

        elif t11.shape[1:] != np.shape(t7):
            raise FeedError('scan (...) stacks its per-step output %%7 ...' % (np.shape(t7),
                            _t, t11.shape[1:]))
    """
    gen.statement_helpers[FeedError.__name__] = standin(FeedError)
    source, rows = gen.expr(value), f"{stack}.shape[1:]"
    message = ascii(ragged_stack_message(op, value))
    return [f"{keyword} {rows} != np.shape({source}):",
            f"    raise FeedError({message} % (np.shape({source}), {step}, {rows}))"]


def _lower_cond(gen, op) -> list:
    count = op.attrs["num_operands"]
    pred = gen.expr(op.inputs[0])
    operands = op.inputs[1:1 + count]
    results = [gen.namer.value(v) for v in op.results]
    lines = []
    for keyword, block in zip((f"if {pred}:", "else:"), op.blocks):
        for arg, operand in zip(block.args, operands):
            gen.alias(arg, operand)
        lines.append(keyword)
        lines.extend(_block(gen, block))
        lines.extend(indented(line) for line in
                     _assign(results, [gen.expr(v) for v in block.yields]))
    return lines


def _lower_scan(gen, op) -> list:
    layout = loop_layout(op)
    body = layout.body
    carry_names = [gen.namer.value(a) for a in layout.carry_args]
    lines = _contiguous_captures(gen, op)
    lines += _assign(carry_names, [gen.expr(v) for v in layout.inits])
    if layout.length is not None:
        length = str(layout.length)
    else:
        length = gen.namer.fresh("_length")
        lines.append(f"{length} = int({gen.expr(layout.length_input)})" if layout.has_length_input
                     else f"{length} = {gen.dim_code(layout.xs[0].dims[0])}")
    step = gen.namer.fresh("_t")
    stacked = list(zip(layout.stacked_results, layout.stacked_yields))
    lazy = []                  # stacks whose shape is known once a step ran
    for result, value in stacked:
        name = gen.namer.value(result)
        shape = _stack_shape(gen, length, value)
        if shape is None:
            lazy.append((name, value))
            lines.append(f"{name} = None")
        else:
            lines.append(f"{name} = np.empty({shape}, {dtype_code(value.dtype)})")
    steps = f"range({length} - 1, -1, -1)" if layout.reverse else f"range({length})"
    lines.append(f"for {step} in {steps}:")
    for arg, xs in zip(layout.x_args, layout.xs):
        lines.append(f"    {gen.namer.value(arg)} = {gen.expr(xs)}[{step}]")
    lines.extend(_block(gen, body))
    for result, value in stacked:
        name, source = gen.namer.value(result), gen.expr(value)
        if any(v is value for _, v in lazy):
            lines.append(f"    if {name} is None:")
            lines.append(f"        {name} = np.empty(({length},) + np.shape({source}), "
                         f"{dtype_code(value.dtype)})")
            lines.extend(indented(line) for line in
                         _shape_check(gen, op, value, name, step, "elif"))
        lines.append(f"    {name}[{step}] = {source}")
    lines.extend(indented(line) for line in
                 _assign(carry_names, [gen.expr(v) for v in layout.carry_yields]))
    for name, value in lazy:   # no step ran: an empty stack
        empty = shape_code(["0"] + [gen.dim_code(d) if gen.dim_names.known(d) else "0"
                                    for d in value.dims])
        lines.append(f"if {name} is None:")
        lines.append(f"    {name} = np.empty({empty}, {dtype_code(value.dtype)})")
    lines.extend(_assign([gen.namer.value(v) for v in layout.finals], carry_names))
    return lines


def _lower_while(gen, op) -> list:
    layout = loop_layout(op)
    cond_block, body = op.blocks
    names = [gen.namer.value(a) for a in cond_block.args]
    for arg, cond_arg in zip(body.args, cond_block.args):
        gen.alias(arg, cond_arg)
    lines = _contiguous_captures(gen, op)
    lines += _assign(names, [gen.expr(v) for v in layout.inits])
    stacked = list(zip(layout.stacked_results, layout.stacked_yields))
    counter = None
    if stacked or layout.counted:
        counter = gen.namer.fresh("_trips")
        lines.append(f"{counter} = 0")
    buffers = [gen.namer.fresh(f"_{gen.namer.value(result)}_rows") for result, _ in stacked]
    lines.extend(f"{buffer} = None" for buffer in buffers)
    lines.append("while True:")
    lines.extend(_block(gen, cond_block))
    lines.append(f"    if not {gen.expr(cond_block.yields[0])}:")
    lines.append("        break")
    lines.extend(_block(gen, body))
    for buffer, (_, value) in zip(buffers, stacked):
        source, dtype = gen.expr(value), dtype_code(value.dtype)
        lines += [f"    if {buffer} is None:",
                  f"        {buffer} = np.empty(({INITIAL_CAPACITY},) + np.shape({source}), "
                  f"{dtype})"]
        if _stack_shape(gen, "0", value) is None:    # dims known once a step ran
            lines.extend(indented(line) for line in
                         _shape_check(gen, op, value, buffer, counter, "elif"))
        lines += [f"    elif {counter} == len({buffer}):  # full: double it",
                  f"        {buffer} = np.concatenate([{buffer}, np.empty_like({buffer})])",
                  f"    {buffer}[{counter}] = {source}"]
    lines.extend(indented(line) for line in
                 _assign(names, [gen.expr(v) for v in layout.carry_yields]))
    if counter is not None:
        lines.append(f"    {counter} += 1")
    lines.extend(_assign([gen.namer.value(v) for v in layout.finals], names))
    for buffer, (result, value) in zip(buffers, stacked):
        empty = shape_code(["0"] + [gen.dim_code(d) if gen.dim_names.known(d) else "0"
                                    for d in value.dims])
        lines.append(f"{gen.namer.value(result)} = {buffer}[:{counter}] if {buffer} is not None "
                     f"else np.empty({empty}, {dtype_code(value.dtype)})")
    if layout.counted:
        lines.append(f"{gen.namer.value(layout.trip_count)} = np.int64({counter})")
    return lines


def _bounded(lower):
    """The statements rule ``lower`` of a region op, which writes the op as a call of a
    function of its own when it is nested :data:`MAX_NESTED_REGIONS` regions deep."""
    def statements(gen, op) -> list:
        if gen.region_depth >= MAX_NESTED_REGIONS:
            return gen.region_function(op, lower)
        return lower(gen, op)
    return statements


register_lowering(cond_p, statements=_bounded(_lower_cond))
register_lowering(scan_p, statements=_bounded(_lower_scan))
register_lowering(while_p, statements=_bounded(_lower_while))


def _lower_reverse_loop(gen, op) -> list:
    """A ``reverse_loop`` (:mod:`symgrad.ops.reverse_loop`) as a loop over the actions of its
    schedule, the helper ``_sg_reverse_plan`` (copied into the module)::

        h = h0                                   # the carries: the advance block's arguments
        g, acc = g_init, acc_init                # the reverse block's carried arguments
        _slots = {}
        for _action, _a, _b in _sg_reverse_plan(T, 'binomial', 8):
            if _action == 0:                     # advance from step _a to step _b
                for _t in range(_a, _b):
                    x = xs[_t]
                    ...advance block...
                    h = h_next
            elif _action == 1:
                _slots[_a] = (h,)
            elif _action == 2:
                (h,) = _slots[_a]
            else:                                # reverse step _a
                ...reverse block...
                g, acc = g_prev, acc_prev
                dxs[_a] = dx
    """
    advance, reverse = op.blocks
    carries, xs_count, cts, ycts = reverse_loop_counts(op.attrs)
    inputs = list(op.inputs)
    inits, xs = inputs[:carries], inputs[carries:carries + xs_count]
    ct_inits = inputs[carries + xs_count:carries + xs_count + cts]
    y_stacks = inputs[carries + xs_count + cts:carries + xs_count + cts + ycts]
    carry_names = [gen.namer.value(a) for a in advance.args[:carries]]
    for arg, name_arg in zip(reverse.args[cts + ycts:cts + ycts + carries],
                             advance.args[:carries]):
        gen.alias(arg, name_arg)
    ct_names = [gen.namer.value(a) for a in reverse.args[:cts]]
    lines = _contiguous_captures(gen, op)
    lines += _assign(carry_names, [gen.expr(v) for v in inits])
    lines += _assign(ct_names, [gen.expr(v) for v in ct_inits])
    length = gen.namer.fresh("_length")
    if op.attrs["length"] is not None:
        lines.append(f"{length} = {op.attrs['length']}")
    elif xs:
        lines.append(f"{length} = {gen.expr(xs[0])}.shape[0]")
    else:
        lines.append(f"{length} = int({gen.expr(inputs[carries + xs_count + cts + ycts])})")
    stacked = list(zip(op.results[cts:], reverse.yields[cts:]))
    for result, _ in stacked:
        lines.append(f"{gen.namer.value(result)} = None")
    slots, action, a, b, step, t = (gen.namer.fresh(n) for n in
                                    ("_slots", "_action", "_a", "_b", "_i", "_t"))
    plan = ", ".join(repr(p) for p in op.attrs["plan"])
    carry_tuple = f"({', '.join(carry_names)},)"
    index = f"{length} - 1 - {{}}" if op.attrs["reverse"] else "{}"
    lines += [f"{slots} = {{}}",
              f"for {action}, {a}, {b} in _sg_reverse_plan({length}, {plan}):",
              f"    if {action} == 0:",
              f"        for {step} in range({a}, {b}):",
              f"            {t} = {index.format(step)}"]
    for arg, x in zip(advance.args[carries:], xs):
        lines.append(f"            {gen.namer.value(arg)} = {gen.expr(x)}[{t}]")
    lines.extend(indented(indented(line)) for line in _block(gen, advance))
    lines.extend(indented(indented(indented(line))) for line in
                 _assign(carry_names, [gen.expr(v) for v in advance.yields]))
    lines += [f"    elif {action} == 1:",
              f"        {slots}[{a}] = {carry_tuple}",
              f"    elif {action} == 2:",
              f"        {carry_tuple} = {slots}[{a}]",
              "    else:",
              f"        {t} = {index.format(a)}"]
    for arg, y in zip(reverse.args[cts:cts + ycts], y_stacks):
        lines.append(f"        {gen.namer.value(arg)} = {gen.expr(y)}[{t}]")
    for arg, x in zip(reverse.args[cts + ycts + carries:], xs):
        lines.append(f"        {gen.namer.value(arg)} = {gen.expr(x)}[{t}]")
    lines.extend(indented(line) for line in _block(gen, reverse))
    for result, value in stacked:
        name, source = gen.namer.value(result), gen.expr(value)
        lines += [f"        if {name} is None:",
                  f"            {name} = np.empty(({length},) + np.shape({source}), "
                  f"{dtype_code(value.dtype)})",
                  f"        {name}[{t}] = {source}"]
    lines.extend(indented(indented(line)) for line in
                 _assign(ct_names, [gen.expr(v) for v in reverse.yields[:cts]]))
    for result, value in stacked:   # no step ran: an empty stack
        name = gen.namer.value(result)
        empty = shape_code(["0"] + [gen.dim_code(d) if gen.dim_names.known(d) else "0"
                                    for d in value.dims])
        lines += [f"if {name} is None:",
                  f"    {name} = np.empty({empty}, {dtype_code(value.dtype)})"]
    lines.extend(_assign([gen.namer.value(v) for v in op.results[:cts]], ct_names))
    return lines


register_lowering(reverse_loop_p, statements=_bounded(_lower_reverse_loop),
                  helpers=(_sg_reverse_plan,))
