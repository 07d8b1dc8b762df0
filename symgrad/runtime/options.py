"""``CompileOptions``: the options of :func:`symgrad.compile`, validated from declarations.

The pass pipeline declares its options (:data:`symgrad.passes.options.PIPELINE_OPTIONS`) and
each backend declares those it reads (``Backend.options``); this module only gathers them, so a
backend's new option needs no change here.
"""
from __future__ import annotations

from ..backends import backend_options
from ..option_schema import Option, unknown_name_message
from ..passes import PIPELINE_OPTIONS


def option_schema() -> dict[str, Option]:
    """``{name: Option}``: the pipeline's options, then every registered backend's."""
    schema = {option.name: option for option in PIPELINE_OPTIONS}
    schema.update(backend_options())
    return schema


def checked_option(name, value, schema=None):
    """``value`` as option ``name`` keeps it; an unknown name is a ``TypeError`` with a "did
    you mean", a bad value a ``ValueError`` naming the option."""
    schema = option_schema() if schema is None else schema
    option = schema.get(name)
    if option is None:
        raise TypeError(unknown_name_message("option", name, schema))
    problem = option.problem(value)
    if problem:
        raise ValueError(f"option {name}: {problem}")
    return option.normalized(value)


class CompileOptions:
    """Options of :func:`symgrad.compile`: every option the pass pipeline or a backend
    declares, by keyword (``CompileOptions(chunk_size=1 << 14, threads=1)``); the rest keep
    their defaults. Immutable; :meth:`replace` returns a changed copy.

    The pipeline's: ``passes`` (names of the passes to run, in order; None: the backend's
    default pipeline), ``fusion`` (build fused groups), ``max_group_size`` (ops per fused
    group). The NumPy and C backends': ``chunk_size`` (elements per chunk of a fused loop),
    ``threads`` (threads a chunked loop of at least 4 chunks, 16 for a NumPy module's fused
    group of cheap ops only, is split across; None: the CPUs
    the process may use, at most 8, read when the program runs; 1: no thread pool),
    ``accumulate_float64`` (accumulate float32 sums in float64), ``cache_dir`` (where
    generated code is cached; default ``$SYMGRAD_CACHE_DIR`` or ``~/.cache/symgrad``). The C
    and CUDA backends': ``flush_denormals`` (compiled code reads and writes subnormal floats
    as zero, as XLA's CPU code does). The CUDA backend's: also ``return_numpy`` (NumPy results
    instead of CuPy arrays).
    :func:`option_schema` lists them all with their types and docs. An option only another
    backend reads is accepted and has no effect; an unknown name is a ``TypeError`` that says
    which option was probably meant.
    """

    __slots__ = ("_values",)

    def __init__(self, **values):
        schema = option_schema()
        chosen = {name: option.default for name, option in schema.items()}
        for name, value in values.items():
            chosen[name] = checked_option(name, value, schema)
        object.__setattr__(self, "_values", chosen)

    def __getattr__(self, name):
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(unknown_name_message("option", name, self._values)) from None

    def __setattr__(self, name, value):
        raise AttributeError("CompileOptions is immutable; use .replace(...)")

    def __eq__(self, other):
        return isinstance(other, CompileOptions) and self._values == other._values

    def __hash__(self):
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self):
        return "CompileOptions(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def as_dict(self) -> dict:
        """``{name: value}`` of every option."""
        return dict(self._values)

    def replace(self, **changes) -> "CompileOptions":
        """A copy with ``changes`` (validated as the constructor validates them)."""
        return CompileOptions(**{**self._values, **changes})

    def key(self) -> str:
        """Stable text of the options that change generated code, for cache keys."""
        schema = option_schema()
        return repr(sorted((name, value) for name, value in self._values.items()
                           if schema[name].in_cache_key))
