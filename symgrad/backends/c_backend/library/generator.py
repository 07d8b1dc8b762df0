"""The C host of an exported library: one C function running a whole program.

:class:`LibraryGenerator` walks the program's top-level ops once, in order (a region op's
blocks nested in its C loop or branch), and writes the body of
``int NAME_run(NAME_state *state, inputs..., dims..., outputs...)``. Each op is computed in
C by the first rule of :data:`RULES` that takes it, or the export is refused with a
:class:`LibraryExportError` naming the op and the line that built it; nothing calls back into
Python. The rules:

- sources: a data input is the caller's pointer, a parameter the state's array, a constant a
  ``static const`` array (a 0-d one is also inlined as a literal into loop groups);
- loop groups (fused groups, lone elementwise ops and reductions): the C backend's group
  function (:func:`..kernels.render_group`), called with the group's dims;
- the softmax family and ``one_hot``: the row loops of the C backend (``c/library/row_op.c.j2``);
- ``matmul`` of matrices (or a stack of them times a matrix): one ``cblas_?gemm``, an operand
  made by a 2-D transpose read through the GEMM's transpose flag (the transpose is then not
  computed); of two stacks of the same batch dims: one GEMM per matrix;
- ``reshape`` (and ``reshape_like``), ``expand_dims``, ``squeeze``: the same buffer (every
  buffer is C-contiguous);
- other transposes, broadcasts, slices and their gradients, ``concatenate``, ``stack``,
  ``split``, ``pad``: copy loops (:mod:`.moves`);
- ``take``, ``take_along_axis`` and their gradients, indices range-checked (:mod:`.gathers`);
- ``cumsum``, ``cumprod``, ``linear_recurrence``, ``argmax``, ``argmin``: loops along the
  axis (:mod:`.along_axis`);
- ``einsum``: loops over its letters (:mod:`.contraction`);
- ``conv2d``, pooling and their gradients: the C backend's im2col/col2im and window loops,
  the GEMM through the CBLAS (:mod:`.windows`);
- ``random_uniform``, ``random_normal``: Philox in C, the interpreter's bits (:mod:`.draws`);
- control flow (``cond``, ``scan``, ``while_loop``, ``reverse_loop``): C branches and loops
  over their blocks' code (:mod:`.regions`);
- ``size``: the product of dims; ``assign``: the new value of a parameter, committed at the end.

Every computed value lives in a buffer the entry allocates (``malloc``), freed after the last
op that reads it (and, on an error, when the entry returns); a fetched value computed by an op
and fetched once is written into the caller's output buffer directly, the others copied there
at the end. The state's new values are committed only after everything else succeeded, by
swapping the state's arrays with the buffers holding them (a value the entry does not own is
first copied into one): a call that fails leaves the state as it was. Emitted (W7, abridged)::

    v4 = (float *)malloc((size_t)(sg_s0) * (size_t)(512) * sizeof(float) + 1);
    if (v4 == NULL) { sg_status = sg_fail(SG_ERROR_MEMORY, "out of memory for %%4"); goto done; }
    /* %4 = matmul(%x, %w0) */
    if (sg_gemm_float(0, 0, (int64_t)(sg_s0), 512, 784, 1, x, 784,
                      ((float *)state->data[0]), 512, 0, v4, 512) != 0) { sg_status = SG_ERROR_BLAS; goto done; }
    /* fused group 0 (2 ops) -> %6 */
    {
        const int64_t sg_d[2] = {sg_s0, 512};
        const int sg_rc = sg_g_7682cb16f50aaa0a(sg_d, v4, ((float *)state->data[1]), v6);
        ...
    }
    free(v4);
    v4 = NULL;
    ...
    /* commit the state: nothing fails from here */
    { void *sg_old = state->data[0]; state->data[0] = v84; v84 = sg_old; }   /* w0 */
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....ir.graph import users, walk_blocks, walk_ops
from ....ir.printer import format_op_head
from ....ops.core import ELEMENTWISE, REDUCTION, SOURCE
from ....ops.fused import is_fusion
from ....ops.state import split_state_fetches
from ...plan import plan_group
from ...row_kinds import checks_labels, labels_of
from ..ctype import c_comment, c_type, literal, supported
from ..kernels import group_heading, lowerable, pointer_inputs, render_group
from ..lowering import LOWERINGS, CNativeOp
from ..row_ops import row_kind
from .along_axis import RULES as AXIS_RULES
from .contraction import RULES as EINSUM_RULES
from .dims import DimTable, c_string, identifier
from .draws import RULES as RANDOM_RULES
from .errors import LibraryExportError
from .gathers import RULES as GATHER_RULES
from .moves import RULES as MOVE_RULES
from .regions import RULES as REGION_RULES
from .windows import RULES as WINDOW_RULES


def op_where(op) -> str:
    """``op 'tanh' (%7 = tanh(%6), built at model.py:12)``: an op named in errors."""
    at = f", built at {op.loc}" if getattr(op, "loc", None) else ""
    return f"op {op.name!r} ({format_op_head(op)}{at})"


@dataclasses.dataclass
class Parameter:
    """A parameter the state holds: its name, C type, dtype name and static shape."""

    name: str
    ctype: str
    dtype: str
    shape: tuple


@dataclasses.dataclass
class Input:
    """A data input of the entry: its name, C parameter name, C type and dim parameters."""

    name: str
    c_name: str
    ctype: str
    dims: list      # [(axis, C parameter)]
    text: str       # its type as the header documents it, dims named


@dataclasses.dataclass
class Output:
    c_name: str
    ctype: str
    text: str


@dataclasses.dataclass
class GeneratedLibrary:
    inputs: list            # Input
    outputs: list           # Output
    parameters: list        # Parameter
    state_outputs: list     # parameter names the entry updates
    binding: list           # C lines binding and checking dims
    declarations: list      # C lines declaring the entry's buffers
    buffers: list           # their C names (freed when the entry returns)
    body: list              # C lines of the entry
    finish: list            # C lines after success (outputs, state commits)
    functions: list         # units.Piece of each loop group function
    rows: list              # rendered row functions and helpers
    constants: list         # C lines of static constant arrays
    dtypes: set             # C float types the GEMM is called with


class LibraryGenerator:
    """See the module docstring; ``spec``: ``inputs`` (``[(name, dtype)]`` of the data
    inputs in signature order), ``binding`` (the DimBinder's JSON or None)."""

    def __init__(self, program, fetches, options, spec, environment):
        self.program = program
        self.options = options
        self.environment = environment
        self.user_fetches, self.state = split_state_fetches(program, list(fetches))
        self.readers = users(walk_ops(program.ops))
        self.parameter_values = set(program.parameters)
        taken = {"state"}
        names = {name: identifier(name, taken) for name, _ in spec["inputs"]}
        self.dims = DimTable(spec.get("binding"), names)
        self.c_names = names
        self.pointer: dict = {}        # Value -> C expression of its data
        self.owned: dict = {}          # Value -> C variable of a buffer the entry allocated
        self.scalars: dict = {}        # Value -> 0-d array inlined into loop groups
        self.parameters: list = []
        self.declarations: list = []
        self.buffers: list = []
        self.body: list = []
        self.functions: dict = {}
        self.rows: list = []
        self.constants: list = []
        self.gemm_types: set = set()
        self.locals: list = []         # C lines declaring the entry's int64_t locals
        self.numbered = 0              # locals numbered so far (sg_n<k>, sg_len<k>...)
        self.helpers: dict = {}        # template -> its rendered C (helpers of some ops)
        self.direct = self._direct_outputs()
        self.folded = self._folded()   # transposes read through a GEMM's flag
        self.outputs = [Output(f"out{k}", c_type(v.dtype), _type_text(v))
                        for k, v in enumerate(self.user_fetches)]
        self.inputs = [Input(name, names[name], c_type(np.dtype(dtype)),
                             self.dims.arguments.get(name, []), "")
                       for name, dtype in spec["inputs"]]

    # --- values ------------------------------------------------------------------------------
    def _direct_outputs(self) -> dict:
        """Value -> output index of the fetches computed straight into the caller's buffer: a
        value an op computes (not a source, not an assign), fetched once, not state."""
        counts: dict = {}
        for value in self.user_fetches:
            counts[value] = counts.get(value, 0) + 1
        state = {v for _, v in self.state}
        return {v: k for k, v in enumerate(self.user_fetches)
                if counts[v] == 1 and v not in state and v.op is not None
                and v.op.opdef.category != SOURCE and v.op.name not in ALIASES
                and not _is_region(v.op)}

    def _folded(self) -> set:
        """The 2-D transposes (at any depth) every reader of which is a GEMM of a matrix,
        which reads it through its transpose flag: neither fetched, nor state, nor yielded by
        a block."""
        kept = set(self.user_fetches) | {v for _, v in self.state}
        kept |= {v for block in walk_blocks([self.program.global_block()])
                 for v in block.yields}
        folded = set()
        for op in walk_ops(self.program.ops):
            if op.name != "transpose" or not _transposed_matrix(op.results[0]):
                continue
            value = op.results[0]
            readers = self.readers.get(value, [])
            if readers and value not in kept and \
                    all(_gemm_operands(r) and r.inputs[0].ndim == 2 for r in readers):
                folded.add(value)
        return folded

    def count(self, value) -> str:
        return " * ".join(f"(size_t)({d})" for d in self.dims.dims_of(value)) or "1"

    def allocate(self, value) -> str:
        """The buffer of a value an op computes: the caller's output, or a new one."""
        if value in self.direct:
            name = f"out{self.direct[value]}"
            self.pointer[value] = name
            return name
        name = f"v{value.id}"
        ctype = c_type(value.dtype)
        self.declare(name, ctype)
        self.body += malloc_lines(name, ctype, self.count(value), f"%{value.id}")
        self.pointer[value] = name
        self.owned[value] = name
        return name

    def declare(self, name, ctype) -> None:
        """Declare the entry's buffer ``name`` (NULL until allocated)."""
        self.declarations.append(f"    {ctype} *{name} = NULL;")
        self.buffers.append(name)

    def read(self, value) -> str:
        return self.pointer[value]

    # --- the walk ----------------------------------------------------------------------------
    def generate(self) -> GeneratedLibrary:
        keep = {self.origin(v) for v in self.user_fetches}
        keep |= {self.origin(v) for _, v in self.state}
        self.body = self.lower_ops(self.program.ops, keep)
        finish = self.finish_lines()
        return GeneratedLibrary(
            self.inputs, self.outputs, self.parameters, [name for name, _ in self.state],
            self.dims.lines, self.locals + self.declarations, self.buffers, self.body,
            finish, list(self.functions.values()),
            list(self.helpers.values()) + self.rows, self.constants,
            self.gemm_types)

    def lower_ops(self, ops, keep) -> list:
        """The C lines computing ``ops`` (the top level's or a block's), each by the first
        rule of :data:`RULES` that takes it, freeing the buffers of the values they define
        after the last op that reads them, except those of ``keep`` (origins, see
        :meth:`origin`: fetches, new state values, a block's yields)."""
        outer, self.body = self.body, []
        defined = {v for op in ops for v in op.results}
        last = _last_uses(ops, keep, self.origin)
        for index, op in enumerate(ops):
            for rule in RULES:
                if rule(self, op):
                    break
            else:
                raise LibraryExportError(_refusal(op))
            for value in last.get(index, ()):   # buffers no later op reads
                buffer = self.owned.get(value)
                if buffer is not None and value in defined:
                    self.body.append(f"    free({buffer});\n    {buffer} = NULL;")
        lines, self.body = self.body, outer
        return lines

    def origin(self, value):
        """The value whose buffer holds ``value``: through :data:`ALIASES`, and through a
        transpose a GEMM reads by its flag (which has no buffer)."""
        while value.op is not None and (value.op.name in ALIASES or value in self.folded):
            value = value.op.inputs[0]
        return value

    def helper(self, template) -> None:
        """Render the C helper ``template`` once into the library (before the entry)."""
        if template not in self.helpers:
            self.helpers[template] = self.environment.get_template(template).render()

    def new_local(self, prefix) -> str:
        """A new ``int64_t`` local of the entry (``prefix<k>``), 0 until set."""
        self.numbered += 1
        name = f"{prefix}{self.numbered}"
        self.local(f"{name} = 0")
        return name

    def region_number(self) -> int:
        """A number naming the locals of one region op (``sg_n<k>``...)."""
        self.numbered += 1
        return self.numbered

    @staticmethod
    def malloc_lines(name, ctype, count, what) -> list:
        return malloc_lines(name, ctype, count, what)

    def local(self, text) -> None:
        """Declare an ``int64_t`` local of the entry (``text``: ``name = value``)."""
        self.locals.append(f"    int64_t {text};")

    def finish_lines(self) -> list:
        """Copy the fetches not computed in place, then commit the state: copies of the new
        values the entry does not own (may fail), then swaps (cannot fail)."""
        lines = []
        for k, value in enumerate(self.user_fetches):
            if self.direct.get(value) == k:
                continue
            lines.append(f"    memcpy(out{k}, {self.read(value)}, {self.count(value)} * "
                         f"sizeof({c_type(value.dtype)}));")
        index = {p.name: k for k, p in enumerate(self.parameters)}
        swapped, swaps = set(), []
        for name, value in self.state:
            ctype = c_type(value.dtype)
            buffer = self.owned.get(_origin(value))
            if buffer is None or buffer in swapped:
                buffer = f"sg_new{index[name]}"
                self.declare(buffer, ctype)
                lines += malloc_lines(buffer, ctype, self.count(value), f"the new {name}")
                lines.append(f"    memcpy({buffer}, {self.read(value)}, {self.count(value)} "
                             f"* sizeof({ctype}));")
            swapped.add(buffer)
            swaps.append(f"    {{ void *sg_old = state->data[{index[name]}]; "
                         f"state->data[{index[name]}] = {buffer}; {buffer} = sg_old; }}"
                         f"   /* {c_comment(name)} */")
        return lines + ["    /* commit the state: nothing fails from here */"] * bool(swaps) \
            + swaps


def malloc_lines(name, ctype, count, what) -> list:
    """``name = malloc(...)`` of ``count`` (a C expression) items of ``ctype``, failing the
    call with "out of memory for WHAT" (a byte more: ``malloc(0)`` may return NULL)."""
    return [f"    {name} = ({ctype} *)malloc({count} * sizeof({ctype}) + 1);",
            f'    if ({name} == NULL) {{\n        sg_status = sg_fail(SG_ERROR_MEMORY, '
            f'"out of memory for {c_string(what)}");\n        goto done;\n    }}']


# ops whose result is their first input's buffer: an assign's result is its new value, and a
# view that keeps the order of the elements is the same C-contiguous buffer
ALIASES = ("assign", "reshape", "reshape_like", "expand_dims", "squeeze")


def _origin(value):
    """The value whose buffer holds ``value`` (see :data:`ALIASES`)."""
    while value.op is not None and value.op.name in ALIASES:
        value = value.op.inputs[0]
    return value


def _last_uses(ops, keep, origin) -> dict:
    """``{op index: [values whose buffer no later op of ops reads]}``, without ``keep``. A
    value read through another (``origin``) counts as read where that one is; a region op
    reads what its blocks capture (they are its inputs)."""
    last: dict = {}
    for index, op in enumerate(ops):
        for value in op.results:
            last[value] = index
        for value in op.inputs:
            last[origin(value)] = index
    table: dict = {}
    for value, index in last.items():
        if value not in keep:
            table.setdefault(index, []).append(value)
    return table


def _is_region(op) -> bool:
    """A control-flow op (blocks that run as C loops and branches), not a fusion."""
    return bool(op.blocks) and not is_fusion(op)


def _type_text(value) -> str:
    dims = ", ".join(str(d) for d in value.dims)
    return f"{value.dtype.name}[{dims}]"


def _refusal(op) -> str:
    return (f"{op_where(op)} is not computed in C by the C library export (it would need "
            f"Python): export a program without it, or run it with the Python artifact "
            f"(fn.save)")


# --- rules: each returns True when it computed the op -----------------------------------------
def source_rule(gen, op) -> bool:
    if op.opdef.category != SOURCE:
        return False
    value = op.results[0]
    ctype = c_type(value.dtype) if supported(value.dtype) else None
    if ctype is None:
        raise LibraryExportError(f"{op_where(op)}: dtype {value.dtype.name} has no C type in "
                                 f"the C library export")
    if op.opdef.feedable and value in gen.parameter_values:
        if None in value.shape:
            raise LibraryExportError(f"{op_where(op)}: a parameter of unknown shape")
        gen.pointer[value] = f"(({ctype} *)state->data[{len(gen.parameters)}])"
        gen.parameters.append(Parameter(value.name, ctype, value.dtype.name, value.shape))
        return True
    if op.opdef.feedable:
        name = op.attrs["name"]
        if name not in gen.c_names:
            raise LibraryExportError(f"{op_where(op)}: input {name!r} is not in the signature")
        gen.pointer[value] = gen.c_names[name]
        for item in gen.inputs:
            if item.name == name:
                item.text = _type_text(value)
        return True
    if None in value.shape:
        return False   # a filled tensor of run-time shape: not yet
    array = op.attrs["value"] if "value" in op.attrs else op.opdef.impl(**op.attrs)
    array = np.asarray(array, dtype=value.dtype)
    if array.ndim == 0:
        gen.scalars[value] = array
    name = f"sg_k{value.id}"
    items = ", ".join(literal(item, value.dtype) for item in array.reshape(-1)) or "0"
    gen.constants.append(f"static const {ctype} {name}[{max(array.size, 1)}] = {{{items}}};"
                         f"   /* {group_heading_of(op)} */")
    gen.pointer[value] = f"(({ctype} *){name})"
    return True


def group_heading_of(op) -> str:
    return c_comment(format_op_head(op))


def group_rule(gen, op) -> bool:
    if not (is_fusion(op) or op.opdef.category in (ELEMENTWISE, REDUCTION)):
        return False
    plan = plan_group(op, gen.options.accumulate_float64)
    if plan is None or not lowerable(plan):
        return False
    function = render_group(plan, gen.scalars, gen.options, gen.environment,
                            known=gen.functions)
    gen.functions.setdefault(function.name, function)
    space = [gen.dims.dim_code(dim) for dim in plan.dims]
    pointers = [gen.read(v) for v in pointer_inputs(plan, gen.scalars)]
    pointers += [gen.allocate(v) for v in plan.op.results]
    gen.body.append(f"    /* {group_heading(plan)} */")
    gen.body.append("    {\n        const int64_t sg_d[%d] = {%s};" % (
        max(len(space), 1), ", ".join(space) or "0"))
    gen.body.append(f"        const int sg_rc = {function.name}(sg_d, {', '.join(pointers)});")
    memory = f'sg_fail(SG_ERROR_MEMORY, "out of memory in {c_string(group_heading(plan))}")'
    if plan.reduction is not None:   # -2: an empty reduction without an identity
        memory = (f'sg_rc == -2 ? sg_fail(SG_ERROR_VALUE, "zero-size array to reduction '
                  f'operation {plan.combine.ufunc.__name__} which has no identity") : {memory}')
    gen.body.append(f"        if (sg_rc != 0) {{\n            sg_status = {memory};\n"
                    "            goto done;\n        }\n    }")
    return True


def row_rule(gen, op) -> bool:
    kind = row_kind(op, {})
    if kind is None:
        return False
    first, result = op.inputs[0], op.results[0]
    dims = gen.dims.dims_of(first)
    axis = op.attrs["axis"]
    outer = " * ".join(f"(int64_t)({d})" for d in dims[:axis]) or "1"
    inner_from = axis if kind == "one_hot" else axis + 1
    inner = " * ".join(f"(int64_t)({d})" for d in dims[inner_from:]) or "1"
    n = str(op.attrs["num_classes"]) if kind == "one_hot" else dims[axis]
    labels = labels_of(op, kind)
    number = len(gen.rows)
    gen.rows.append(gen.environment.get_template("c/library/row_op.c.j2").render(
        number=number, note=group_heading_of(op), kind=kind, name=c_string(op.name),
        labels=c_string(labels.name or f"%{labels.id}") if labels is not None else "",
        check_labels=checks_labels(op, kind), T=c_type(first.dtype), O=c_type(result.dtype),
        L=c_type(labels.dtype) if labels is not None else ""))
    # the second and third inputs (labels, a gradient's cotangent), NULL where there are none
    second, third = [gen.read(v) for v in op.inputs[1:]] + ["NULL"] * (3 - len(op.inputs))
    target = gen.allocate(result)
    gen.body.append(f"    /* {group_heading_of(op)} */")
    gen.body.append(f"    if (sg_row{number}({gen.read(first)}, {second}, {third}, {target}, "
                    f"{outer}, {n}, {inner}) != 0) {{\n        sg_status = SG_ERROR_VALUE;\n"
                    f"        goto done;\n    }}")
    return True


def _transposed_matrix(value) -> bool:
    op = value.op
    return op is not None and op.name == "transpose" and value.ndim == 2 and \
        tuple(op.attrs["axes"]) == (1, 0)


def _gemm_operands(op) -> bool:
    """A matmul the library computes: float32 or float64 throughout, ``b`` a matrix and ``a``
    a matrix or a stack of them (not a transposed stack), or two stacks of the same batch
    dims (the C backend's cases)."""
    rule = LOWERINGS.rule(op.opdef)
    if not isinstance(rule, CNativeOp) or op.name != "matmul":
        return False
    a, b = op.inputs
    values = [a, b, op.results[0]]
    if values[0].dtype.name not in ("float32", "float64") or \
            any(v.dtype != values[0].dtype for v in values):
        return False
    return a.ndim >= 2 and b.ndim == 2 or a.ndim == b.ndim > 2 and a.dims[:-2] == b.dims[:-2]


def matmul_rule(gen, op) -> bool:
    if not _gemm_operands(op):
        return False
    a, b = op.inputs
    result = op.results[0]
    ctype = c_type(result.dtype)
    gen.gemm_types.add(ctype)
    operands = []
    for value in (a, b):
        if value in gen.folded:
            source = value.op.inputs[0]
            operands.append((1, gen.read(source)))
        else:
            operands.append((0, gen.read(value)))
    a_dims, b_dims = gen.dims.dims_of(a), gen.dims.dims_of(b)
    if b.ndim > 2:   # two stacks: a GEMM per matrix, as the C backend's
        return _stacked_matmul(gen, op, ctype, a_dims, b_dims)
    m = " * ".join(f"(int64_t)({d})" for d in a_dims[:-1])
    k, n = a_dims[-1], b_dims[-1]
    (ta, pa), (tb, pb) = operands
    lda = m if ta else k
    ldb = k if tb else n
    target = gen.allocate(result)
    gen.body.append(f"    /* {group_heading_of(op)} */")
    gen.body.append(f"    if (sg_gemm_{ctype}({ta}, {tb}, {m}, {n}, {k}, 1, {pa}, {lda}, {pb}, "
                    f"{ldb}, 0, {target}, {n}) != 0) {{\n        sg_status = SG_ERROR_BLAS;\n"
                    f"        goto done;\n    }}")
    return True


def _stacked_matmul(gen, op, ctype, a_dims, b_dims) -> bool:
    a, b = op.inputs
    batch = " * ".join(f"(int64_t)({d})" for d in a_dims[:-2])
    m, k, n = a_dims[-2], a_dims[-1], b_dims[-1]
    pa, pb, target = gen.read(a), gen.read(b), gen.allocate(op.results[0])
    gen.body.append(f"    /* {group_heading_of(op)} */")
    gen.body.append(
        f"    for (int64_t sg_k = 0; sg_k < {batch}; sg_k++)\n"
        f"        if (sg_gemm_{ctype}(0, 0, {m}, {n}, {k}, 1, {pa} + sg_k * ({m}) * ({k}), {k}, "
        f"{pb} + sg_k * ({k}) * ({n}), {n}, 0, {target} + sg_k * ({m}) * ({n}), {n}) != 0) {{\n"
        f"            sg_status = SG_ERROR_BLAS;\n            goto done;\n        }}")
    return True


def size_rule(gen, op) -> bool:
    if op.name != "size" or not supported(op.results[0].dtype):
        return False
    dims = gen.dims.dims_of(op.inputs[0])
    axes = op.attrs.get("axis")
    axes = range(len(dims)) if axes is None else [a % len(dims) for a in
                                                  (axes if isinstance(axes, (tuple, list))
                                                   else (axes,))]
    total = " * ".join(f"(int64_t)({dims[a]})" for a in axes) or "1"
    result = op.results[0]
    if result.ndim != 0:
        return False
    target = gen.allocate(result)
    gen.body.append(f"    {target}[0] = ({c_type(result.dtype)})({total});   "
                    f"/* {group_heading_of(op)} */")
    return True


def alias_rule(gen, op) -> bool:
    """An op of :data:`ALIASES`: its result reads its input's buffer."""
    if op.name not in ALIASES:
        return False
    gen.pointer[op.results[0]] = gen.read(op.inputs[0])
    return True


RULES = (source_rule, group_rule, row_rule, matmul_rule, size_rule, alias_rule) + \
    MOVE_RULES + GATHER_RULES + AXIS_RULES + EINSUM_RULES + RANDOM_RULES + WINDOW_RULES + \
    REGION_RULES


def generate_library(program, fetches, options, spec, environment) -> GeneratedLibrary:
    """The entry's parts for ``program`` computing ``fetches`` (see the module docstring)."""
    return LibraryGenerator(program, fetches, options, spec, environment).generate()


__all__ = ["GeneratedLibrary", "LibraryExportError", "generate_library"]
