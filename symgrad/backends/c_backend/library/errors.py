"""The error of an export that cannot be made."""
from __future__ import annotations

from ....errors import SymgradError


class LibraryExportError(SymgradError, ValueError):
    """The program cannot be exported as a C library: an op the library does not compute in
    C (named, with the line that built it), or a dim no input binds."""
