"""Render the host module and the ``.cu`` source of one program.

Host module contract: it imports NumPy and CuPy (so it is imported only when the program first
runs); it defines ``run(_dims=None, _buffers=None, /, **feeds) -> list of CuPy arrays`` (feeds
by input name, NumPy or CuPy; a parameter not fed takes ``CONSTANTS[name]``; ``_dims``: the
binding of the symbolic dims, from which every launch's sizes are rendered, as for the NumPy
module; ``_buffers`` is ignored) and the literals ``INPUTS``/``OUTPUTS``. The
loader fills ``CONSTANTS`` (device arrays), ``KERNELS`` (entry-point name -> kernel of the
program's one ``cupy.RawModule``) and ``MAX_BLOCKS``.

Statements are built by the NumPy backend's generator (naming, provenance comments, memory
plan buffers, ``del`` after last use), with two changes: every group whose ops all have CUDA
lowerings
becomes one kernel launch (:mod:`.kernels`; groups of the same structure, such as the steps
of a long repetitive chain, launch one shared kernel), and the other ops (matmul through
cuBLAS, conv, pooling, softmax, data movement) run their NumPy lowerings and helpers with CuPy
standing in for NumPy.
"""
from __future__ import annotations

import dataclasses

from ...ir.printer import counted, format_op_head
from ...ops.core import SOURCE
from ...ops.fused import is_fusion
from ..common import comment, library_version
from ..dim_code import shape_code
from ..host.generator import DIMS, Generator, helpers_of
from ..host.functions import _ranges
from ..host.literals import dtype_code
from ..host.lowering import exact_ufunc
from ..plan import structure as group_structure
from . import ctype, device_checks, row_ops
from . import kernels as kernel_lowering

# Render the kernel of every group that shares one anyway and check that it is the same code
# (the test suite turns this on, so every program it compiles checks plan.structure)
CHECK_STRUCTURES = False


@dataclasses.dataclass
class GeneratedProgram:
    source: str              # the host module
    cuda_source: str         # the program's one .cu (prelude and every kernel)
    kernels: dict            # kernel name -> its CUDA text (provenance comment first)
    entries: list            # every extern "C" entry point of cuda_source
    constants: dict          # name -> host array, for the module's CONSTANTS
    references: dict = dataclasses.field(default_factory=dict)   # name -> HelperReference


