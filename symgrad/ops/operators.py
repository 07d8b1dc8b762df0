"""Value's operators and methods, installed on :class:`~symgrad.ir.value.Value` by the ops
package (the IR layer knows no op): ``+ - * / ** @``, unary ``-``, ``abs``, comparisons
(elementwise ops, NumPy style), ``& | ~``, indexing, ``.T`` and the NumPy-like methods."""
from __future__ import annotations

from ..ir.value import Value


def install(ops) -> None:
    """Give :class:`Value` its operators, each building the op of module ``ops`` (the front
    end) it names."""
    binary = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
              "pow": "power", "matmul": "matmul"}
    for dunder, name in binary.items():
        function = getattr(ops, name)
        setattr(Value, f"__{dunder}__", lambda self, other, f=function: f(self, other))
        setattr(Value, f"__r{dunder}__", lambda self, other, f=function: f(other, self))
    compare = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
               "and": "logical_and", "or": "logical_or"}
    for dunder, name in compare.items():
        function = getattr(ops, name)
        setattr(Value, f"__{dunder}__", lambda self, other, f=function: f(self, other))
    # ``==``/``!=`` build ops too; ``value in list`` then calls ``bool()`` on the op it built,
    # which raises and drops that op again, so the lookup leaves the program unchanged
    Value.__eq__ = lambda self, other: ops.operator_comparison("==", self, other)
    Value.__ne__ = lambda self, other: ops.operator_comparison("!=", self, other)
    refuse_truth = Value.__bool__

    def truth(self):
        ops.forget_tested_comparison(self)
        refuse_truth(self)

    Value.__bool__ = truth
    Value.__neg__ = lambda self: ops.negative(self)
    Value.__pos__ = lambda self: self
    Value.__abs__ = lambda self: ops.abs(self)
    Value.__invert__ = lambda self: ops.logical_not(self)
    Value.__getitem__ = lambda self, index: ops.getitem(self, index)
    Value.T = property(lambda self: ops.transpose(self))

    def reduction(name):
        function = getattr(ops, name)
        return lambda self, axis=None, keepdims=False: function(self, axis=axis,
                                                                keepdims=keepdims)

    for name in ("sum", "mean", "max", "min", "prod"):
        setattr(Value, name, reduction(name))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = shape[0]
        return ops.reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = axes[0]
        return ops.transpose(self, axes or None)

    Value.reshape = reshape
    Value.transpose = transpose
    Value.astype = lambda self, dtype: ops.cast(self, dtype)
