"""The op library: the registry and one front-end function per op.

Importing this package registers every built-in op. Each area lives in its own module and
lists its front-end functions in ``__all__``; this package re-exports them.
"""
from . import activation, elementwise, linalg, nn_ops, reduction, shape
from .core import (CATEGORIES, ELEMENTWISE, INJECTIVE, OPAQUE, REDUCTION, REGISTRY, SOURCE,
                   Algebra, OpDef, as_value, as_values, atomic_functions, bind, get_op, register)
from .elementwise import *  # noqa: F401,F403
from .elementwise import forget_tested_comparison, operator_comparison  # Value's ==, !=, bool()
from .linalg import *  # noqa: F401,F403
from .nn_ops import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .source import constant, data, full, ones, parameter, zeros

__all__ = ["constant", "data", "full", "ones", "parameter", "zeros",
           *elementwise.__all__, *activation.__all__, *reduction.__all__, *shape.__all__,
           *linalg.__all__, *nn_ops.__all__]

# A front-end call that raises leaves its program as it was (no constant made from a NumPy
# operand, no half of a multi-op function stays behind).
atomic_functions(globals(), __all__)