class HostGenerator(Generator):
    """The NumPy generator, with kernel launches for the groups that have CUDA lowerings."""

    writes_state_in_place = False   # new parameter values are new device arrays
    over_rows = None                # helpers run their serial default (no thread pool here)
    pool = None

    def __init__(self, program, fetches, options):
        super().__init__(program, fetches, options)
        self.views = kernel_lowering.views_of(program)
        self.kernels: list = []
        self.by_structure: dict = {}     # kernel structure -> its Kernel
        self.sharers: dict = {}          # kernel name -> the later ops (groups) that launch it
        self.device_scalars: dict = {}   # Value -> CONSTANTS key of a 0-d device constant
        self.row_kernels: dict = {}      # row_ops.signature -> its Kernel
        self.host_ops: list = []         # the ops computed through CuPy (their helpers)

    def expr(self, value, consumer=None, position=0) -> str:
        """As the NumPy generator, except that an inlined scalar given to a library call that
        is not a ufunc becomes a device constant (CuPy functions want device arrays)."""
        array = self.scalars.get(value)
        if array is None or consumer is None or exact_ufunc(consumer.opdef):
            return super().expr(value, consumer, position)
        key = self.device_scalars.get(value)
        if key is None:
            key = self.constant_key(value)
            self.constants[key] = array
            self.device_scalars[value] = key
        return f"CONSTANTS[{ascii(key)}]"

    # --- one kernel launch -----------------------------------------------------------------------
    def dims(self, plan) -> list[str]:
        """Host expressions of the dims of ``plan``'s iteration space: literals, or sizes
        rendered from the binding (:mod:`symgrad.backends.dim_code`)."""
        return [self.dim_code(dim) for dim in plan.dims]

    def kernel_for(self, plan):
        """``(kernel, own, shared)``: the kernel that runs group ``plan.op`` (built, or, when
        ``shared``, the kernel of an earlier group of the same structure) and ``own(value)``,
        which maps the kernel's captures to the group's own."""
        structure = group_structure(plan.op, self.scalars, lambda value: value in self.views)
        kernel = self.by_structure.get(structure)
        if kernel is None:
            name = f"k{len(self.kernels)}_{self.tag(plan)}"
            kernel = kernel_lowering.build_kernel(name, plan, self.scalars, self.views)
            self.kernels.append(kernel)
            self.by_structure[structure] = kernel
            return kernel, lambda value: value, False
        if CHECK_STRUCTURES:
            again = kernel_lowering.build_kernel(kernel.name, plan, self.scalars, self.views)
            if kernel_lowering.canonical_code(again.source) != \
                    kernel_lowering.canonical_code(kernel.source):
                raise AssertionError(f"two groups of equal structure rendered different "
                                     f"kernels:\n{again.source}\n---\n{kernel.source}")
        self.sharers.setdefault(kernel.name, []).append(plan.op)
        position = {v: i for i, v in enumerate(kernel.captures)}
        return kernel, lambda value: plan.captures[position[value]], True

    def launch(self, plan) -> list[str]:
        op = plan.op
        kernel, own, shared = self.kernel_for(plan)
        name = kernel.name
        results = ", ".join(f"%{v.id}" for v in op.results)
        runs = f"runs kernel {name}, shared" if shared else f"kernel {name}"
        if is_fusion(op):
            size = counted(len(op.blocks[0].ops), "op")
            head = f"# fused group {op.attrs['group']} ({size}) -> {results}: {runs} " \
                   f"({kernel.style})"
        else:
            head = f"# {runs} ({kernel.style})"
        lines = [comment(head)]
        if shared:   # the kernel's comment names another group's ops: name this group's
            inner = op.blocks[0].ops if is_fusion(op) else [op]
            lines += [f"#   {comment(format_op_head(o))}" for o in inner]
        shape_var = self.namer.fresh("_shape")
        lines.append(f"{shape_var} = {shape_code(self.dims(plan))}")
        dims = [f"{shape_var}[{d}]" for d in range(len(kernel.shape))]
        buffers = op.attrs.get("_buffers") or (None,) * len(op.results)
        outputs = []
        for index, (is_map, outer) in enumerate(zip(plan.map_outputs, op.results)):
            name_out = self.namer.value(outer)
            if buffers[index] is not None:
                lines.append(f"{name_out} = {self.slot(buffers[index], outer, lines)}")
            else:
                shape = dims if is_map else plan.reduced_dims(dims)
                lines.append(f"{name_out} = np.empty({shape_code(shape)}, "
                             f"{dtype_code(outer.dtype)})")
            outputs.append(name_out)
        dense = {v: d for v, d in kernel.inputs}
        arrays = [f"_dense({self.expr(own(v))})" if d else self.expr(own(v))
                  for v, d in kernel.inputs]
        strides = [f"_stride(_dense({self.expr(own(v))}), {k})" if dense[v]
                   else f"_stride({self.expr(own(v))}, {k})" for v, k in kernel.strides]
        arrays += outputs
        lines.extend(self.empty_reduction_check(plan, dims))
        ints = "(" + "".join(f"{s}, " for s in strides) + ")"
        array_text = "(" + "".join(f"{a}, " for a in arrays) + ")"
        if kernel.style == "map":
            lines.append(f"_map({name!r}, {shape_var}, {ints}, {array_text})")
        else:
            lines.append(f"_reduce({name!r}, {kernel.style!r}, {shape_var}, {kernel.axes!r}, "
                         f"{ints}, {array_text}, {dtype_code(kernel.acc)})")
        return lines

    @staticmethod
    def empty_reduction_check(plan, dims) -> list[str]:
        """Lines raising NumPy's error when a reduction without identity (max, min) reduces an
        extent that is empty at run time (its kernel would return the accumulator's start, where
        NumPy and the interpreter raise)."""
        reduction = plan.reduction
        if reduction is None or reduction.opdef.reduction.has_identity:
            return []
        if all(plan.shape[a] for a in plan.axes):    # statically known and non-empty
            return []
        ufunc = plan.combine.ufunc.__name__
        message = f"zero-size array to reduction operation {ufunc} which has no identity"
        extent = " * ".join(dims[a] for a in plan.axes)
        return [f"if {extent} == 0:", f"    raise ValueError({message!r})"]

    @staticmethod
    def tag(plan) -> str:
        if plan.reduction is not None:
            return plan.reduction.name
        return "fused" if is_fusion(plan.op) else plan.op.name

    # --- the module ------------------------------------------------------------------------------
    def helpers_used(self) -> dict:
        """The helpers of the ops computed through CuPy (a fused group's members included; a
        region's body ops are lowered, and counted, one by one) and those of the module's own
        lines, with the checks of device data deferred to the end of ``run``
        (:mod:`.device_checks`)."""
        return device_checks.helpers({**helpers_of(self.host_ops, descend=is_fusion),
                                      **self.statement_helpers})

    def lower_op(self, op):
        """A kernel launch for a group (or single op) with CUDA lowerings, the group's ops one
        by one on CuPy for a fused group without; else as the NumPy generator (a loop's body
        then launches its own kernels)."""
        if op.opdef.category != SOURCE:
            plan = kernel_lowering.kernel_plan(op, self.options.accumulate_float64)
            if plan is not None:
                return self.launch(plan)
            kind = row_ops.row_kind(op, self.scalars)
            if kind is not None:
                return self.row_launch(op, kind)
            if is_fusion(op):
                return self.host_group(op)
        self.host_ops.append(op)
        return super().lower_op(op)

    def row_launch(self, op, kind) -> list[str]:
        """The launch of the row kernel computing ``op`` (:mod:`.row_ops`), rendered once per
        kind and types."""
        signature = row_ops.signature(op, kind)
        kernel = self.row_kernels.get(signature)
        if kernel is None:
            name = f"k{len(self.kernels)}_{kind}"
            source = row_ops.render(name, op, kind, kernel_lowering.BLOCK)
            suffixes = tuple(suffix for suffix, _ in row_ops.VARIANTS)
            kernel = kernel_lowering.Kernel(name, "rows", source, (), (), [], [], None, suffixes,
                                            tuple(name + s for s in suffixes), [])
            self.kernels.append(kernel)
            self.row_kernels[signature] = kernel
            runs = f"row kernel {name}"
        else:
            self.sharers.setdefault(kernel.name, []).append(op)
            runs = f"runs row kernel {kernel.name}, shared"
        return [comment(f"# {runs}")] + row_ops.launch_lines(self, kernel.name, op, kind)

    def generate_program(self, signature_inputs, signature_outputs) -> GeneratedProgram:
        body, helpers = self.finish(self.binding_lines()
                                    + self.lower_ops(self.program.ops, self.fetches))
        summary = comment(f"{len(self.program.ops)} top-level ops, {len(self.kernels)} "
                          f"kernels, {len(self.fetches)} outputs")
        source = kernel_lowering.render(
            "host.py.j2", symgrad_version=library_version(), helpers=helpers, body=body,
            functions=self.functions.lines(), summary=summary, inputs=ascii(signature_inputs),
            outputs=ascii(signature_outputs), wide=kernel_lowering.WIDE, dims=DIMS,
            block=kernel_lowering.BLOCK,
            deferred_checks=device_checks.NOW in self.helpers_used())
        prelude = kernel_lowering.render("prelude.cuh.j2")
        cuda_source = kernel_lowering.render(
            "program.cu.j2", symgrad_version=library_version(), summary=summary, prelude=prelude,
            kernels=[self.kernel_text(k) for k in self.kernels],
            kernel_names=[k.name for k in self.kernels])
        return GeneratedProgram(source, cuda_source,
                                {k.name: self.kernel_text(k) for k in self.kernels},
                                [e for k in self.kernels for e in k.entries], self.constants,
                                self.references())

    def kernel_text(self, kernel) -> str:
        """The kernel's source, its first comment line followed by the groups sharing it."""
        sharers = self.sharers.get(kernel.name)
        if not sharers:
            return kernel.source
        head, _, rest = kernel.source.partition("\n")
        groups = [op.attrs["group"] for op in sharers if is_fusion(op)]
        named = ([f"fused group{'s' if len(groups) > 1 else ''} {_ranges(groups)}"]
                 if groups else [])
        named += [f"{op.name} -> %{op.results[0].id}" for op in sharers if not is_fusion(op)]
        note = ctype.c_comment(f"also run by {', '.join(named)} (the same code on their "
                               f"own values)")
        return f"{head}\n//   {note}\n{rest}"

    def host_group(self, op) -> list[str]:
        """A fused group without CUDA lowerings for all its ops: its ops one by one on CuPy."""
        size = counted(len(op.blocks[0].ops), "op")
        lines = [comment(f"# fused group {op.attrs['group']} ({size}), on the host: some op has "
                         f"no CUDA emitter")]
        self.host_ops.append(op)
        for inner in op.blocks[0].ops:
            lines.append(f"# {comment(format_op_head(inner))}")
            lines.extend(self.simple(inner))
        return lines


def generate(program, fetches, options, inputs, outputs) -> GeneratedProgram:
    """The host module and CUDA source computing ``fetches`` of ``program``."""
    return HostGenerator(program, fetches, options).generate_program(inputs, outputs)
