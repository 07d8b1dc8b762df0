"""Lowering tables: the rule each backend lowers each op with (JAX's ``register_lowering``).

Every code generator keeps one :class:`LoweringTable` next to its code and fills it through its
own ``register_lowering(op, ...)``. Ops are named by OpDef or by name, so a user op registers
its lowering exactly as the library's own ops do, and an op file never mentions a backend. A
table may also derive a rule from an op's backend-neutral facts (its
:attr:`~symgrad.ops.core.OpDef.ufunc`, its category...) when no rule was registered for it.
"""
from __future__ import annotations

from typing import Callable


def op_name(op) -> str:
    """The registry name of ``op`` (an OpDef or a name)."""
    name = op if isinstance(op, str) else getattr(op, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"register_lowering: expected an OpDef or an op name, got {op!r}")
    return name


class LoweringTable:
    """The lowering rules of backend ``backend``, by op name; ``derive(opdef)`` gives the rule
    of an op with no registered rule (or None)."""

    def __init__(self, backend: str, derive: Callable | None = None):
        self.backend = backend
        self.rules: dict = {}
        self.derive = derive

    def register(self, op, rule) -> None:
        """Lower ``op`` with ``rule`` from now on (``None`` removes its rule)."""
        name = op_name(op)
        if rule is None:
            self.rules.pop(name, None)
        else:
            self.rules[name] = rule

    def rule(self, opdef):
        """The rule lowering ``opdef``, or None when this backend cannot lower it."""
        rule = self.rules.get(opdef.name)
        if rule is None and self.derive is not None:
            rule = self.derive(opdef)
        return rule

    def lowers(self, opdef) -> bool:
        return self.rule(opdef) is not None
