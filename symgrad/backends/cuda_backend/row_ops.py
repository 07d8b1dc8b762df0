"""Kernels of the row ops: the softmax family (``softmax_cross_entropy``'s gradient included)
and ``one_hot``, one launch each.

Through CuPy, ``softmax_cross_entropy`` alone is a dozen launches (the max, the shift, exp, the
sum, log, the gather of the labels' entries...), each with CuPy's host overhead. On an H100 the
W1 MLP spent most of its time queuing such launches. An op with a rule in :data:`KINDS` whose
kind applies to its types is one kernel instead, from ``cuda/row_op.cu.j2``: one warp per row
along the class axis (``n`` elements ``inner`` apart, ``outer * inner`` rows), the max, then the
sum of ``exp(x - max)`` accumulated in double, then the row's results. Row kernels of the same
kind and types are one kernel (sizes are arguments). The host module's lines for
``%16 = softmax_cross_entropy(%15, %labels)`` over ``[batch, 10]`` read::

    check_class_indices(labels, 10, 'softmax_cross_entropy')
    t16 = np.empty((_d0,), np.float32)
    _rows('k2_cross_entropy', (_d0, 10, 1), (_dense(t15), _dense(labels), t16, ))

The label check is queued on the device and read at the end of the call
(:mod:`.device_checks`); an empty class axis is NumPy's error for the max of an empty array,
raised before the launch.
"""
from __future__ import annotations

from ...ir.dims import product
from ...ir.printer import format_op_head
from ...ops import kernels as numpy_kernels
from ..dim_code import shape_code
from ..host.literals import dtype_code
from ..row_kinds import checks_labels, labels_of, row_kinds
from . import ctype
from .kernels import render as render_template

# entry points of every row kernel: 32- and 64-bit indices (one kernel serves all sizes)
VARIANTS = (("", "int"), ("_i64", "long long"))
# op name -> the kind of its kernel for the op's types, or None (it then runs through CuPy);
# a one_hot result of 16-bit floats would need the prelude's conversions: CuPy computes it
KINDS = row_kinds(
    lambda value: value.dtype.kind in "iu" and value.dtype.name in ctype.STORAGE,
    lambda dtype: dtype.name in ctype.STORAGE and dtype.name not in ("float16", "bfloat16"))
# the inputs of each kind, in the kernel's order, with their pointer names
_POINTERS = {"softmax": ("x",), "log_softmax": ("x",), "cross_entropy": ("x", "labels"),
             "soft_cross_entropy": ("x", "p"), "cross_entropy_grad": ("x", "labels", "g"),
             "one_hot": ("labels",)}


def row_kind(op, scalars) -> str | None:
    """The kind of ``op``'s row kernel, or None when it runs through CuPy (no rule, types the
    kernel does not compute, or an input inlined as a literal)."""
    kind_of = KINDS.get(op.opdef.name)
    if kind_of is None or any(v in scalars for v in op.inputs) or len(op.results) != 1:
        return None
    return kind_of(op)


def signature(op, kind) -> tuple:
    """What makes two row ops one kernel: the kind and the C types of the arrays."""
    return (kind,) + tuple(ctype.storage_type(v.dtype) for v in op.inputs + op.results)


def render(name, op, kind, block) -> str:
    """The CUDA text of row kernel ``name`` computing ``op`` (see the module docstring)."""
    types = [ctype.storage_type(v.dtype) for v in op.inputs]
    ptrs = [f"const {t}* __restrict__ {p}" for t, p in zip(types, _POINTERS[kind])]
    result = ctype.storage_type(op.results[0].dtype)
    ptrs.append(f"{result}* __restrict__ y")
    labels = labels_of(op, kind)
    return render_template(
        "row_op.cu.j2", name=name, kind=kind, note=ctype.c_comment(format_op_head(op)),
        ints=("rows", "n", "inner"), ptrs=ptrs, variants=VARIANTS, block=block,
        T=types[0], O=result, L=ctype.storage_type(labels.dtype) if labels is not None else "")


def launch_lines(gen, name, op, kind) -> list[str]:
    """The host module's lines launching row kernel ``name`` for ``op`` (``gen``: the CUDA
    host generator, for names, dims and values)."""
    axis = op.attrs["axis"]
    first = op.inputs[0]
    dims = first.dims
    if kind == "one_hot":
        n = str(op.attrs["num_classes"])
        outer, inner = dims[:axis], dims[axis:]
    else:
        n = gen.dim_code(dims[axis])
        outer, inner = dims[:axis], dims[axis + 1:]
    lines = []
    if kind != "one_hot" and not (isinstance(first.dims[axis], int) and first.dims[axis] > 0):
        lines += [f"if {n} == 0:",
                  "    raise ValueError('zero-size array to reduction operation maximum which "
                  "has no identity')"]
    if checks_labels(op, kind):
        lines.append(f"check_class_indices({gen.expr(labels_of(op, kind))}, {n}, "
                     f"'softmax_cross_entropy')")
        gen.statement_helpers["check_class_indices"] = numpy_kernels.check_class_indices
    result = op.results[0]
    out = gen.namer.value(result)
    lines.append(f"{out} = np.empty({shape_code(gen.shape_of(result))}, "
                 f"{dtype_code(result.dtype)})")
    sizes = f"({gen.dim_code(product(outer))}, {n}, {gen.dim_code(product(inner))})"
    arrays = "(" + "".join(f"_dense({gen.expr(v)}), " for v in op.inputs) + f"{out}, )"
    lines.append(f"_rows({name!r}, {sizes}, {arrays})")
    return lines

