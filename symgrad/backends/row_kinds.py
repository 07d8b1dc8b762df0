"""Which row kernel computes a row op for its types: shared by the C and CUDA backends.

The row ops are the softmax family and ``one_hot``: each runs over the rows along its class
axis. A backend that computes them natively asks :func:`row_kinds` for one rule per op name,
giving which integer labels and which ``one_hot`` result types its code handles. A rule maps an
op to its kernel's kind (``"softmax"``, ``"log_softmax"``, ``"cross_entropy"`` for integer
labels, ``"soft_cross_entropy"`` for labels shaped like the logits, ``"cross_entropy_grad"``
for ``softmax_cross_entropy_grad``: ``(softmax - one_hot) * g`` in one pass over each row,
``"one_hot"``), or to None when the op's types are not ones the backend computes (it then
runs its NumPy lowering).
"""
from __future__ import annotations

FLOATS = ("float32", "float64")
# kind -> the number of the op's input holding integer labels (the kinds that read some)
LABELS = {"cross_entropy": 1, "cross_entropy_grad": 1, "one_hot": 0}


def labels_of(op, kind):
    """The integer labels row op ``op`` of kind ``kind`` reads, or None."""
    at = LABELS.get(kind)
    return None if at is None else op.inputs[at]


def checks_labels(op, kind) -> bool:
    """Does row op ``op`` of kind ``kind`` check its class labels before computing (a
    cross-entropy's or its gradient's, a strict ``one_hot``'s)? Every backend raises the NumPy
    backend's error for a label outside the classes where this is true."""
    return labels_of(op, kind) is not None and \
        (kind != "one_hot" or bool(op.attrs.get("strict")))


def _float(value) -> bool:
    return value.dtype.name in FLOATS


def row_kinds(integer, one_hot_result) -> dict:
    """``{op name: kind(op)}`` for a backend whose code reads integer labels where
    ``integer(value)`` holds and writes a ``one_hot`` result where ``one_hot_result(dtype)``
    does (see the module docstring)."""
    def softmax_kind(name):
        return lambda op: name if _float(op.inputs[0]) else None

    def cross_entropy_kind(op):
        logits, labels = op.inputs
        if not _float(logits):
            return None
        if integer(labels):
            return "cross_entropy"
        return "soft_cross_entropy" if labels.dtype == logits.dtype else None

    def cross_entropy_grad_kind(op):
        logits, labels, g = op.inputs
        return "cross_entropy_grad" if _float(logits) and integer(labels) and \
            g.dtype == logits.dtype else None

    def one_hot_kind(op):
        return "one_hot" if integer(op.inputs[0]) and one_hot_result(op.results[0].dtype) \
            else None

    return {"softmax": softmax_kind("softmax"), "log_softmax": softmax_kind("log_softmax"),
            "softmax_cross_entropy": cross_entropy_kind,
            "softmax_cross_entropy_grad": cross_entropy_grad_kind, "one_hot": one_hot_kind}
