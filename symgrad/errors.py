"""Exceptions raised by symgrad.

Every error a user can trigger is a subclass of :class:`SymgradError` *and* of the
matching builtin (``ValueError``, ``TypeError`` or ``IndexError``), so ``except ValueError``
keeps working.
"""


class SymgradError(Exception):
    """Base class of every symgrad error."""


class ShapeError(SymgradError, ValueError):
    """An op was built with incompatible shapes (raised when the op is built)."""


class ComparisonError(ShapeError, TypeError):
    """``a == b`` / ``a != b`` on Values whose shapes do not broadcast. Also a ``TypeError``:
    ``value in list`` (which compares with ``==``) documents that error."""


class DTypeError(SymgradError, TypeError):
    """An op was built with an unsupported or mismatched dtype."""


class IndexOutOfRangeError(SymgradError, IndexError):
    """An integer index lies outside the axis it indexes (valid: ``-n <= i < n``). Raised when
    the op is built for constant indices, and when the program runs for fed ones; the message
    names the op, the index, the axis and its size, and the user's line that built the op.
    Generated code raises it on every backend; the standalone runner, which needs only NumPy,
    raises an ``IndexError`` subclass of the same name."""


class ProgramMismatchError(SymgradError, ValueError):
    """Values of two different programs were mixed in one op or one call."""


class FeedError(SymgradError, ValueError):
    """A feed does not match the program's signature (missing, unknown, wrong rank or size)."""


class FeedTypeError(SymgradError, TypeError):
    """A feed has the wrong dtype kind for its input."""


class VerificationError(SymgradError, ValueError):
    """The IR verifier found a malformed program."""


class GradError(SymgradError, ValueError):
    """``ir_backward.grad`` was asked for something it cannot do (unused input, bad seed...)."""


class ArtifactError(SymgradError, ValueError):
    """An AOT artifact is missing, modified, malformed or of an unsupported format."""


class ScopeError(SymgradError, ValueError):
    """A Value was read outside the region (branch or loop body) that defines it."""


class PromotionWarning(UserWarning):
    """A NumPy array operand widened the floating dtype of a program's Values (float32 ->
    float64), as NumPy's promotion does; shown once per pair of dtypes."""


# Errors generated modules raise: a module defines a NumPy-only stand-in class of the same name
# (so that it runs without symgrad), which symgrad's loaders replace by the class itself.
GENERATED_CODE_ERRORS = (IndexOutOfRangeError, FeedError)
