"""The op library: the registry and one front-end function per op.

Importing this package registers every built-in op. Each area lives in its own module and
lists its front-end functions in ``__all__``; this package re-exports them.
"""
import importlib as _importlib

from .core import (CATEGORIES, ELEMENTWISE, INJECTIVE, OPAQUE, REDUCTION, REGISTRY, SOURCE,
                   OpDef, as_value, as_values, bind, get_op, register)
from .source import constant, data, full, ones, parameter, zeros

__all__ = ["constant", "data", "full", "ones", "parameter", "zeros"]

for _area in ("elementwise", "activation", "reduction", "shape", "linalg", "nn_ops"):
    try:
        _module = _importlib.import_module(f"{__name__}.{_area}")
    except ModuleNotFoundError as _exc:  # TODO(foundation): drop once every area exists
        if _exc.name != f"{__name__}.{_area}":
            raise
        continue
    globals().update({_name: getattr(_module, _name) for _name in _module.__all__})
    __all__ += list(_module.__all__)
