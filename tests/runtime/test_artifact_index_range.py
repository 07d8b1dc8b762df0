"""Fed indices out of range in a saved artifact: ``sg.load`` raises symgrad's
:class:`~symgrad.errors.IndexOutOfRangeError`; the standalone runner (NumPy only) raises the
generated module's stand-in, an ``IndexError`` of the same name; both name the op and its line.
(Every backend of a compiled program: tests/backends/test_index_range.py.)"""
import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import IndexOutOfRangeError, SymgradError
from symgrad.runtime import standalone


def _program():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [4, 3], "float32")
        i = sg.data("i", [None], "int64")
        y = sg.nn.embedding(i, x)
        gx, = sg.ir_backward.grad(sg.sum(y * y), [x])
    return prog, [y, gx], y.op.loc


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_artifacts_name_the_op_and_its_line_for_indices_out_of_range(tmp_path, backend):
    prog, fetches, loc = _program()
    path = sg.compile(prog, fetches, backend=backend).save(str(tmp_path / "m"))
    x = np.arange(12, dtype="float32").reshape(4, 3)
    message = f"take (built at {loc}): index -5 is out of bounds for axis 0 with size 4"
    assert loc.startswith(__file__ + ":")

    with pytest.raises(IndexOutOfRangeError) as caught:
        sg.load(path)(x=x, i=np.array([1, -5]))
    assert str(caught.value) == message

    model = standalone.load(path)
    with pytest.raises(IndexError) as caught:
        model(x=x, i=np.array([1, -5]))
    assert type(caught.value).__name__ == "IndexOutOfRangeError"
    assert not isinstance(caught.value, SymgradError)   # the module's own, NumPy-only class
    assert str(caught.value) == message
    y, gx = model(x=x, i=np.array([3, -4]))
    np.testing.assert_array_equal(y, x[[3, -4]])
    np.testing.assert_array_equal(gx, [[0, 2, 4], [0, 0, 0], [0, 0, 0], [18, 20, 22]])
