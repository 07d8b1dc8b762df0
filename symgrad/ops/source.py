"""Source ops: program inputs (``data``), trainable state (``parameter``), ``constant`` and
filled tensors (``full``, ``zeros``, ``ones``)."""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes
from ..errors import PromotionWarning, ScopeError, ShapeError
from ..ir.dims import Symbol
from ..ir.location import user_stacklevel
from ..ir.program import current_block, default_main_program
from ..ir.value import Value, format_shape
from .core import SOURCE, Algebra, OpDef, bind, program_of, register
from .initializers import default_init


def _static_shape(shape, what, allow_unknown, names=None):
    """``shape`` as a tuple of ints and None (unknown); a named dim (a ``str`` identifier,
    where ``names`` is a list) is None in the shape and its name goes into ``names``."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"{what}: shape must be a list or tuple, got {type(shape).__name__}")
    out = []
    for d in shape:
        if names is not None:
            names.append(d if isinstance(d, str) else None)
            if isinstance(d, str):
                if not d.isidentifier():
                    raise ShapeError(f"{what}: a named dim must be an identifier, got {d!r} "
                                     f"in shape {list(shape)}")
                out.append(None)
                continue
        if isinstance(d, (bool, np.bool_)):
            raise TypeError(f"{what}: dims must be ints{', names' if names is not None else ''}"
                            f" or None, got the bool {d!r} in shape {list(shape)}")
        if d is None or (isinstance(d, (int, np.integer)) and d == -1):
            if not allow_unknown:
                raise ShapeError(f"{what}: shape {list(shape)} must be fully known")
            out.append(None)
        elif isinstance(d, (int, np.integer)) and d >= 0:
            out.append(int(d))
        else:
            raise ShapeError(f"{what}: invalid dim {d!r} in shape {list(shape)}")
    return tuple(out)


def _declared(types, attrs):
    return attrs["shape"], attrs["dtype"]


def _declared_dims(input_dims, attrs, shapes):
    """A data input's dims: its named dims are the program's symbols of those names; its other
    unknown dims are fresh anonymous ones."""
    names = attrs.get("names")
    if names is None:
        return [None]
    return [tuple(Symbol(name) if name is not None else d
                  for name, d in zip(names, attrs["shape"]))]


def _feed_only(**attrs):
    raise RuntimeError(f"input {attrs['name']!r} must be fed")


UNIFORM_CHECK_LIMIT = 1 << 16   # largest constant (elements) checked for holding one value


def _uniform_value(op):
    """The one value a constant holds everywhere (None if it holds several, or is too big to
    check cheaply)."""
    array = op.attrs["value"]
    if array.size == 0 or array.size > UNIFORM_CHECK_LIMIT:
        return None
    first = array.flat[0]
    return first.item() if np.all(array == first) else None


data_p = register(OpDef(
    "data", SOURCE, infer=_declared, impl=_feed_only, feedable=True, dims=_declared_dims,
    doc="A program input, fed at run time by name or position."))

parameter_p = register(OpDef(
    "parameter", SOURCE, infer=_declared, feedable=True,
    impl=lambda name, shape, dtype, init: init,
    doc="Trainable state: takes its ``init`` value unless fed."))

constant_p = register(OpDef(
    "constant", SOURCE, infer=lambda types, attrs: (attrs["value"].shape, attrs["value"].dtype),
    impl=lambda value: value, algebra=Algebra(fill=_uniform_value),
    doc="A constant array (stop_gradient=True)."))

full_p = register(OpDef(
    "full", SOURCE, infer=_declared,
    impl=lambda shape, dtype, fill_value: np.full(shape, fill_value, dtype=dtype),
    algebra=Algebra(fill=lambda op: op.attrs["fill_value"]),
    doc="A tensor of static shape filled with ``fill_value``."))


def _check_name(program, name):
    if current_block(program) is not program.global_block():
        raise ScopeError(f"{name!r}: data and parameters belong to the program's global block; "
                         f"create them before the cond/loop and read them in the function")
    if not isinstance(name, str) or not name:
        raise TypeError(f"a name must be a non-empty string, got {name!r}")
    for value in program.inputs + program.parameters:
        if value.name == name:
            raise ValueError(f"the program already has an input or parameter named {name!r}")


def data(name, shape, dtype="float32", stop_gradient=False):
    """A program input. A dim is an int, a name (``"batch"``: a symbolic dim, the same size
    wherever the program names it) or ``None``/``-1`` (an anonymous symbolic dim); symbolic
    dims are known when the program runs."""
    program = default_main_program()
    _check_name(program, name)
    names: list = []
    shape = _static_shape(shape, f"data {name!r}", allow_unknown=True, names=names)
    attrs = {"name": name, "shape": shape, "dtype": dtypes.as_dtype(dtype)}
    if any(names):
        attrs["names"] = tuple(names)
    value = bind(data_p, [], attrs, program=program)
    value.name = name
    value.stop_gradient = stop_gradient
    program.inputs.append(value)
    return value


def parameter(name, shape, dtype="float32", init=None, stop_gradient=False):
    """Trainable state with an initial value; it takes that value unless fed. ``init``: an
    array, a scalar (filled), a callable ``init(shape, dtype)`` (see
    :mod:`symgrad.initializers`) or None for the default: Glorot uniform for floating
    parameters of rank 2 or more (seeded by ``name``, so rebuilding gives the same values),
    zeros otherwise (:func:`~symgrad.initializers.default_init`)."""
    program = default_main_program()
    _check_name(program, name)
    shape = _static_shape(shape, f"parameter {name!r}", allow_unknown=False)
    dtype = dtypes.as_dtype(dtype)
    if init is None:
        value = default_init(name, shape, dtype)
    elif callable(init):
        value = np.asarray(init(shape, dtype), dtype=dtype)
    else:
        value = np.asarray(init, dtype=dtype)
        if value.ndim == 0 and shape:
            value = np.full(shape, value, dtype=dtype)
    if value.shape != shape:
        raise ShapeError(f"parameter {name!r}: init has shape {format_shape(value.shape)}, "
                         f"declared {format_shape(shape)}")
    value = np.array(value, order="C")
    value.flags.writeable = False
    result = bind(parameter_p, [], {"name": name, "shape": shape, "dtype": dtype, "init": value},
                  program=program)
    result.name = name
    result.stop_gradient = stop_gradient
    program.parameters.append(result)
    return result


def constant(value, dtype=None, name=None, program=None):
    """A constant (``stop_gradient=True``). ``dtype`` defaults to NumPy's for arrays, and to
    float32 for Python floats (int64 for ints, bool for bools)."""
    if dtype is None and isinstance(value, float) and not isinstance(value, np.generic):
        dtype = dtypes.DEFAULT_FLOAT
    array = np.array(value, dtype=None if dtype is None else dtypes.as_dtype(dtype))
    array = np.array(array, dtype=dtypes.as_dtype(array.dtype), order="C")
    array.flags.writeable = False
    result = bind(constant_p, [], {"value": array},
                  program=program or default_main_program())
    result.name = name
    result.stop_gradient = True
    return result


def full(shape, fill_value, dtype="float32"):
    shape = _static_shape(shape, "full", allow_unknown=False)
    dtype = dtypes.as_dtype(dtype)
    return bind(full_p, [], {"shape": shape, "dtype": dtype,
                             "fill_value": dtype.type(fill_value).item()})


def zeros(shape, dtype="float32"):
    return full(shape, 0, dtype)


def ones(shape, dtype="float32"):
    return full(shape, 1, dtype)


# --- converting Python/NumPy inputs ---------------------------------------------------------------
def as_value(x, dtype=None, program=None) -> Value:
    """A Value for ``x``: Values pass through; scalars and arrays become constants."""
    if isinstance(x, Value):
        return x
    return constant(x, dtype=dtype, program=program)


def is_python_scalar(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


_warned_promotions: set = set()   # (Value dtype, promoted dtype) pairs already warned about


def warn_if_arrays_promote(values, strong):
    """Warn (once per pair of dtypes) when a NumPy array, NumPy scalar or list operand widens
    the floating dtype of the Value operands (``float32 Value * float64 array`` is float64, as
    in NumPy): that silently turns a float32 graph into float64."""
    if not values or len(strong) == len(values):
        return
    own = dtypes.promote(*(v.dtype for v in values))
    promoted = dtypes.promote(*strong)
    if own.kind != "f" or promoted.kind != "f" or promoted == own:
        return
    if (own, promoted) in _warned_promotions:
        return
    _warned_promotions.add((own, promoted))
    warnings.warn(
        f"a {promoted} array operand promotes {own} Values to {promoted} (NumPy's rule; "
        f"arrays, NumPy scalars and lists are not weak like Python scalars). Pass "
        f"array.astype('{own}') to stay in {own}, or sg.constant(array, dtype='{promoted}') "
        f"to make the promotion explicit. Shown once per pair of dtypes.",
        PromotionWarning, stacklevel=user_stacklevel())


def as_values(*args):
    """Convert operands of an elementwise op, giving weak Python scalars the dtype that NumPy 2
    promotion gives them against the Value operands (``float32 * 2.0`` stays float32). A
    Python scalar becomes one constant per program, dtype and value, reused by later ops.
    Arrays, NumPy scalars and lists promote as in NumPy (:func:`warn_if_arrays_promote`)."""
    values = [a for a in args if isinstance(a, Value)]
    if len(values) == len(args):
        return values
    program = program_of(values) if values else None
    strong = [v.dtype for v in values] + [np.asarray(a).dtype for a in args
                                         if not isinstance(a, Value) and not is_python_scalar(a)]
    warn_if_arrays_promote(values, strong)
    out = []
    for a in args:
        if isinstance(a, Value):
            out.append(a)
        elif is_python_scalar(a):
            dtype = dtypes.promote(*strong, a) if strong else None
            if program is None:
                out.append(as_value(a, dtype=dtype))
            else:
                # -0.0 == 0.0: the key keeps the sign of a float zero apart
                key = (dtype, type(a), a, str(a) if isinstance(a, float) else None)
                out.append(program.cached_scalar_constant(
                    key, lambda: as_value(a, dtype=dtype, program=program)))
        else:
            out.append(as_value(a, program=program))
    return out
