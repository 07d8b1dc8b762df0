"""The NumPy backend's lowering table: how each op becomes NumPy source.

A rule is a :class:`Lowering`: ``emit(args, attrs, out=None) -> str`` gives a NumPy expression
over the argument expressions ``args`` (``out`` None) or a statement writing into the
preallocated array named ``out``; ``helpers`` are pure-NumPy functions the generated module
must contain (their source is copied in, so generated code runs with NumPy alone); a region op's
rule has ``statements(gen, op) -> lines`` instead. A helper is a function (its source is
copied), a :class:`~symgrad.ops.core.HelperSource` (text written as is) or a
:class:`~symgrad.ops.core.HelperReference` (bound into the module when it is loaded; such a
module cannot be saved); two different helpers may not share a name. Build emitters with
:func:`ufunc`, :func:`expr` or :func:`call`, and add a rule with :func:`register_lowering`
(user ops too).

An op whose reference is a NumPy ufunc (:attr:`~symgrad.ops.core.OpDef.ufunc`) lowers to that
ufunc without a rule of its own.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ...errors import IndexOutOfRangeError
from ...ops import kernels
from ...ops.activation import gelu_ref, leaky_relu_ref
from ...ops.contraction import _sg_einsum
from ...ops.core import HelperSource, code_int
from ...ops.cumulative import _sg_cumsum, _sg_linear_recurrence
from ...ops.elementwise import _sg_where, sigmoid_ref
from ...ops.indexing import (_sg_check_indices, _sg_take, _sg_take_along_axis,
                             _sg_take_along_axis_grad, _sg_take_grad)
from ...ops.linalg import _sg_matmul
from ...ops.nn_ops import CONV_ATTRS, POOL_ATTRS
from ...ops.random import ATTRS as RANDOM_ATTRS
from ...ops.random import NUMPY_HELPERS as RANDOM_HELPERS
from ...ops.random import PARAMS as RANDOM_PARAMS
from ...ops.random import RANDOM_OPS
from ...ops.reduction import _sg_logsumexp
from ...ops.shape import _sg_slice_scatter, index_code
from ...ops.special import _sg_erf
from ..dim_code import shape_code
from ..lowering import LoweringTable


@dataclasses.dataclass(frozen=True)
class Lowering:
    """How the NumPy backend lowers one op (see the module docstring)."""

    emit: Callable | None = None
    helpers: tuple = ()
    statements: Callable | None = None


# --- emitter builders -------------------------------------------------------------------------
_NON_FINITE = {"nan": "float('nan')", "inf": "float('inf')", "-inf": "-float('inf')"}


def format_attr(value) -> str:
    """Python source for an attr value: a literal that evaluates back to it (``nan`` and
    ``inf`` included, inside containers too). Attr text reaches generated code only this way
    (or through :func:`~symgrad.ops.core.code_int`), so an attr can never inject code."""
    if isinstance(value, _Code):
        return str(value)
    if isinstance(value, np.dtype):   # bfloat16: the generated module imports ml_dtypes
        return f"{'ml_dtypes' if value.kind == 'V' else 'np'}.{value.name}"
    if isinstance(value, np.ndarray):
        return f"np.array({format_attr(value.tolist())}, dtype={format_attr(value.dtype)})"
    if isinstance(value, np.generic):
        return format_attr(value.item())
    if isinstance(value, float):
        return _NON_FINITE.get(repr(value), repr(value))
    if isinstance(value, tuple):
        items = [format_attr(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(format_attr(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{format_attr(k)}: {format_attr(v)}" for k, v in value.items()) \
            + "}"
    return repr(value)


def format_attrs(attrs: dict) -> dict:
    return {k: format_attr(v) for k, v in attrs.items()}


def ufunc(name: str):
    """Emitter for an op that is exactly the NumPy ufunc ``name`` (``"np.tanh"``)."""
    def emit(args, attrs, out=None):
        joined = ", ".join(args)
        return f"{name}({joined}, out={out})" if out else f"{name}({joined})"
    emit.ufunc = name
    return emit


def expr(template: str, out_kw: bool = False):
    """Emitter from a format string over ``{0}``, ``{1}``... and attr names. With ``out``: pass
    ``out=`` when ``out_kw`` (the function accepts it), else assign ``out[...] = expr``."""
    def emit(args, attrs, out=None):
        code = template.format(*args, **format_attrs(attrs))
        if out is None:
            return code
        if out_kw:
            return code[:-1] + f", out={out})"
        return f"{out}[...] = {code}"
    emit.template = template
    return emit


def call(function_name: str, attr_names=(), site: bool = False, result_shape=None,
         rows: bool = False):
    """Emitter calling a helper with args and the named attrs (as keywords; an attr the op does
    not have is left to the helper's default). With ``site``, also ``site=`` the op's name and
    the line that built it (:func:`~symgrad.ir.location.op_site`), for the helper's run-time
    errors. With ``result_shape`` (an attr name), that attr is the result's shape rendered from
    the binding and the args stop before the operand giving it (a ``like`` input). With
    ``rows``, the helper takes ``over_rows=`` (see :mod:`symgrad.ops.kernels`) and gets the
    generator's (``over_rows=_POOL.over_rows`` in a NumPy module) when it has one."""
    def emit(args, attrs, out=None, site=None, shapes=None, over_rows=None):
        if result_shape is not None:
            args = args[:_SHAPED_ARGS]
            attrs = {**attrs, result_shape: _Code(shape_code(shapes[1][0]))}
        parts = list(args) + [f"{k}={format_attr(attrs[k])}" for k in attr_names if k in attrs]
        if site is not None:
            parts.append(f"site={ascii(site)}")
        if over_rows is not None:
            parts.append(f"over_rows={over_rows}")
        code = f"{function_name}({', '.join(parts)})"
        return code if out is None else f"{out}[...] = {code}"
    emit.wants_site = site
    emit.wants_shapes = result_shape is not None
    emit.wants_rows = rows
    return emit


_SHAPED_ARGS = 2   # the operands of a helper given its result's shape: (gradient, indices)


def _emit_matmul(args, attrs, out=None, pool=None):
    """``np.matmul(a, b)``; in a module with a thread pool (``pool``: its source, ``_POOL``)
    ``_sg_matmul(a, b, pool=_POOL)``, which runs a small product on a single-threaded BLAS
    (:func:`~symgrad.ops.linalg._sg_matmul`; the generator adds that helper then)."""
    head = "np.matmul(" if pool is None else "_sg_matmul("
    tail = "" if pool is None else f", pool={pool}"
    return f"{head}{args[0]}, {args[1]}{tail}" + ("" if out is None else f", out={out}") + ")"


_emit_matmul.pool_helpers = (_sg_matmul,)


class _Code(str):
    """Source text that :func:`format_attr` writes as it is (a shape rendered from dims)."""


def standin(error) -> HelperSource:
    """The helper defining a NumPy-only stand-in for ``error`` (a class of
    :data:`~symgrad.errors.GENERATED_CODE_ERRORS`): a subclass of its builtin base with its
    name, so the module runs without symgrad; symgrad's loaders bind ``error`` itself over it
    (:func:`~symgrad.backends.host.bind_references`)."""
    name = error.__name__
    base = next(b for b in error.__mro__ if b.__module__ == "builtins").__name__
    doc = (f"symgrad.errors.{name} where symgrad loads this module (it binds that\n    class "
           f"here); this NumPy-only stand-in elsewhere.")
    return HelperSource(name, f'class {name}({base}):\n    """{doc}"""')


def _as_ufunc(opdef):
    if opdef.ufunc is None:
        return None
    return Lowering(ufunc(f"np.{opdef.ufunc.__name__}"))


LOWERINGS = LoweringTable("numpy", derive=_as_ufunc)


def register_lowering(op, emit=None, helpers=(), statements=None) -> None:
    """Lower ``op`` (an OpDef or a name) with ``emit`` and ``helpers``, or with
    ``statements`` for a region op (see the module docstring); ``emit=None`` and
    ``statements=None`` remove its rule."""
    rule = None if emit is None and statements is None else Lowering(emit, tuple(helpers),
                                                                     statements)
    LOWERINGS.register(op, rule)


def rule_of(op) -> Lowering:
    """The rule lowering ``op`` (an Operation); a clear error when there is none."""
    rule = LOWERINGS.rule(op.opdef)
    if rule is None:
        raise NotImplementedError(f"op {op.name!r} has no NumPy lowering; add one with "
                                  f"symgrad.backends.host.lowering.register_lowering")
    return rule


def exact_ufunc(opdef) -> bool:
    """Does ``opdef`` lower to a bare ufunc call (which accepts ``out=`` and weak scalars)?"""
    rule = LOWERINGS.rule(opdef)
    return rule is not None and getattr(rule.emit, "ufunc", None) is not None


# --- elementwise ops that are not a ufunc -----------------------------------------------------
def _emit_cast(args, attrs, out=None):
    dtype = format_attrs(attrs)["dtype"]
    if out is None:
        return f"{args[0]}.astype({dtype})"
    return f"np.copyto({out}, {args[0]}, casting='unsafe')"


def _fill_emitter(fill):
    def emit(args, attrs, out=None):
        if out is not None:
            return f"{out}.fill({fill})"
        dtype = format_attrs(attrs)["dtype"]
        return f"np.full_like({args[0]}, {fill}, dtype={dtype})"
    return emit


register_lowering("round", expr("np.round({0})", out_kw=True))
register_lowering("where", expr("_sg_where({0}, {1}, {2})", out_kw=True), (_sg_where,))
register_lowering("clip", expr("np.clip({0}, {1}, {2})", out_kw=True))
register_lowering("sigmoid", call("sigmoid_ref"), (sigmoid_ref,))
register_lowering("cast", _emit_cast)
register_lowering("zeros_like", _fill_emitter(0))
register_lowering("ones_like", _fill_emitter(1))
register_lowering("relu", expr("np.maximum({0}, 0)", out_kw=True))
register_lowering("gelu", call("gelu_ref"), (gelu_ref,))
register_lowering("softplus", expr("np.logaddexp(0, {0})", out_kw=True))
register_lowering("leaky_relu", call("leaky_relu_ref", ("negative_slope",)), (leaky_relu_ref,))
register_lowering("erf", call("_sg_erf"), (_sg_erf,))


# --- reductions -------------------------------------------------------------------------------
def _reduction_emitter(function, attr_names=("axis", "keepdims", "dtype"), out_kw=True):
    """Emitter ``function(x, axis=..., keepdims=..[, dtype=..])``; with ``out``, passed as
    ``out=`` when ``out_kw`` (NumPy's reductions take it), else assigned into."""
    def emit(args, attrs, out=None):
        shown = format_attrs({k: attrs[k] for k in attr_names if k in attrs})
        parts = [args[0]] + [f"{k}={v}" for k, v in shown.items()]
        if out is not None and out_kw:
            parts.append(f"out={out}")
        code = f"{function}({', '.join(parts)})"
        return code if out is None or out_kw else f"{out}[...] = {code}"
    return emit


def shaped(emit):
    """Mark ``emit`` as taking ``shapes=`` (see :func:`~.ops_text.numpy_emitter`)."""
    emit.wants_shapes = True
    return emit


@shaped
def _emit_size(args, attrs, out=None, shapes=None):
    dims = shapes[0][0]
    count = " * ".join([dims[int(a)] for a in attrs["axis"]] or ["1"])
    code = f"np.asarray({count}, dtype={attrs['dtype']!r})"
    return code if out is None else f"{out}[...] = {code}"


for _name in ("sum", "mean", "prod", "max", "min"):
    register_lowering(_name, _reduction_emitter(f"np.{_name}"))
register_lowering("argmax", _reduction_emitter("np.argmax", ("axis", "keepdims")))
register_lowering("argmin", _reduction_emitter("np.argmin", ("axis", "keepdims")))
register_lowering("logsumexp", _reduction_emitter("_sg_logsumexp", out_kw=False),
                  (_sg_logsumexp,))
register_lowering("size", _emit_size)
register_lowering("matmul", _emit_matmul)
register_lowering("assign", expr("{0}"))
register_lowering("einsum", call("_sg_einsum", ("subscripts",)), (_sg_einsum,))
register_lowering("cumsum", call("_sg_cumsum", ("axis", "reverse", "dtype")), (_sg_cumsum,))
register_lowering("cumprod", lambda args, attrs, out=None: (
    f"np.cumprod({args[0]}, axis={code_int(attrs['axis'])}"
    + (f", dtype={format_attr(np.dtype(attrs['dtype']))}" if "dtype" in attrs else "") + ")"))
register_lowering("linear_recurrence", call("_sg_linear_recurrence", ("axis", "reverse")),
                  (_sg_linear_recurrence,))
register_lowering("full", expr("np.full({shape}, {fill_value}, {dtype})"))
for _op in RANDOM_OPS:   # (step, counter), then the result's shape from the binding, not a like
    register_lowering(_op, call(_op.impl.__name__, RANDOM_ATTRS + RANDOM_PARAMS[_op.name],
                                result_shape="shape"), RANDOM_HELPERS + (_op.impl,))


# --- data movement ----------------------------------------------------------------------------
def _to_result_shape(function):
    """Emitter ``function(x, result shape)``: the result's shape rendered from the binding
    (``reshape``, ``broadcast_to`` and their ``_like`` forms, whose other operand only gives
    that shape)."""
    @shaped
    def emit(args, attrs, out=None, shapes=None):
        code = f"{function}({args[0]}, {shape_code(shapes[1][0])})"
        return code if out is None else f"{out}[...] = {code}"
    return emit


def _join_emitter(function):
    def emit(args, attrs, out=None):
        target = "" if out is None else f", out={out}"
        return f"{function}([{', '.join(args)}], axis={code_int(attrs['axis'])}{target})"
    return emit


def _emit_split(args, attrs, out=None):
    spec = attrs["indices_or_sections"]
    spec = code_int(spec) if isinstance(spec, (int, np.integer)) else \
        f"({''.join(code_int(i) + ', ' for i in spec)})"
    return f"np.split({args[0]}, {spec}, axis={code_int(attrs['axis'])})"


def _emit_slice(args, attrs, out=None):
    code = f"{args[0]}[{index_code(attrs['index'])}]"
    return code if out is None else f"{out}[...] = {code}"


@shaped
def _emit_slice_scatter(args, attrs, out=None, shapes=None):
    shape = shape_code(shapes[1][0])
    code = f"_sg_slice_scatter({args[0]}, {shape}, np.s_[{index_code(attrs['index'])}])"
    return code if out is None else f"{out}[...] = {code}"


@shaped
def _emit_split_like(args, attrs, out=None, shapes=None):
    axis = code_int(attrs["axis"])
    bounds, total = [], "0"
    for dims in shapes[0][1:-1]:   # each piece as long as its reference along the axis
        total = dims[attrs["axis"]] if total == "0" else f"{total} + {dims[attrs['axis']]}"
        bounds.append(total)
    return f"np.split({args[0]}, [{', '.join(bounds)}], axis={axis})"


register_lowering("reshape", _to_result_shape("np.reshape"))
register_lowering("reshape_like", _to_result_shape("np.reshape"))
register_lowering("transpose", expr("np.transpose({0}, {axes})"))
register_lowering("broadcast_to", _to_result_shape("np.broadcast_to"))
register_lowering("broadcast_like", _to_result_shape("np.broadcast_to"))
register_lowering("expand_dims", expr("np.expand_dims({0}, {axis})"))
register_lowering("squeeze", expr("np.squeeze({0}, {axis})"))
register_lowering("concatenate", _join_emitter("np.concatenate"))
register_lowering("stack", _join_emitter("np.stack"))
register_lowering("split", _emit_split)
register_lowering("split_like", _emit_split_like)
register_lowering("pad", expr("np.pad({0}, {pad_width}, constant_values={constant_values})"))
register_lowering("slice", _emit_slice)
register_lowering("slice_scatter", _emit_slice_scatter, (_sg_slice_scatter,))
# gathers and their scatters check their indices (one min and max per array) and name the op
_CHECK = (standin(IndexOutOfRangeError), _sg_check_indices)
register_lowering("take", call("_sg_take", ("axis",), site=True), _CHECK + (_sg_take,))
register_lowering("take_grad", call("_sg_take_grad", ("shape", "axis"), site=True,
                                    result_shape="shape"), _CHECK + (_sg_take_grad,))
register_lowering("take_along_axis", call("_sg_take_along_axis", ("axis",), site=True),
                  _CHECK + (_sg_take_along_axis,))
register_lowering("take_along_axis_grad",
                  call("_sg_take_along_axis_grad", ("shape", "axis"), site=True,
                       result_shape="shape"),
                  _CHECK + (_sg_take_along_axis_grad,))


# --- convolution, pooling, softmax ------------------------------------------------------------
_CONV = (kernels.serial_rows, kernels.pad_hw, kernels.window_view, kernels.window_scatter,
         kernels.crop_hw, kernels.conv_columns, kernels.window_counts)
_POOL = (kernels.pad_hw, kernels.window_taps)
_MAX = _POOL + (kernels.window_max, kernels.window_maxima, kernels.crop_hw)
_AVG = _POOL + (kernels.avg_pool2d_sums, kernels.avg_pool2d_counts)
_SCATTER = (kernels.window_scatter, kernels.crop_hw)

register_lowering("conv2d", call("conv2d_forward", CONV_ATTRS, rows=True),
                  _CONV + (kernels.conv2d_forward,))
register_lowering("conv2d_input_grad",
                  call("conv2d_input_grad", ("input_hw",) + CONV_ATTRS, rows=True),
                  _CONV + (kernels.conv2d_input_grad,))
register_lowering("conv2d_weight_grad",
                  call("conv2d_weight_grad", ("kernel_hw",) + CONV_ATTRS, rows=True),
                  _CONV + (kernels.conv2d_weight_grad,))
register_lowering("max_pool2d", call("max_pool2d_forward", POOL_ATTRS, rows=True),
                  (kernels.pad_hw, kernels.serial_rows, kernels.window_counts,
                   kernels.window_max, kernels.max_pool2d_forward))
register_lowering("max_pool2d_grad", call("max_pool2d_grad", POOL_ATTRS, rows=True),
                  _MAX + (kernels.serial_rows, kernels.max_pool2d_grad))
register_lowering("max_pool2d_select", call("max_pool2d_select", POOL_ATTRS),
                  _MAX + (kernels.max_pool2d_select,))
register_lowering("avg_pool2d", call("avg_pool2d_forward", POOL_ATTRS),
                  _AVG + (kernels.avg_pool2d_forward,))
register_lowering("avg_pool2d_grad", call("avg_pool2d_grad", ("input_hw",) + POOL_ATTRS),
                  _AVG + _SCATTER + (kernels.avg_pool2d_grad,))
register_lowering("softmax", call("softmax_forward", ("axis",)), (kernels.softmax_forward,))
register_lowering("log_softmax", call("log_softmax_forward", ("axis",)),
                  (kernels.log_softmax_forward,))
register_lowering("softmax_cross_entropy", call("softmax_cross_entropy_forward", ("axis",)),
                  (kernels.log_softmax_forward, kernels.check_class_indices,
                   kernels.softmax_cross_entropy_forward))
register_lowering("softmax_cross_entropy_grad", call("softmax_cross_entropy_grad", ("axis",)),
                  (kernels.softmax_forward, kernels.check_class_indices,
                   kernels.softmax_cross_entropy_grad))
register_lowering("one_hot", call("one_hot_forward", ("num_classes", "dtype", "axis", "strict")),
                  (kernels.check_class_indices, kernels.one_hot_forward))
