"""Render the host module and the C source of one program.

Host module contract: it imports NumPy and ctypes only; it defines ``run(_dims=None,
_buffers=None, /, **feeds) -> list of arrays`` (feeds by input name; a parameter not fed takes
``CONSTANTS[name]``; ``_dims``: the binding of the symbolic dims, as for the NumPy module;
``_buffers`` is ignored), the literals
``INPUTS``/``OUTPUTS`` and ``bind_library(path)``, which loads the program's shared library
with ``ctypes.PyDLL`` and binds its entry points; the loader fills ``CONSTANTS`` and calls
``bind_library`` before the first run.

Statements are built by the NumPy backend's generator (naming, provenance comments, memory
plan buffers, ``del`` after last use, control flow as Python ``if``/``for``/``while``), with one
change: each run of a block's loop groups that C can compute (see
:func:`.kernels.lowerable`), native ops (matmul, conv2d, pooling and their gradients:
:mod:`.native_ops`, calling NumPy's BLAS from C) and row ops (the softmax family and
``one_hot``: :mod:`.row_ops`) becomes one call of a C entry point (a *segment*,
:mod:`.segments`); values used only inside a segment never reach Python. A run goes on past
a source or an op reading no data the run computes, only shapes of it (hoisted before the
call), a view its members read (:mod:`.views`: no statement at all), a broadcast they read
(:mod:`.views`: a member of its own) and a host op whose result no later member reads (run
after the call: :meth:`CHostGenerator.lower_ops`). Everything else (data movement, groups with
dtypes C does not compute, native ops of other types) runs as the NumPy backend writes it.
"""
from __future__ import annotations

import dataclasses
import hashlib

import jinja2

from ...ir.graph import users
from ...ir.printer import counted
from ...ops.control_flow import scan_p, while_p
from ...ops.reverse_loop import reverse_loop_p
from ...ops.core import SOURCE
from ...ops.fused import is_fusion
from ...ops.state import assign_p
from ..options import MIN_PARALLEL_CHUNKS
from ..common import comment, library_version, template_environment
from ..dim_code import shape_code
from ..host.generator import DIMS, Generator, helpers_of, uses_extension_dtypes
from ..host.literals import dtype_code
from ..host.state_buffers import BUFFERS, data_reads, may_alias, may_raise
from ..plan import plan_group
from ..plan import structure as group_structure
from ..row_kinds import checks_labels
from .kernels import CHUNK, PARALLEL_MIN, lowerable, pointer_inputs, render_group
from . import array_cache, epilogues
from .blas import SYMBOLS, THREAD_SYMBOLS
from .loops import native_reverse_loop, native_scan, native_while
from .native_ops import (folded, native_dims, native_kind, render_matmul_pair,
                         render_native_function)
from .row_ops import render_row_function, row_dims, row_kind
from .epilogues import EpilogueMember
from .segments import Member, OpMember, PairMember, SegmentRenderer
from .units import Piece, joined, units_of
from .views import absorbed_views, computed_broadcasts

# math functions of the prelude: (name, arity, glibc version (2XX) whose libmvec has it, 0: none)
MATH = [("exp", 1, 222), ("log", 1, 222), ("sin", 1, 222), ("cos", 1, 222), ("pow", 2, 222),
        ("log1p", 1, 235), ("expm1", 1, 235), ("tan", 1, 235), ("tanh", 1, 235),
        ("sinh", 1, 235), ("cosh", 1, 235), ("asin", 1, 235), ("acos", 1, 235),
        ("atan", 1, 235), ("erf", 1, 235), ("atan2", 2, 235), ("sqrt", 1, 0), ("fabs", 1, 0),
        ("floor", 1, 0), ("ceil", 1, 0), ("rint", 1, 0)]
