"""symgrad.ops.trees: the flattening control flow and vmap share."""
from symgrad.ops.trees import LEAF, flatten, unflatten


def test_flatten_and_unflatten_round_trip_nested_tuples_and_lists():
    tree = (1, [2, (3, 4)], [], 5)
    leaves, structure = flatten(tree)
    assert leaves == [1, 2, 3, 4, 5]
    assert unflatten(structure, leaves) == tree
    assert unflatten(structure, [x * 10 for x in leaves]) == (10, [20, (30, 40)], [], 50)


def test_none_is_a_leaf_unless_kept_in_the_structure():
    assert flatten([None, 1]) == ([None, 1], (list, (LEAF, LEAF)))
    leaves, structure = flatten([None, 1], allow_none=True)
    assert leaves == [1] and unflatten(structure, [7]) == [None, 7]
