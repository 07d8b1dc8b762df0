"""The op library: the registry and one front-end function per op.

Importing this package registers every built-in op and installs Value's operators. Each area
lives in its own module and lists its front-end functions in ``__all__``; this package
re-exports them.
"""
import sys

from . import (activation, batching, contraction, control_flow, cumulative, elementwise, fused,
               indexing, linalg, nn_ops, operators, random, reduction, reverse_loop, shape,
               special, state)
from .contraction import *  # noqa: F401,F403
from .control_flow import *  # noqa: F401,F403
from .cumulative import *  # noqa: F401,F403
from .core import (CATEGORIES, ELEMENTWISE, INJECTIVE, OPAQUE, REDUCTION, REGION, REGISTRY, SOURCE,
                   Algebra, OpDef, Region, atomic_functions, bind, get_op, op_table, register)
from .elementwise import *  # noqa: F401,F403
from .elementwise import forget_tested_comparison, operator_comparison  # Value's ==, !=, bool()
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .nn_ops import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .special import *  # noqa: F401,F403
from .source import as_value, as_values, constant, data, full, ones, parameter, zeros
from .state import assign

__all__ = ["constant", "data", "full", "ones", "parameter", "zeros",
           *elementwise.__all__, *activation.__all__, *reduction.__all__, *shape.__all__,
           *linalg.__all__, *nn_ops.__all__, *control_flow.__all__, *indexing.__all__,
           *cumulative.__all__, *special.__all__, *contraction.__all__, *state.__all__]

# A front-end call that raises leaves its program as it was (no constant made from a NumPy
# operand, no half of a multi-op function stays behind).
atomic_functions(globals(), __all__)
operators.install(sys.modules[__name__])
