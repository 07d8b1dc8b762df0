import networkx as nx

import symgrad as sg
from symgrad.ir.graph import ancestors_of, users


def build():
    prog = sg.Program()
    with sg.program_guard(prog):
        x = sg.data("x", [2])
        a = sg.tanh(x)
        b = a * a
        c = sg.tanh(x)  # not needed by b
    return prog, x, a, b, c


def test_networkx_view_is_a_dag_with_one_node_per_op():
    prog, *_ = build()
    graph = prog.to_networkx()
    assert isinstance(graph, nx.DiGraph)
    assert graph.number_of_nodes() == len(prog.ops)
    assert nx.is_directed_acyclic_graph(graph)
    assert list(nx.topological_sort(graph))[0] == 0


def test_dot_output_and_clusters():
    prog, x, a, b, c = build()
    dot = prog.to_dot(groups=[[a.op, b.op]])
    assert dot.startswith("digraph") and "cluster_0" in dot and "tanh" in dot


def test_queries():
    prog, x, a, b, c = build()
    assert ancestors_of([b]) == {x.op, a.op, b.op}
    assert users(prog.ops)[a] == [b.op, b.op]
