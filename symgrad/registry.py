"""The registry API of the front end: list the registry, add a user-defined op.

A user op goes through the same :class:`~symgrad.ops.core.OpDef` and ``register`` as the
library's own ops, and through the same ``register_lowering`` of each backend as the library's
own lowerings, so the printer, the passes, the backends and ``grad`` treat it alike.
``register_vjp`` (replace an op's VJP) lives in :mod:`symgrad.autodiff.registry`.
"""
from __future__ import annotations

import inspect

from .autodiff import custom_forward
from .autodiff.custom_forward import checked_impl, checked_infer, forward_emitter, forward_helper
from .autodiff.registry import chainer_vjp, register_vjp
from .backends import custom_lowering_backends, lowering_backends
from .backends.host.lowering import register_lowering as register_numpy_lowering
from .ops.core import (CATEGORIES, NO_ALGEBRA, OPAQUE, REGISTRY, OpDef, batch_rule, bind,
                       register)
from .option_schema import unknown_name_message
from .ops.source import as_values

__all__ = ["register_vjp", "show_registry", "registry_table", "custom_op", "RegistryTable"]


# --- listing ----------------------------------------------------------------------------------
class RegistryTable(list):
    """The rows of :func:`registry_table` (one dict per op); ``str()`` is the text table."""

    COLUMNS = (("op", "op"), ("category", "category"), ("vjp", "VJP"),
               ("vjp_differentiable", "VJP differentiable"), ("batch", "batching rule"),
               ("backends", "backends"))

    def __str__(self):
        def cell(row, key):
            value = row[key]
            if isinstance(value, bool):
                return "yes" if value else "no"
            if value is None:
                return "-"
            if isinstance(value, (list, tuple)):
                return ", ".join(value)
            return str(value) + (" (user)" if key == "op" and row["user_defined"] else "")

        cells = [[title for _, title in self.COLUMNS]]
        cells += [[cell(row, key) for key, _ in self.COLUMNS] for row in self]
        widths = [max(len(line[i]) for line in cells) for i in range(len(self.COLUMNS))]
        lines = ["  ".join(text.ljust(w) for text, w in zip(line, widths)).rstrip()
                 for line in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def registry_table() -> RegistryTable:
    """One row per registered op, grouped by category: ``op``, ``category``, ``vjp`` (has a
    VJP), ``vjp_differentiable`` (None without a VJP), ``batch`` (has a batching rule; without
    one ``vmap`` batches the op by a loop over the examples), ``backends``,
    ``user_defined``."""
    rows = RegistryTable()
    for opdef in sorted(REGISTRY.values(),
                        key=lambda d: (CATEGORIES.index(d.category), d.name)):
        has_vjp = opdef.vjp is not None
        rows.append({"op": opdef.name, "category": opdef.category, "vjp": has_vjp,
                     "vjp_differentiable": opdef.vjp_differentiable if has_vjp else None,
                     "batch": batch_rule(opdef) is not None,
                     "backends": lowering_backends(opdef), "user_defined": opdef.user_defined})
    return rows


def show_registry(file=None) -> RegistryTable:
    """Print the registry table (to ``file``, default stdout) and return it."""
    table = registry_table()
    print(table, file=file)
    return table


# --- user-defined ops -------------------------------------------------------------------------
def custom_op(name, forward, infer_shape, backward, *, category=OPAQUE, algebra=None,
              **lowerings):
    """Register a user op and return the front-end function that builds it.

    ``forward(*arrays) -> array`` (a tuple of arrays for several results) is the NumPy
    implementation. ``infer_shape(*input_types) -> (shape, dtype)`` (or a list of them) is the
    shape rule; each input type is ``(shape tuple with None for unknown dims, np.dtype)``.
    ``backward(inputs, outputs, grad_outputs) -> gradient per input`` (a Value, None, or a
    list/tuple of them) is written with symgrad ops, so it is differentiable again; None means
    the op has no gradient. Further keywords, each named after a backend that takes them
    (:func:`~symgrad.backends.custom_lowering_backends`), are the op's own lowering there:
    ``cuda=`` the CUDA lowering (for an elementwise op, a C expression over ``{0}``, ``{1}``...
    and ``{T}``); ``c=`` the C backend's lowering of an elementwise op, a C expression of the
    same form (math functions named as for ``double``: ``tanh`` computes ``tanhf`` on floats);
    without it the C backend runs the op through NumPy. ``c=`` needs
    ``category="elementwise"`` and refers to nothing but operands and ``{T}`` (checked here);
    an operand number the op is built without, or a function that C's math library does not
    define, is an error naming the op when the program is compiled. Another keyword is a
    ``TypeError`` that names the backends taking one. ``algebra``: an :class:`~symgrad.ops.core.Algebra` of facts the simplify pass
    may use (for example ``Algebra(identity=(0, (1,)))`` lets it drop ``op(x, 0)``).

    Each backend gets its lowering through its own ``register_lowering``, as the library's
    ops do. Generated NumPy code gets a copy of ``forward`` (as ``_custom_<name>``) when it is
    a module-level ``def`` that uses only its arguments, NumPy (or math) and builtins; any
    other callable (a lambda, a closure...) runs by reference in this process, and ``save()``
    refuses programs using it (see :mod:`symgrad.autodiff.custom_forward`). ``infer_shape``'s
    results are checked when the op is built, ``forward``'s results when it runs.

    Registering a name again replaces an earlier user op; a built-in op cannot be replaced.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"custom_op: name must be an identifier, got {name!r}")
    existing = REGISTRY.get(name)
    if existing is not None and not existing.user_defined:
        raise ValueError(f"custom_op: {name!r} is a built-in op; pick another name "
                         f"(use register_vjp to replace a built-in op's VJP)")
    for what, fn in (("forward", forward), ("infer_shape", infer_shape)):
        if not callable(fn):
            raise TypeError(f"custom_op: {what} must be callable, got {type(fn).__name__}")
    if backward is not None and not callable(backward):
        raise TypeError(f"custom_op: backward must be callable or None, "
                        f"got {type(backward).__name__}")
    takes = custom_lowering_backends()
    for backend, spec in lowerings.items():
        if backend not in takes:
            raise TypeError(f"custom_op {name!r}: " + unknown_name_message(
                "keyword (a backend taking a user op's lowering)", backend, takes))
        if spec is not None:
            takes[backend].check(name, spec, category)

    opdef = register(OpDef(
        name, category,
        infer=checked_infer(name, infer_shape),
        impl=checked_impl(name, forward, infer_shape),
        vjp=None if backward is None else chainer_vjp(backward),
        doc=inspect.getdoc(forward) or f"user-defined op {name}", user_defined=True,
        algebra=algebra or NO_ALGEBRA),
        replace=existing is not None)
    register_numpy_lowering(opdef, forward_emitter(name, category),
                            (forward_helper(name, forward), custom_forward._sg_custom_result))
    for backend, custom in takes.items():
        custom.register(opdef, lowerings.get(backend))

    def build(*inputs):
        return bind(opdef, as_values(*inputs))

    build.__name__ = build.__qualname__ = name
    build.__doc__ = opdef.doc
    build.opdef = opdef
    return build
