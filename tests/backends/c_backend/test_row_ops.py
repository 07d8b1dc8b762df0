"""The C row op of ``softmax_cross_entropy``'s gradient (``softmax_cross_entropy_grad``, kind
``cross_entropy_grad``: ``(softmax - one_hot) * g`` in one pass over each row) against the
interpreter: float32 and float64, static and dynamic batch dims, a class axis inside the
array, every reduction, the label errors of the NumPy backend, and the gradient's own
gradient."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad import ir_backward

RNG = np.random.default_rng(3)


def _program(dtype, shape, axis=-1, reduction="mean", batch=None, second_order=False,
             label_dtype="int64"):
    """The gradient of ``softmax_cross_entropy(z, y, axis, reduction)`` (weighted by ``w``
    for ``"none"``) with respect to z; ``second_order``: then the gradient of
    ``sum(that * v)`` with respect to z and w."""
    axis = axis % len(shape)
    prog = sg.Program()
    with sg.program_guard(prog):
        z = sg.data("z", [batch] + list(shape[1:]), dtype)
        y = sg.data("y", [batch] + [d for k, d in enumerate(shape) if k not in (0, axis)],
                    label_dtype)
        w = sg.data("w", [batch] + [d for k, d in enumerate(shape) if k not in (0, axis)],
                    dtype)
        losses = sg.nn.softmax_cross_entropy(z, y, axis=axis, reduction=reduction)
        loss = sg.sum(losses * w) if reduction == "none" else losses
        g, = ir_backward.grad(loss, [z], create_graph=second_order)
        fetches = [g]
        if second_order:
            v = sg.data("v", [batch] + list(shape[1:]), dtype)
            fetches = [g, *ir_backward.grad(sg.sum(g * v), [z, w])]
    return prog, fetches


def _feeds(dtype, shape, axis=-1, label_dtype="int64", second_order=False):
    axis = axis % len(shape)
    reduced = tuple(d for k, d in enumerate(shape) if k != axis)
    feeds = {"z": RNG.standard_normal(shape).astype(dtype),
             "y": RNG.integers(0, shape[axis], reduced).astype(label_dtype),
             "w": RNG.standard_normal(reduced).astype(dtype)}
    if second_order:
        feeds["v"] = RNG.standard_normal(shape).astype(dtype)
    return feeds


def _compare(prog, fetches, feeds):
    compiled = sg.compile(prog, fetches, backend="c")
    expected = sg.compile(prog, fetches, backend="interpreter")(**feeds)
    for got, want in zip(compiled(**feeds), expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return compiled


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [None, 6])
def test_the_gradient_is_one_row_op(dtype, batch):
    prog, fetches = _program(dtype, (6, 10), batch=batch)
    compiled = _compare(prog, fetches, _feeds(dtype, (6, 10)))
    host, c = compiled.sources[".py"], compiled.sources[".c"]
    # one segment computing the loss and the gradient by its row function (with a dynamic
    # batch, the mean's cotangent broadcast over the rows in it too); neither softmax nor
    # one_hot is left
    assert len(re.findall(r"_sg_s\d+\(\(", host)) == 1
    assert re.search(r"#define SG_R_\w+\n/\* %\d+ = softmax_cross_entropy_grad\(", c)
    assert not re.search(r"= (softmax|one_hot)\(", host + c)


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_a_class_axis_inside_the_array_and_every_reduction(reduction):
    prog, fetches = _program("float32", (3, 5, 4), axis=1, reduction=reduction)
    for n in (3, 1):
        _compare(prog, fetches, _feeds("float32", (n, 5, 4), axis=1))


@pytest.mark.parametrize("label_dtype,bad", [("int64", 10), ("int32", -1), ("uint8", 12)])
def test_labels_outside_the_classes_raise_as_on_numpy(label_dtype, bad):
    prog, fetches = _program("float32", (4, 10), label_dtype=label_dtype)
    feeds = _feeds("float32", (4, 10), label_dtype=label_dtype)
    feeds["y"][2] = bad
    messages = []
    for backend in ("numpy", "c"):
        with pytest.raises(ValueError, match="class index") as error:
            sg.compile(prog, fetches, backend=backend)(**feeds)
        messages.append(str(error.value))
    assert messages[0] == messages[1] == f"softmax_cross_entropy: class index {bad} is " \
        f"outside [0, 10)"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_gradient_of_the_gradient(dtype):
    prog, fetches = _program(dtype, (4, 6), reduction="none", second_order=True)
    _compare(prog, fetches, _feeds(dtype, (4, 6), second_order=True))
