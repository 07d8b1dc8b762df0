"""Program signatures and feed checking.

A compiled program's signature lists its ``data`` inputs (in creation order: the positional
feed order) and its parameters. Feeds are checked against it at call time: a missing or
unknown input, a wrong rank, a wrong size of a known dim or a wrong dtype kind is a clear
error naming the input. An input that only the program's updates need (not its fetches) is
required all the same, since every call applies the updates; a missing one is an error that
says so and names the way to compile without them (``updates=False``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import dtypes
from ..errors import FeedError, FeedTypeError
from ..ir.value import format_shape

_KIND_NAMES = {"f": "floating", "i": "integer", "u": "integer", "b": "bool"}


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple          # ints and None for unknown dims
    dtype: np.dtype
    kind: str             # "data" or "parameter"
    required: bool        # the fetches or the updates need it (a parameter never: it has init)
    updates_only: bool = False   # required, but only the updates (state outputs) need it

    def to_json(self):
        """The manifest's form; ``updates_only`` is written only where it is true."""
        obj = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.name,
               "kind": self.kind, "required": self.required}
        if self.updates_only:
            obj["updates_only"] = True
        return obj

    @classmethod
    def from_json(cls, obj):
        return cls(obj["name"], tuple(obj["shape"]), np.dtype(obj["dtype"]), obj["kind"],
                   obj["required"], obj.get("updates_only", False))


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    name: str | None
    shape: tuple
    dtype: np.dtype

    def to_json(self):
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.name}

    @classmethod
    def from_json(cls, obj):
        return cls(obj["name"], tuple(obj["shape"]), np.dtype(obj["dtype"]))


def feedable_sources(ops) -> set:
    """The source Values (``data`` inputs, parameters) that the ops ``ops`` include."""
    return {op.results[0] for op in ops if op.opdef.feedable}


def build_signature(program, for_fetches, for_updates=frozenset()):
    """InputSpecs for the program's data inputs then parameters. ``for_fetches`` and
    ``for_updates``: the sets of source Values the fetches and the state outputs depend on."""
    specs = [InputSpec(v.name, v.shape, v.dtype, "data", v in for_fetches or v in for_updates,
                       v not in for_fetches and v in for_updates)
             for v in program.inputs]
    specs += [InputSpec(v.name, v.shape, v.dtype, "parameter", False)
              for v in program.parameters]
    return specs


def _dtype_kind(dtype):
    kind = dtypes.kind(dtype)
    return "i" if kind == "u" else kind


def check_feed(spec: InputSpec, value) -> np.ndarray:
    """``value`` as an array of the input's dtype, or a clear error naming the input."""
    on_device = hasattr(value, "__cuda_array_interface__")   # CuPy & co.: checked in place
    if on_device:
        _check_device_array(spec, value)
    is_array = on_device or isinstance(value, (np.ndarray, np.generic))
    if not is_array:
        try:
            value = np.asarray(value)
        except Exception as exc:
            raise FeedTypeError(f"input {spec.name!r}: cannot convert {type(value).__name__} "
                                f"to an array ({exc})") from None
        if value.dtype.kind not in "biuf":
            raise FeedTypeError(f"input {spec.name!r}: expected {spec.dtype} data, got "
                                f"{type(value).__name__} of dtype {value.dtype}")
    array = value if on_device else np.asarray(value)
    expected_kind = _dtype_kind(spec.dtype)
    got_kind = _dtype_kind(array.dtype)
    if got_kind != expected_kind and (is_array or not _lossless_python(expected_kind, got_kind)):
        raise FeedTypeError(
            f"input {spec.name!r}: expected {_KIND_NAMES.get(expected_kind, expected_kind)} "
            f"data ({spec.dtype}), got {array.dtype}")
    if array.ndim != len(spec.shape):
        raise FeedError(f"input {spec.name!r}: expected rank {len(spec.shape)} with shape "
                        f"{format_shape(spec.shape)}, got shape {format_shape(array.shape)}")
    for axis, (want, got) in enumerate(zip(spec.shape, array.shape)):
        if want is not None and want != got:
            raise FeedError(f"input {spec.name!r}: dim {axis} must be {want} (declared shape "
                            f"{format_shape(spec.shape)}), got shape {format_shape(array.shape)}")
    if array.dtype != spec.dtype:
        array = array.astype(spec.dtype)
    return array


def _check_device_array(spec, value):
    """A feed claiming ``__cuda_array_interface__`` must be an array object (dtype, shape,
    ndim, astype), as CuPy's are; anything else is a FeedTypeError, not an AttributeError."""
    try:
        dtype = np.dtype(value.dtype)
        shape = tuple(value.shape)
        fine = (value.ndim == len(shape) and callable(value.astype)
                and all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape))
    except Exception:   # any attribute missing or malformed
        dtype, fine = None, False
    if not fine or dtype.kind not in "biuf":
        raise FeedTypeError(f"input {spec.name!r}: {type(value).__name__} has "
                            f"__cuda_array_interface__ but is not a usable device array "
                            f"(needs a numeric dtype, shape, ndim and astype); pass a CuPy or "
                            f"NumPy array")


def _lossless_python(expected_kind, got_kind):
    """Python ints are accepted where floats are expected, and bools where numbers are."""
    return (expected_kind == "f" and got_kind in "ib") or (expected_kind == "i" and got_kind == "b")


def bind_feeds(signature, args, kwargs, updates=()) -> dict:
    """Map positional (``data`` order) and keyword feeds to checked arrays by input name.
    ``updates``: the names of the parameters the program assigns (for the error on a missing
    input that only the updates need)."""
    data_specs = [s for s in signature if s.kind == "data"]
    by_name = {s.name: s for s in signature}
    if len(args) > len(data_specs):
        raise TypeError(f"the program takes {len(data_specs)} positional inputs "
                        f"({', '.join(s.name for s in data_specs)}), got {len(args)}")
    feeds = {}
    for spec, value in zip(data_specs, args):
        feeds[spec.name] = value
    for name, value in kwargs.items():
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise FeedError(f"unknown input {name!r}; the program's inputs are: {known}")
        if name in feeds:
            raise TypeError(f"input {name!r} was given both by position and by name")
        feeds[name] = value
    missing = [s for s in signature if s.required and s.name not in feeds]
    if missing:
        raise FeedError(_missing_feeds(missing, updates))
    return {name: check_feed(by_name[name], value) for name, value in feeds.items()}


def _missing_feeds(missing, updates) -> str:
    """The message for the required inputs ``missing`` (InputSpecs); for those only the
    updates need, it names the updated parameters and ``updates=False``."""
    message = ("missing feed for input" + ("s " if len(missing) > 1 else " ")
               + ", ".join(repr(s.name) for s in missing))
    only = [s.name for s in missing if s.updates_only]
    if not only:
        return message
    updates = list(updates)
    shown = ", ".join(map(repr, updates[:4])) + (f" and {len(updates) - 4} more"
                                                 if len(updates) > 4 else "")
    return (f"{message}. Only the program's updates need "
            f"{', '.join(map(repr, only))}: the program assigns {shown or 'parameters'} "
            f"(optimizer updates, sg.assign), and every call applies them whatever it "
            f"fetches. To compute the "
            f"fetches without updating the state (evaluation, inference), compile with "
            f"sg.compile(..., updates=False); to train, feed "
            f"{'it' if len(only) == 1 else 'them'}")