# float math functions the prelude defines itself (inline, so that loops vectorize them)
OWN_FLOAT_MATH = {"tanh": "sg_tanhf"}
UNIT = "@UNIT@"
# loop ops the C host runs as loops in C where their blocks allow (.loops): op -> lowering
NATIVE_LOOPS = {scan_p: native_scan, while_p: native_while,
                reverse_loop_p: native_reverse_loop}


def environment() -> jinja2.Environment:
    return template_environment(".")


def render_prelude(runtime=True, library=False) -> str:
    """The C prelude every translation unit starts with (``c/prelude.h.j2``); ``runtime``:
    with the runtime's definitions (the one unit of a program that holds them), else its
    declarations only; ``library``: for an exported C library (:mod:`.library`), without the
    CPython buffer calls."""
    return environment().get_template("c/prelude.h.j2").render(
        math=MATH, own_float=OWN_FLOAT_MATH, parallel_min=PARALLEL_MIN, chunk=CHUNK,
        runtime=runtime, library=library, cache_min=array_cache.MIN_BYTES)


@dataclasses.dataclass
class GeneratedProgram:
    source: str              # the host module
    c_source: str            # the program's C, readable (its units joined: units.joined)
    c_units: list            # its translation units (one for most programs: see .units)
    constants: dict          # name -> array, for the module's CONSTANTS
    segments: int            # C entry points
    functions: int           # distinct C group functions
    references: dict         # name -> HelperReference the loader binds into the host
    caches_arrays: bool      # whether calls allocate through the library's array cache


@dataclasses.dataclass
class BlockKinds:
    """What C makes of each op of a block (:meth:`CHostGenerator.classify`): per op, its loop
    group's plan, its native kind, its row kind and whether it is a segment member; the views
    the segments absorb (op -> read transposed); the block's readers of each value and the
    values read after it."""

    plans: list
    natives: list
    rows: list
    members: list
    absorbed: dict
    readers: dict
    read_after: set


