"""Render one NumPy module per program.

Module contract (the AOT artifact relies on it): the module imports only NumPy and, when it
has chunked loops, its sibling ``row_pool`` (standard library only), so a loader executes it
with ``__package__`` naming a package that holds ``row_pool``; it defines
``run(_dims=None, _buffers=None, /, **feeds) -> list of arrays`` (feeds by input name; a
parameter not fed takes ``CONSTANTS[name]``; ``_dims``: the binding of the program's symbolic
dims, ``{symbol text: size}``, which a program with symbolic input dims needs and from which
``run`` reads every run-time size, see :mod:`symgrad.backends.dim_code`), the dict
``CONSTANTS`` (parameter values and non-scalar constants, filled by the loader after import),
and the literals ``INPUTS``/``OUTPUTS`` (signature: name, shape with ``None`` for run-time
dims, dtype). Scalar constants are inlined. A program with state outputs (``assign``, see
:mod:`symgrad.ops.state`) also defines ``STATE`` (the assigned parameters, whose new values
``run`` returns after the fetches) and ``IN_PLACE`` (those written into caller-given buffers ``_buffers``, see :mod:`.state_buffers`). The
errors its helpers raise (an index out of range) are classes it defines as NumPy-only
stand-ins; symgrad's loaders bind symgrad's own classes over them
(:func:`~symgrad.backends.host.bind_references`).

Each top-level op becomes one statement of ``run`` preceded by a provenance comment
(``# %5 = tanh(%4)``, plus ``# backward of ...`` for backward ops); each fused group becomes a
module-level function that ``run`` calls (:mod:`.group`), written once for all the groups that
are the same code up to names (:mod:`.functions`); a control-flow op becomes Python ``if`` /
``for`` / ``while`` statements around the statements of its blocks (:mod:`.regions`; nested too
deep, a module-level function holding them). Chunked groups over many rows run on the module's
``_POOL``, a :class:`.row_pool.RowPool` of ``options.threads`` threads: the one fixed runtime
helper, imported as ``from .row_pool import RowPool`` (so the module reads from its own program
down, and the loaders make that relative import resolve). Values are deleted after their last
use; buffers planned by the memory pass (``program.buffer_plan``) are allocated once and reused
through ``out=``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import textwrap

import jinja2
import numpy as np

from ...errors import FeedError
from ...ir.dims import Symbol
from ...ir.graph import last_uses, walk_ops
from ...ops.core import SOURCE, HelperReference, HelperSource
from ...ops.fused import is_fusion
from ...ops.state import split_state_fetches
from ..options import MIN_PARALLEL_CHUNKS
from ..common import Namer, comment, library_version, sanitize, template_environment
from ..dim_code import DimNames, RunTimeChecks, shape_code
from . import chunks, regions  # noqa: F401  (they register the region ops' lowerings)
from .functions import Commented, Function, FunctionTable, wrap_doc
from .literals import dtype_code, scalar_for, typed_scalar
from .lowering import LOWERINGS, rule_of, standin
from .ops_text import OpText, numpy_emitter, visible_attrs
from .state_buffers import BUFFERS, StateBuffer, in_place_slots, overwrites

DIMS = "_dims"   # the generated run's parameter holding the binding of the symbolic dims

def environment() -> jinja2.Environment:
    return template_environment("numpy")


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


@dataclasses.dataclass
class GeneratedModule:
    source: str
    constants: dict          # name -> ndarray, for the module's CONSTANTS
    inputs: list
    outputs: list
    group_functions: int     # distinct fused-group functions written (groups may share one)
    references: dict = dataclasses.field(default_factory=dict)   # name -> HelperReference


def helpers_of(ops, descend=lambda op: True) -> dict:
    """``{name: helper}`` of the helpers the lowerings of ``ops`` need, with those of the ops
    nested in each op for which ``descend(op)``; two different helpers under one name are an
    error, never a silent pick of one of them."""
    found = {}
    stack = list(ops)
    while stack:
        op = stack.pop()
        rule = LOWERINGS.rule(op.opdef)
        for helper in rule.helpers if rule is not None else ():
            name = helper.name if isinstance(helper, (HelperSource, HelperReference)) \
                else helper.__name__
            if found.setdefault(name, helper) is not helper and found[name] != helper:
                raise ValueError(f"two different helpers named {name!r} are needed by one "
                                 f"program (op {op.name!r} and an earlier op); a custom op "
                                 f"registered again replaces its forward for new programs "
                                 f"only, so rebuild the program")
        for block in op.blocks if descend(op) else ():
            stack.extend(block.ops)
    return found


def _helper_text(helper) -> str:
    """The module text of a helper (see :mod:`.lowering`)."""
    if isinstance(helper, HelperSource):
        return helper.source.strip()
    if isinstance(helper, HelperReference):
        note = comment(f"{helper.name}: {helper.reason}; symgrad binds it when it loads this "
                       f"module, which therefore runs only in the process that compiled it.")
        return "\n".join([*("# " + line for line in textwrap.wrap(note, 92)),
                          f"{helper.name} = None"])
    return textwrap.dedent(inspect.getsource(helper)).strip()


SMALL_BUFFER = 256   # elements: a planned buffer this small gains nothing over NumPy's allocator
# elements: a source op without a stored value (``full``) up to this size becomes a constant
# when compiling; a bigger one is filled by its emitter each run
MATERIALIZE_LIMIT = 1 << 16


def _shared_slots(plan: dict) -> dict:
    """The planned buffers that two or more values share and that are not small (a buffer used
    once, or a tiny one, gains nothing over letting NumPy allocate the result)."""
    plan = {value: number for value, number in plan.items()
            if value.size is None or value.size >= SMALL_BUFFER}
    count: dict = {}
    for number in plan.values():
        count[number] = count.get(number, 0) + 1
    return {value: number for value, number in plan.items() if count[number] > 1}


class Generator:
    """Builds the body of ``run`` statement by statement, and the group functions."""

    writes_state_in_place = True   # new parameter values go into the caller's buffers
    # what helpers taking over_rows (convs, max pooling) get when options.threads is not 1
    over_rows = "_POOL.over_rows"
    # what emitters with pool_helpers (matmul) get then: the module's RowPool
    pool = "_POOL"

    def __init__(self, program, fetches, options):
        self.program = program
        self.fetches = list(fetches)
        self.options = options
        self.helpers = helpers_of(program.ops)
        self.statement_helpers: dict = {}   # what the generator's own lines need (FeedError)
        self.namer = Namer(reserved=self.helpers)
        self.scalars: dict = {}        # Value -> 0-d array inlined as a literal
        self.constants: dict = {}      # CONSTANTS key -> array
        self.slot_names: dict = {}     # slot number -> buffer variable
        self.parameters = set(program.parameters)
        self.buffer_plan = _shared_slots(getattr(program, "buffer_plan", {}))
        self.state = split_state_fetches(program, self.fetches)[1]   # [(parameter, value)]
        self.in_place = in_place_slots(program, self.state, SMALL_BUFFER) \
            if self.writes_state_in_place else {}
        self.overwritten = overwrites(program, self.fetches, self.in_place)   # {new: old}
        self.buffer_plan.update(self.in_place)
        self.namer.used.add(BUFFERS)
        self.functions = FunctionTable()   # the module-level group functions
        self.text = OpText()               # comments naming ops
        self.uses_threads = False      # does a statement use the module's _POOL?
        self.hidden: set = set()       # Values the module never names (a subclass keeps them)
        self.region_depth = 0          # regions around the statements being generated
        self.dim_names = DimNames()    # symbolic dim -> the local holding its size
        self.run_time_checks = RunTimeChecks(program.dim_constraints)
        self.bound_dims = []           # (symbol text, local) read from the binding
        self.dim_count = 0
        self.namer.used.update((DIMS, FeedError.__name__))
        for value in program.inputs:
            for dim in value.dims:
                if type(dim) is Symbol and not self.dim_names.known(dim):
                    self.bound_dims.append((str(dim), self.new_dim(dim)))

    # --- dims ----------------------------------------------------------------------------------
    def dim_code(self, dim) -> str:
        """Python source of ``dim``'s size (see :mod:`symgrad.backends.dim_code`)."""
        return self.dim_names.code(dim)

    def new_dim(self, dim) -> str:
        """A new local for ``dim``'s size (``_d0``, ``_d1``...: never made from its name)."""
        name = self.namer.fresh(f"_d{self.dim_count}")
        self.dim_count += 1
        self.dim_names.bind(dim, name)
        return name

    def shape_of(self, value) -> list[str]:
        """Python source of each dim of ``value``."""
        return [self.dim_code(d) for d in value.dims]

    def binding_lines(self) -> list[str]:
        """The first lines of ``run``: each bound symbol's size into its local."""
        if not self.bound_dims:
            return []
        return [f"if {DIMS} is None:",
                f"    raise TypeError('run needs {DIMS}: the size of each symbolic dim of "
                f"the inputs')",
                *(f"{name} = {DIMS}[{ascii(text)}]" for text, name in self.bound_dims)]

    def defined_dims(self, op) -> list[str]:
        """Lines binding the dims ``op`` defines at run time, right after it: each result dim
        that nothing bound can express, read from the result (the one place a size is read
        from an array)."""
        lines, defined = [], set()
        for value in op.results:
            if value.dims is value.shape:
                continue
            for axis, dim in enumerate(value.dims):
                if not self.dim_names.known(dim):
                    name = self.new_dim(dim)
                    defined.add(dim)
                    lines.append(f"{name} = {self.namer.value(value)}.shape[{axis}]"
                                 f"  # {comment(f'dim {dim}, defined by this op')}")
        return lines + self.dim_checks(defined) if defined else lines

    def dim_checks(self, defined) -> list[str]:
        """Lines checking the constraints that the dims ``defined`` (just bound from an op's
        result) let the module evaluate (see :class:`~symgrad.backends.dim_code.RunTimeChecks`)."""
        lines = []
        for constraint, op in self.run_time_checks.after(defined, self.dim_names.known):
            left, right = self.dim_code(constraint.left), self.dim_code(constraint.right)
            message = RunTimeChecks.message(constraint, op, defined)
            self.statement_helpers[FeedError.__name__] = standin(FeedError)
            lines += [f"if {left} != {right}:",
                      f"    raise FeedError({ascii(message)} % ({left}, {right}))"]
        return lines

    # --- expressions ---------------------------------------------------------------------------
    def expr(self, value, consumer=None, position=0) -> str:
        """Source for reading ``value`` as argument ``position`` of ``consumer``."""
        array = self.scalars.get(value)
        if array is not None:
            return scalar_for(array, consumer, position) if consumer is not None \
                else typed_scalar(array)
        return self.namer.value(value)

    def args(self, op, local=None) -> list[str]:
        local = local or {}
        return [local[v] if v in local else self.expr(v, op, i)
                for i, v in enumerate(op.inputs)]

    def alias(self, value, other) -> None:
        """Read ``other``'s variable (or literal) wherever ``value`` is read: a branch's
        arguments are its operands, a while body's arguments the condition's."""
        array = self.scalars.get(other)
        if array is not None:
            self.scalars[value] = array
        else:
            self.namer.by_id[value.id] = self.namer.value(other)

    def constant_key(self, value) -> str:
        key = f"%{value.id}"
        names = {v.name for v in self.parameters}
        while key in names or key in self.constants:
            key += "'"
        return key

    def slot(self, number, value, lines) -> str:
        """The variable of buffer slot ``number``, allocating it (into ``lines``) on first use."""
        name = self.slot_names.get(number)
        if name is None:
            empty = f"np.empty({shape_code(self.shape_of(value))}, {dtype_code(value.dtype)})"
            if isinstance(number, StateBuffer):   # the caller's buffer for a parameter
                name = self.namer.fresh(f"_next_{sanitize(number.name)}")
                lines.append(f"{name} = {BUFFERS}[{ascii(number.name)}] if {BUFFERS} "
                             f"else {empty}")
            else:
                name = self.namer.fresh(f"_b{number}")
                lines.append(f"{name} = {empty}")
            self.slot_names[number] = name
        return name

    # --- statements ------------------------------------------------------------------------------
    def simple(self, op, local=None, name_of=None) -> list[str]:
        """Lines computing a non-fused op with its emitter (a planned buffer via ``out=``);
        ``local`` maps values to the names the op reads them by, ``name_of`` names results."""
        threaded = self.options.threads != 1
        over_rows, pool = (self.over_rows, self.pool) if threaded else (None, None)
        emitter = numpy_emitter(op, self.dim_code, over_rows, pool)
        given = getattr(emitter, "keywords", {})   # what numpy_emitter gave the op's emitter
        if "over_rows" in given or "pool" in given:
            self.uses_threads = True
        if "pool" in given:
            self.statement_helpers.update((h.__name__, h) for h in rule_of(op).emit.pool_helpers)
        attrs = visible_attrs(op)
        args = self.args(op, local)
        names = [(name_of or self.namer.value)(v) for v in op.results]
        lines = []
        slot = self.buffer_plan.get(op.results[0]) if len(names) == 1 else None
        if slot is not None:
            buffer = self.slot(slot, op.results[0], lines)
            lines.append(Commented(f"{names[0]} = {emitter(args, attrs, out=buffer)}",
                                   self.text.provenance, op))
            return lines
        target = names[0] if len(names) == 1 else ", ".join(names)
        lines.append(Commented(f"{target} = {emitter(args, attrs)}", self.text.provenance, op))
        return lines

    def source_op(self, op) -> list[str]:
        value = op.results[0]
        name = self.namer.value(value) if op.opdef.feedable else None
        if op.opdef.feedable:
            key = ascii(op.attrs["name"])
            if value in self.parameters:
                return [f"{name} = feeds[{key}] if {key} in feeds else CONSTANTS[{key}]"]
            return [f"{name} = feeds[{key}]"]
        rule = LOWERINGS.rule(op.opdef)
        emitter = rule.emit if rule is not None else None
        if "value" not in op.attrs and emitter is not None and (
                value.size is None or value.size > MATERIALIZE_LIMIT):
            # a big filled tensor is made when the program runs, never at compile time
            return [f"{self.namer.value(value)} = {emitter([], visible_attrs(op))}"]
        array = op.attrs["value"] if "value" in op.attrs else op.opdef.impl(**op.attrs)
        array = np.asarray(array, dtype=value.dtype)
        if array.ndim == 0:
            self.scalars[value] = array
            return []
        key = self.constant_key(value)
        self.constants[key] = array
        return [f"{self.namer.value(value)} = CONSTANTS[{ascii(key)}]"]

    def lower_ops(self, ops, reads_after=()) -> list:
        """The statements computing ``ops`` (one block's, in order), each op's preceded by a
        comment naming it, with ``del`` after the last use of each Value the block defines;
        ``reads_after`` (a block's yields) are read after the last statement."""
        statements = []
        for op in ops:
            lines = self.lower_op(op)
            head = [self.text.line(op)] if lines and not is_fusion(op) else []
            statements.append(head + lines + self.defined_dims(op))
        return self.with_deletes(ops, statements, reads_after)

    def lower_op(self, op) -> list:
        """The statements computing one op: a source's, or its lowering rule's (a region op's
        statements, else one statement with its emitter)."""
        if op.opdef.category == SOURCE:
            return self.source_op(op)
        rule = rule_of(op)
        if rule.statements is not None:
            return rule.statements(self, op)
        return self.simple(op)

    @contextlib.contextmanager
    def nested_region(self):
        """Generate the statements of a region's block inside the ``with`` block."""
        self.region_depth += 1
        self.dim_names.push()
        try:
            yield
        finally:
            self.dim_names.pop()
            self.region_depth -= 1

    def region_function(self, op, statements) -> list:
        """The statement calling a new module-level function that computes region op ``op``
        with its lowering's ``statements(gen, op)`` (regions nested in it count from 0 again
        there), taking the Values the op reads and returning its results."""
        name = self.namer.fresh(f"_region{op.results[0].id}" if op.results else "_region")
        params = list(dict.fromkeys(self.namer.value(v) for v in op.inputs
                                    if v not in self.scalars))
        params += sorted(set(self.dim_names.names.values()))   # the sizes bound so far
        depth, self.region_depth = self.region_depth, 0
        try:
            body = statements(self, op)
        finally:
            self.region_depth = depth
        results = ", ".join(self.namer.value(v) for v in op.results)
        body.append(f"return {results}" if results else "return None")
        doc = (f"{self.text.head(op)}: a region nested {depth} regions deep in its caller, "
               f"written as a function of its own so that generated code stays shallow.")
        self.functions.add_unshared(Function(name, params, lambda: "\n".join(wrap_doc(doc)),
                                             body, []))
        call = f"{name}({', '.join(params)})"
        return [Commented(f"{results} = {call}" if results else call, self.text.provenance,
                          op)]

    def generate(self, signature_inputs, signature_outputs) -> GeneratedModule:
        body = self.binding_lines() + self.lower_ops(self.program.ops, self.fetches)
        body, helpers = self.finish(body)
        source = render(
            "module.py.j2", symgrad_version=library_version(), helpers=helpers, body=body,
            functions=self.functions.lines(),
            summary=comment(f"{len(self.program.ops)} top-level ops, "
                            f"{len(self.fetches)} outputs"),
            docstring="Generated from a symgrad program; run(_dims, **feeds) returns the "
                      "fetches.",
            inputs=ascii(signature_inputs), outputs=ascii(signature_outputs),
            threads=self.uses_threads, thread_count=self.options.threads,
            min_parallel_chunks=MIN_PARALLEL_CHUNKS,
            extension_dtypes=uses_extension_dtypes(self.program), buffers=BUFFERS, dims=DIMS,
            state=ascii([name for name, _ in self.state]) if self.state else None,
            in_place=ascii([slot.name for slot in self.in_place.values()]),
            overwrites=ascii([self.in_place[v].name for v in self.overwritten]))
        return GeneratedModule(source, self.constants, signature_inputs, signature_outputs,
                               len(self.functions.entries), self.references())

    def helpers_used(self) -> dict:
        """``{name: helper}`` of the helpers the module defines or gets by reference: those
        of every op (a generator computing some ops without NumPy narrows them) and those of
        its own lines."""
        return {**self.helpers, **self.statement_helpers}

    def references(self) -> dict:
        """``{name: HelperReference}``: the functions the module gets by reference."""
        return {name: helper for name, helper in self.helpers_used().items()
                if isinstance(helper, HelperReference)}

    def finish(self, body):
        """``(body, helpers)``: the lines of ``run`` ending with the return of the fetches,
        and the source of the helper functions the ops need. Records the parameters' values in
        ``constants``."""
        outputs = ", ".join(f"np.asarray({self.expr(v)}, dtype={dtype_code(v.dtype)})"
                            for v in self.fetches)
        body.append(f"return [{outputs}]")
        for param in self.program.parameters:
            self.constants.setdefault(param.name, param.op.attrs["init"])
        helpers = [_helper_text(helper) for _, helper in sorted(self.helpers_used().items())]
        return body, helpers

    def last_uses(self, ops, reads_after) -> dict:
        """``{value: index}``: the last op of ``ops`` (one block's) reading each value, where
        :meth:`with_deletes` deletes it (``len(ops)`` for ``reads_after``). A generator whose
        statements read a value where the block reads another (a view it never makes)
        extends it."""
        return last_uses(ops, reads_after)

    def with_deletes(self, ops, statements, reads_after=()) -> list:
        """``statements`` (the lines of each of ``ops``, one block's) with ``del`` after the
        last use of each variable the block defines (never a fetch, a literal or one of
        ``reads_after``); a planned buffer is deleted after its last occupant."""
        fetched = set(self.fetches)
        end = len(ops)
        last = self.last_uses(ops, reads_after)
        dying: dict = {}
        slot_last: dict = {}
        for index, op in enumerate(ops):
            for value in op.results:
                at = last.get(value, index)
                if at != end and value not in fetched and value not in self.scalars \
                        and value not in self.hidden:
                    dying.setdefault(at, []).append(self.namer.value(value))
                number = self.buffer_plan.get(value)
                if number is not None:
                    slot_last[number] = max(slot_last.get(number, -1), at)
        for number, index in slot_last.items():
            if number in self.slot_names and index != end:
                dying.setdefault(index, []).append(self.slot_names[number])
        body = []
        for index, lines in enumerate(statements):
            body.extend(lines)
            names = sorted(set(dying.get(index, ())))
            if names:
                body.append(f"del {', '.join(names)}")
        return body


def uses_extension_dtypes(program) -> bool:
    """Does ``program`` hold a Value of a dtype from ``ml_dtypes`` (bfloat16), which the
    generated module must import?"""
    return any(v.dtype.kind == "V" for op in walk_ops(program.ops) for v in op.results)


def generate(program, fetches, options, inputs, outputs) -> GeneratedModule:
    """The module computing ``fetches`` of ``program`` (see the module docstring)."""
    return Generator(program, fetches, options).generate(inputs, outputs)
