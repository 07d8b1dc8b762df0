"""The sizes of symbolic dims that a C entry point (a segment, a row op, a native op) takes
from the binding: the host passes them as Python ints after the arrays, in the order of
:attr:`EntrySizes.dims`, and the entry reads them into ``int64_t sg_size[]``
(``c/entry.c.j2``'s ``sizes`` macro) before it checks its arrays against them (its
``check_dims`` macro, with :meth:`EntrySizes.checks`)."""
from __future__ import annotations

from .ctype import value_label


class EntrySizes:
    """Which ``sg_size[j]`` holds each symbolic dim of one entry, numbered as first used."""

    def __init__(self):
        self.index: dict = {}

    @property
    def dims(self) -> tuple:
        """The symbolic dims whose sizes the host passes, in order."""
        return tuple(self.index)

    def c_dim(self, dim) -> str:
        """C source of ``dim``: a literal, or the size the host gives (``sg_size[j]``)."""
        if isinstance(dim, int):
            return str(dim)
        return f"sg_size[{self.index.setdefault(dim, len(self.index))}]"

    def checks(self, values) -> list[dict]:
        """Every dim of every array ``values[k]`` (argument ``k`` of the entry) against its
        static size or the size given, so that the extents the entry reads from its buffers
        are the binding's: dicts with ``got``, ``want``, ``what`` and ``axis``."""
        return [dict(got=f"sg_b[{k}].shape[{axis}]", want=self.c_dim(dim),
                     what=value_label(value), axis=axis)
                for k, value in enumerate(values) for axis, dim in enumerate(value.dims)]
