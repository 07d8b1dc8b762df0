"""The op list of DESIGN.md is complete: every name is registered and has a front-end function."""
import pytest

import symgrad as sg
from symgrad.backends import lowering_backends
from symgrad.ops import CATEGORIES, REGISTRY

DESIGN_OPS = """add subtract multiply divide power negative exp log log1p expm1 sqrt square abs sign
sin cos tan tanh sinh cosh arcsin arccos arctan sigmoid maximum minimum where clip floor ceil round
equal not_equal less less_equal greater greater_equal logical_and logical_or logical_not cast sum
mean max min prod argmax argmin logsumexp reshape transpose broadcast_to expand_dims squeeze
concatenate stack split pad matmul full zeros ones zeros_like ones_like one_hot""".split()

# Front-end functions that are compositions of registered ops rather than ops of their own.
COMPOSITES = {"zeros": "full", "ones": "full"}

NN_OPS = "relu gelu softplus softmax log_softmax softmax_cross_entropy conv2d max_pool2d avg_pool2d".split()

# DESIGN.md's "More ops": name -> the registered op it builds (compositions name one of theirs)
MORE_OPS = {"take": "take", "take_along_axis": "take_along_axis", "cumsum": "cumsum",
            "cumprod": "cumprod", "erf": "erf", "arctan2": "arctan2", "einsum": "einsum",
            "var": "mean", "std": "sqrt"}
MORE_NN_OPS = {"layer_norm": "mean", "leaky_relu": "leaky_relu", "embedding": "take",
               "dropout": "random_uniform", "batch_norm": "mean",
               "conv_transpose2d": "conv2d_input_grad", "dropout2d": "random_uniform"}


@pytest.mark.parametrize("name", DESIGN_OPS)
def test_design_op_is_registered_and_exported(name):
    assert callable(getattr(sg, name)), f"sg.{name} missing"
    assert COMPOSITES.get(name, name) in REGISTRY, f"op {name} is not registered"


@pytest.mark.parametrize("name", NN_OPS)
def test_nn_op_is_registered_and_exported(name):
    assert callable(getattr(sg.nn, name)), f"sg.nn.{name} missing"
    assert name in REGISTRY, f"op {name} is not registered"


@pytest.mark.parametrize("namespace,names", [(sg, MORE_OPS), (sg.nn, MORE_NN_OPS),
                                             (sg.random, {"uniform": "random_uniform",
                                                          "normal": "random_normal"})])
def test_more_ops_are_exported_and_lowered_by_every_backend(namespace, names):
    for name, op in names.items():
        assert callable(getattr(namespace, name)), f"{namespace.__name__}.{name} missing"
        assert set(lowering_backends(REGISTRY[op])) == {"interpreter", "numpy", "c", "cuda"}, name


def test_show_registry_lists_the_new_ops(capsys):
    sg.show_registry()
    listed = capsys.readouterr().out
    for name in ("take", "take_grad", "take_along_axis_grad", "cumprod", "einsum", "erf",
                 "random_normal", "leaky_relu"):
        assert name in listed


def test_nn_linear_exists():
    assert callable(sg.nn.linear)


def test_every_opdef_is_well_formed():
    for name, opdef in REGISTRY.items():
        assert opdef.name == name
        assert opdef.category in CATEGORIES
        assert callable(opdef.infer)
        # a region op's reference semantics run its blocks (Region.run); any other op has impl
        assert callable(opdef.impl) if opdef.region is None else callable(opdef.region.run)
        assert "interpreter" in lowering_backends(opdef)
