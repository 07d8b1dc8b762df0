"""Every op's declared :class:`~symgrad.ops.core.Algebra` holds for its NumPy reference (the
simplify pass relies on these facts and on nothing else about an op)."""
import numpy as np
import pytest

from symgrad.ops import REGISTRY

RNG = np.random.default_rng(0)
X = RNG.uniform(0.5, 2.0, (3, 4))


def _with_element_at(opdef, fact):
    """``opdef``'s results on ``X`` and the fact's element at each of its positions."""
    element, positions = fact
    for position in positions:
        operands = [X, X]
        operands[position] = np.full_like(X, element)
        yield opdef.impl(*operands)


def _with_algebra(field):
    return [pytest.param(opdef, id=name) for name, opdef in sorted(REGISTRY.items())
            if getattr(opdef.algebra, field)]


@pytest.mark.parametrize("opdef", _with_algebra("identity"))
def test_identity_element(opdef):
    for result in _with_element_at(opdef, opdef.algebra.identity):
        np.testing.assert_array_equal(result, X)


@pytest.mark.parametrize("opdef", _with_algebra("negation"))
def test_negation_element(opdef):
    for result in _with_element_at(opdef, opdef.algebra.negation):
        np.testing.assert_array_equal(result, -X)


@pytest.mark.parametrize("opdef", _with_algebra("involution"))
def test_involution(opdef):
    np.testing.assert_array_equal(opdef.impl(opdef.impl(X)), X)


@pytest.mark.parametrize("opdef", _with_algebra("negates"))
def test_negates(opdef):
    np.testing.assert_array_equal(opdef.impl(X), -X)


def test_exactly_one_op_negates():
    assert len([d for d in REGISTRY.values() if d.algebra.negates]) == 1


@pytest.mark.parametrize("opdef", _with_algebra("permutation"))
def test_permutation_attr_exists_and_identity_is_a_no_op(opdef):
    attr = opdef.algebra.permutation
    np.testing.assert_array_equal(opdef.impl(X, **{attr: (0, 1)}), X)


@pytest.mark.parametrize("opdef", _with_algebra("keeps_fill"))
def test_data_movement_is_injective(opdef):
    assert opdef.category == "injective"
