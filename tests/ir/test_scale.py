"""Program building is iterative: 100,000 ops build and print without recursion errors."""
import pytest

import symgrad as sg


@pytest.mark.slow
def test_build_100k_op_chain():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [None, 4])
        y = x
        for _ in range(100_000):
            y = sg.tanh(y)
    assert len(prog.ops) == 100_001
    prog.verify()
    assert str(prog).count("tanh") == 100_000
    assert prog.to_networkx().number_of_nodes() == 100_001