class CHostGenerator(Generator):
    """The NumPy generator, with C segments for the runs of loop groups and native ops C
    computes."""


    def __init__(self, program, fetches, options):
        super().__init__(program, fetches, options)
        self.c_functions: dict = {}     # name -> Piece: group and native functions, in order
        self.c_steps: dict = {}         # name -> Piece: the segments' steps, in order
        self.by_structure: dict = {}    # group structure -> its function's Piece
        self.segments: list = []        # rendered entry points (Pieces)
        self.views: dict = {}           # absorbed views' results -> their operands (.views)
        self.transposed: set = set()    # those of them that are transposes
        self.entries: list = []         # (Python name, C symbol) per segment
        self.numpy_ops: list = []       # ops the host computes with NumPy

    def c_plan(self, op):
        """The plan of ``op`` when it is a loop group that C computes, else None."""
        if op.opdef.category == SOURCE:
            return None
        plan = plan_group(op, self.options.accumulate_float64)
        return plan if plan is not None and lowerable(plan) else None

    def lower_ops(self, ops, reads_after=()) -> list:
        """As the NumPy generator, with each run of members (C loop groups, native ops and row
        ops) of the block lowered as one segment call, in place of its first member. Between
        its members, a source, or an op that reads no data the run computes
        (:meth:`reads_before`), is hoisted before the call, a view the segments absorb
        (:func:`.views.absorbed_views`) makes no statement, a broadcast read by members only
        is a member (:func:`.views.computed_broadcasts`), and another op that :meth:`defers`
        runs after the call, unless a later member reads what it computes (the segment then
        ends before that member); any other op ends the segment."""
        kinds = self.classify(ops, reads_after)
        plans, natives, rows, members = kinds.plans, kinds.natives, kinds.rows, kinds.members
        readers, read_after, absorbed = kinds.readers, kinds.read_after, kinds.absorbed
        statements = [None] * len(ops)
        run: list = []
        made: set = set()       # the values the run's members compute
        deferred: set = set()   # the values computed by the ops deferred past the run
        unsafe = self.state_views(ops)

        def flush():
            if run:
                statements[run[0]] = self.segment([ops[k] for k in run],
                                                  [plans[k] for k in run],
                                                  [natives[k] for k in run],
                                                  [rows[k] for k in run], readers,
                                                  read_after, statements[run[0]])
                run.clear()
                made.clear()
                deferred.clear()

        for index, op in enumerate(ops):
            if op in absorbed:
                statements[index] = []
                continue
            if members[index]:
                if any(self.resolve(v) in deferred for v in op.inputs):
                    flush()
                statements[index] = []   # the run's first statement list gets the call
                run.append(index)
                made.update(op.results)
                continue
            self.numpy_ops.append(op)
            lines = self.lower_op(op)
            dims = self.defined_dims(op)
            if run and (op.opdef.category == SOURCE or
                        self.reads_before(op, made | deferred)):   # hoisted before it
                statements[run[0]].extend([self.text.line(op)] + lines + dims if lines else dims)
                statements[index] = []
                continue
            if run and not dims and self.defers(op, unsafe):
                deferred.update(op.results)
            else:
                flush()
            lines = lines + dims
            statements[index] = ([self.text.line(op)] if lines else []) + lines
        flush()
        return self.with_deletes(ops, statements, reads_after)

    def classify(self, ops, reads_after) -> "BlockKinds":
        """What C makes of each op of a block (``reads_after``: the values read after it):
        the ops that are members of a segment (a loop group's plan, a native op's kind, a row
        op's kind, a computed broadcast) and the views the segments absorb (their results
        recorded as views of their operands)."""
        plans = [self.c_plan(op) for op in ops]
        natives = [native_kind(op, self.scalars) if plan is None else None
                   for op, plan in zip(ops, plans)]
        rows = [row_kind(op, self.scalars) if plan is None and kind is None else None
                for op, plan, kind in zip(ops, plans, natives)]
        readers = users(ops)
        read_after = set(reads_after) | set(self.fetches)
        members = [any(x is not None for x in member) for member in zip(plans, natives, rows)]
        for index, plan in computed_broadcasts(ops, members, readers, read_after).items():
            plans[index], members[index] = plan, True
        absorbed = absorbed_views(ops, members, natives, readers, read_after, self.scalars)
        for op, transposed in absorbed.items():   # its readers read its operand
            self.views[op.results[0]] = op.inputs[0]
            if transposed:
                self.transposed.add(op.results[0])
            self.hidden.add(op.results[0])
        return BlockKinds(plans, natives, rows, members, absorbed, readers, read_after)

    def lower_op(self, op) -> list:
        """As the NumPy generator's, with a loop whose blocks C computes whole run as one loop
        in C (:data:`NATIVE_LOOPS`, :mod:`.loops`)."""
        native_loop = NATIVE_LOOPS.get(op.opdef)
        if native_loop is not None:
            lines = native_loop(self, op, environment())
            if lines is not None:
                return lines
        return super().lower_op(op)

    def reads_before(self, op, computed) -> bool:
        """Does ``op`` read no data of ``computed`` (what the run, or an op deferred past it,
        computes)? It reads the others, and only the shapes of those at its
        ``Algebra.shape_only`` positions, which the host renders from the dims' sizes: so it
        may run before the run's call (a random draw reading the program's step and only the
        shape of an activation)."""
        if op.blocks or not op.inputs:
            return False
        shape_only = op.opdef.algebra.shape_only
        return all(k in shape_only or self.resolve(v) not in computed
                   for k, v in enumerate(op.inputs))

    def defers(self, op, unsafe) -> bool:
        """May ``op``, which the host computes, run after a segment whose members come after
        it in the block? Not a region; where the program overwrites parameters in place, not
        an op that may raise (a failed call leaves the state unchanged) nor one reading a
        value of ``unsafe`` (:meth:`state_views`), whose data a later member may overwrite."""
        if op.blocks:
            return False
        if not self.overwritten:
            return True
        return not may_raise(op) and not any(v in unsafe for v in data_reads(op))

    def state_views(self, ops) -> set:
        """The values of ``ops`` (one block's) that may be, or view, a parameter that a
        segment overwrites in place (:attr:`overwritten`): the parameters, then each result
        of an op that may alias an operand among them (an ``assign`` its value)."""
        unsafe = set(self.overwritten.values())
        if not unsafe:
            return unsafe
        for op in ops:
            if (op.opdef is assign_p or may_alias(op)) and \
                    any(v in unsafe for v in data_reads(op)):
                unsafe.update(op.results)
        return unsafe

    def resolve(self, value):
        """The value whose buffer holds ``value``: the operand of an absorbed view's chain."""
        while value in self.views:
            value = self.views[value]
        return value

    def last_uses(self, ops, reads_after) -> dict:
        """As the NumPy generator's, with the operand of an absorbed view read where the
        view's readers read it (the host never makes the view): from the last op back, so
        that a chain of views reaches its first operand."""
        last = super().last_uses(ops, reads_after)
        for op in reversed(ops):
            for result in op.results:
                operand = self.views.get(result)
                if operand is not None and result in last:
                    last[operand] = max(last.get(operand, -1), last[result])
        return last

    def segment(self, members, plans, kinds, rows, readers, read_after, hoisted) -> list:
        """The host lines calling a new segment of ``members`` (ops: a loop group where
        ``plans`` has its plan, else a native op of kind ``kinds``, else a row op of kind
        ``rows``); ``readers``: the block's
        ops reading each value (:func:`~symgrad.ir.graph.users`), ``read_after``: the values
        read after the block (its yields, the fetches); ``hoisted``: the lines before the
        call."""
        inside = set(members)

        def reading(value):   # its readers of its data, those of an absorbed view for the view
            pending = [value]
            while pending:
                current = pending.pop()
                for reader in readers.get(current, ()):
                    if reader.results and reader.results[0] in self.views:
                        pending.append(reader.results[0])
                    elif _reads_data(reader, current):
                        yield reader

        escaping = {v for op in members for v in op.results
                    if v in read_after or any(r not in inside for r in reading(v))}
        segment_members = self.segment_members(members, plans, kinds, rows, readers, escaping)
        number = len(self.segments)
        renderer = SegmentRenderer(number, segment_members, escaping, self.dim_code,
                                   self.resolve)
        shapes = renderer.host_shapes()
        entry, steps = renderer.render(environment(), self.options.flush_denormals)
        for step in steps:
            self.c_steps.setdefault(step.name, step)
        self.segments.append(Piece(entry, calls=tuple(step.name for step in steps)))
        produced = {v for op in members for v in op.results}   # a fused result too
        self.hidden.update(produced - set(renderer.outputs))
        lines = list(hoisted)
        heading = "; ".join(_member_heading(m) for m in segment_members)
        lines.append(f"# {comment(f'C segment {number}: {heading}')}")
        for value in renderer.outputs:
            slot = self.in_place.get(value)
            if slot is not None:   # the caller's buffer for a parameter's new value
                lines.append(f"{self.namer.value(value)} = {self.slot(slot, value, lines)}")
                continue
            lines.append(f"{self.namer.value(value)} = np.empty({shape_code(shapes[value])}, "
                         f"{dtype_code(value.dtype)})")
        arguments = [self.expr(v) for v in renderer.inputs] + \
            [self.namer.value(v) for v in renderer.outputs] + renderer.size_arguments()
        lines.append(self.entry_call(f"s{number}", arguments))
        return lines

    def segment_members(self, ops, plans, kinds, rows, readers, escaping) -> list:
        """The members of a segment computing ``ops`` (a loop group where ``plans`` has its
        plan, else a native op of kind ``kinds``, else a row op of kind ``rows``; ``readers``:
        the block's ops reading each value, ``escaping``: the values read after the segment):
        a convolution and the loop group alone reading its result one member, the group its
        epilogue (:func:`.epilogues.fuse`), and two matmuls side by side where they may be
        (:meth:`paired`)."""
        found = []
        for op, plan, kind, row in zip(ops, plans, kinds, rows):
            if plan is not None:
                found.append(Member(plan, None, pointer_inputs(plan, self.scalars)))
            elif kind is not None:
                found.append(OpMember(op, None, native_dims(op, kind)))
            else:
                function = render_row_function(op, row, environment())
                found.append(OpMember(
                    op, self.c_functions.setdefault(function.name, function), row_dims(op),
                    "" if row == "one_hot" else "maximum", checks_labels(op, row)))
        found, kinds = epilogues.fuse(found, list(kinds), readers, escaping, self.resolve,
                                      self.overwritten, self.transposed)
        for member, kind in zip(found, kinds):
            if isinstance(member, Member):
                member.function = self.c_function(member.plan)
            elif isinstance(member, EpilogueMember):
                member.function = self.native_function(member.op, member.kind, member)
            elif member.function is None:
                member.function = self.native_function(member.op, kind)
        return self.paired(found, kinds)

    def paired(self, members, kinds) -> list:
        """``members`` (of a segment, with their native ``kinds``) with each two consecutive
        matmuls that may run side by side made one :class:`.PairMember`: both one GEMM
        (:func:`.native_ops.folded`) of one dtype, the second not reading the first's result,
        neither result a parameter's new value written in place (which the other may read)."""
        def single_gemm(member, kind):
            return kind == "matmul" and folded(member.op, self.read_transposed(member.op)) and \
                member.results[0] not in self.overwritten

        merged, index = [], 0
        while index < len(members):
            first = members[index]
            second = members[index + 1] if index + 1 < len(members) else None
            if second is not None and single_gemm(first, kinds[index]) and \
                    single_gemm(second, kinds[index + 1]) and \
                    first.results[0].dtype == second.results[0].dtype and \
                    all(self.resolve(v) is not first.results[0] for v in second.inputs):
                function = render_matmul_pair([first.op, second.op],
                                              [self.read_transposed(first.op),
                                               self.read_transposed(second.op)],
                                              environment(), threads=self.options.threads or 0)
                merged.append(PairMember(first, second, self.c_functions.setdefault(
                    function.name, function)))
                index += 2
                continue
            merged.append(first)
            index += 1
        return merged

    def read_transposed(self, op) -> list:
        """Per input of native ``op``: does its buffer hold its transpose (an absorbed
        ``transpose``, :mod:`.views`)?"""
        return [v in self.transposed for v in op.inputs]

    def entry_call(self, suffix, arguments) -> str:
        """The host's call of the program's entry point ``sg_<unit>_<suffix>`` with one tuple
        of ``arguments`` (Python expressions), bound to the name the call returns."""
        name = self.namer.fresh(f"_sg_{suffix}")
        self.entries.append((name, f"sg_{UNIT}_{suffix}"))
        return f"{name}(({''.join(a + ', ' for a in arguments)}))"

    def helpers_used(self) -> dict:
        """The helpers of the ops the host computes with NumPy (a fused group's members
        included; a region's body ops are lowered, and counted, one by one), and those of its
        own lines."""
        return {**helpers_of(self.numpy_ops, descend=is_fusion), **self.statement_helpers}

    def c_function(self, plan):
        """The C function of ``plan``, rendered once per group structure
        (:func:`~symgrad.backends.plan.structure`: groups of equal structure render to the
        same code), and once per code; an output that overwrites a parameter and that
        parameter get pointers without ``restrict`` (such a group is rendered on its own)."""
        aliased = [v for output, new in zip(plan.outputs, plan.op.results)
                   if new in self.overwritten for v in (output, self.overwritten[new])]
        key = None if aliased else group_structure(plan.op, self.scalars)
        function = self.by_structure.get(key)
        if function is None:
            function = render_group(plan, self.scalars, self.options, environment(),
                                    known=self.c_functions, aliased=aliased)
            function = self.c_functions.setdefault(function.name, function)
            if key is not None:
                self.by_structure[key] = function
        return function

    def native_function(self, op, kind, epilogue=None):
        """The C function of native ``op`` (:mod:`.native_ops`), rendered once per code; its
        operands that are absorbed transposes are read transposed; ``epilogue``: the
        :class:`.epilogues.EpilogueMember` whose group it computes too."""
        transposed = self.read_transposed(op)
        context = None if epilogue is None else \
            epilogues.render_context(epilogue, self.scalars, self.options, environment())
        function = render_native_function(op, kind, transposed, environment(),
                                          threads=self.options.threads or 0,
                                          flush=self.options.flush_denormals,
                                          epilogue=context)
        return self.c_functions.setdefault(function.name, function)

    def generate_program(self, signature_inputs, signature_outputs) -> GeneratedProgram:
        body, helpers = self.finish(self.binding_lines()
                                    + self.lower_ops(self.program.ops, self.fetches))
        summary = comment(f"{len(self.program.ops)} top-level ops, {len(self.segments)} C "
                          f"segments, {len(self.c_functions)} C functions, "
                          f"{len(self.fetches)} outputs")
        native = environment().get_template("c/native.h.j2").render(blas_symbols=SYMBOLS,
                                                                  thread_symbols=THREAD_SYMBOLS)
        units = units_of(list(self.c_functions.values()), list(self.c_steps.values()),
                         self.segments, render_prelude, native)
        header = environment().get_template("c/program.c.j2").render(
            symgrad_version=library_version(), summary=summary)
        unit = hashlib.sha256(joined(units, header).encode()).hexdigest()[:16]
        units = [dataclasses.replace(u, text=u.text.replace(UNIT, unit)) for u in units]
        entry_points = {name: symbol.replace(UNIT, unit) for name, symbol in self.entries}
        source = environment().get_template("c/host.py.j2").render(
            symgrad_version=library_version(), helpers=helpers, body=body,
            functions=self.functions.lines(), summary=summary,
            docstring="Generated from a symgrad program; run(_dims, **feeds) returns the "
                      "fetches.",
            inputs=ascii(signature_inputs), outputs=ascii(signature_outputs),
            entries=ascii(entry_points), threads=self.uses_threads,
            thread_count=self.options.threads, min_parallel_chunks=MIN_PARALLEL_CHUNKS,
            extension_dtypes=uses_extension_dtypes(self.program), buffers=BUFFERS, dims=DIMS,
            state=ascii([name for name, _ in self.state]) if self.state else None,
            in_place=ascii([slot.name for slot in self.in_place.values()]),
            overwrites=ascii([self.in_place[v].name for v in self.overwritten]))
        return GeneratedProgram(source, joined(units, header), units, self.constants,
                                len(self.segments), len(self.c_functions), self.references(),
                                array_cache.worth_it(self.program))


def _reads_data(op, value) -> bool:
    """Does ``op`` read ``value``'s data, not only its shape (``Algebra.shape_only``: the
    host renders a shape from the dims' sizes, never from an array)?"""
    shape_only = op.opdef.algebra.shape_only
    return any(v is value and k not in shape_only for k, v in enumerate(op.inputs))


def _member_heading(member) -> str:
    if isinstance(member, PairMember):
        return f"{_member_heading(member.first)} beside {_member_heading(member.second)}"
    if isinstance(member, EpilogueMember):
        return f"{_member_heading(member.native)} with {_member_heading(member.group)}"
    op = member.op
    if op.blocks:
        return f"fused group {op.attrs['group']} ({counted(len(op.blocks[0].ops), 'op')})"
    return f"%{op.results[0].id} = {op.name}"


def generate(program, fetches, options, inputs, outputs) -> GeneratedProgram:
    """The host module and C source computing ``fetches`` of ``program``."""
    return CHostGenerator(program, fetches, options).generate_program(inputs, outputs)
