"""Every batching rule against the loop fallback, over the registry's op samples.

For each sample of ``tests.ops.samples.ALL_SAMPLES``, ``vmap(sample.build)`` runs on a batch of
three examples twice: once with the ops' batching rules, once with every op batched by the
loop fallback (a ``scan`` over the batch, which builds the op once per example), on the
interpreter; the results must agree. Two batchings: every input batched, and only the first
(the others shared by every example). Random ops draw other numbers per batching, so only
their types are compared. A subset also runs on the numpy backend.
"""
import numpy as np
import pytest

import symgrad as sg
from symgrad.autodiff import vmap as vmap_module
from symgrad.ops import REGISTRY, SOURCE
from symgrad.ops.core import batch_rule
from tests.ops.samples import ALL_SAMPLES

BATCH = 3
RANDOM = {"random_uniform", "random_normal"}
# Samples whose build creates parameters, which belong to the global block and so cannot be
# created inside the function vmap traces (a ScopeError, as inside a loop body).
MAKES_PARAMETERS = ("assign-", "batch_norm-train")
SAMPLES = [s for s in ALL_SAMPLES if not s.id.startswith(MAKES_PARAMETERS)]
NUMPY_SUBSET = {"add", "matmul", "einsum", "sum", "softmax", "transpose", "reshape", "slice",
                "take", "cumsum", "concatenate", "conv2d", "argmax"}


# Ops without a batching rule, batched by the loop fallback (docs/vmap.md says so), and why.
LOOP_FALLBACK = {
    "conv2d_weight_grad": "it sums over the examples' leading axis, which cannot hold the batch",
    "assign": "it writes program state, which examples cannot each own",
}


def test_every_op_has_a_rule_or_is_listed_as_batched_by_the_loop():
    without = {name for name, opdef in REGISTRY.items()
               if batch_rule(opdef) is None and opdef.category != SOURCE
               and not opdef.user_defined}
    assert without == set(LOOP_FALLBACK)


def _examples(array, k):
    """The k-th example: floats scaled (inside every op's domain: toward zero), ints kept."""
    return array * (1.0 - 0.125 * k) if array.dtype.kind == "f" else array


def _batched_case(sample, shared):
    """(program, fetches, feeds) of ``vmap(sample.build)`` over BATCH examples; inputs listed
    in ``shared`` are not batched."""
    prog = sg.Program()
    feeds, values, in_axes = {}, [], []
    with sg.program_guard(prog):
        for i, array in enumerate(sample.inputs):
            name = f"in{i}"
            shape = [None if i in sample.dynamic and j == 0 else d
                     for j, d in enumerate(array.shape)]
            if i in shared:
                feeds[name] = array
                in_axes.append(None)
            else:
                feeds[name] = np.stack([_examples(array, k) for k in range(BATCH)])
                shape = [BATCH] + shape
                in_axes.append(0)
            values.append(sg.data(name, shape, array.dtype))
        out = sg.vmap(sample.build, in_axes=tuple(in_axes), axis_size=BATCH)(*values)
    if sample.step is not None:
        feeds["rng_step"] = np.int64(sample.step)
    fetches = list(out) if isinstance(out, (tuple, list)) else [out]
    return prog, [f for f in fetches if f is not None], feeds


def _run(sample, shared, backend="interpreter"):
    prog, fetches, feeds = _batched_case(sample, shared)
    return fetches, sg.compile(prog, fetches, backend=backend)(**feeds)


def _no_rules(opdef):
    return None


def _compare(sample, shared, backend="interpreter"):
    fetches, got = _run(sample, shared, backend)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vmap_module, "batch_rule", _no_rules)
        loop_fetches, expected = _run(sample, shared)
    for value, loop_value, a, b in zip(fetches, loop_fetches, got, expected):
        assert value.dtype == loop_value.dtype and a.dtype == b.dtype
        assert a.shape == b.shape
        if sample.op not in RANDOM:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, equal_nan=True,
                                       err_msg=sample.id)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_rule_matches_loop_all_batched(sample):
    _compare(sample, shared=())


@pytest.mark.parametrize("sample", [s for s in SAMPLES if len(s.inputs) > 1],
                         ids=lambda s: s.id)
def test_rule_matches_loop_first_batched(sample):
    _compare(sample, shared=set(range(1, len(sample.inputs))))


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.op in NUMPY_SUBSET][::3],
                         ids=lambda s: s.id)
def test_rule_on_numpy_matches_loop(sample):
    _compare(sample, shared=(), backend="numpy")


def test_parameters_inside_the_function_are_a_scope_error():
    with sg.program_guard(sg.Program()):
        x = sg.data("x", [4, 3])
        with pytest.raises(sg.ScopeError, match="global block"):
            sg.vmap(lambda row: row * sg.parameter("p", [3], init=1.0))(x)


@pytest.mark.parametrize("draw", [lambda row: row + sg.random.normal([6], seed=1),
                                  lambda row: sg.random.uniform(row, seed=2),      # row's shape
                                  lambda row: sg.nn.dropout(row + 1.0, 0.5, seed=3)],
                         ids=["static-shape", "shape-of-a-value", "dropout"])
def test_random_ops_draw_per_example(draw):
    with sg.program_guard(sg.Program()) as prog:
        x = sg.data("x", [8, 6])
        y = sg.vmap(draw)(x)
    assert "scan" not in [op.name for op in prog.ops]
    out, = sg.compile(prog, [y], backend="interpreter")(x=np.zeros((8, 6), "float32"))
    assert len({tuple(row) for row in out.round(6)}) == 8
