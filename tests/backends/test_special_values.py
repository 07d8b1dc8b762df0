"""Special values on every backend: the op samples of the ops the backends compute themselves
(elementwise ops, reductions, the C backend's row ops) run with signed zeros, infinities,
NaN, the smallest subnormals and the largest finite values on the NumPy and C backends and
the CUDA kernels (emulated on the CPU, ``tests/backends/cuda_emulation``), against the
interpreter: values within 1e-4 (float32) or 1e-6 (float64) relative, NaN in the same
places, the same infinities and the same sign of every zero.

Inputs. A sample made of elementwise ops only runs on every combination of the special
values over its float inputs (1-D inputs; its other inputs repeated along them), in a
different order each run (a vector loop and its scalar remainder must agree); samples of
this module add each special value as a constant operand (which C and CUDA inline as a
literal) to ops with every special value as the other operand. Any other sample keeps its
shapes and runs once per special value (at every third element, its own numbers elsewhere),
then once with the special values mixed, the largest finite ones left out: a sum holding
both +max and -max cancels differently in another order ((max + 1) - max is 0, (max - max)
+ 1 is 1) and backends add in their own order. The ops whose sums of products are the BLAS
GEMM's (:data:`GEMM_OPS`: C calls the GEMM on operands of other shapes than the interpreter's
``tensordot``, so it adds in another order) leave the largest finite values out of every
run. All the samples of a dtype are one program,
so each backend compiles once per dtype. Float32 sums accumulate in float32 here, as the
interpreter's do (the default ``accumulate_float64`` makes them finite where NumPy's
overflow).

Where the interpreter's own answer is not one thing, the agreed behaviour (see
``docs/guarantees.md``) is checked instead:

* ``clip`` with array bounds: NumPy gives the bound where ``x`` equals it, with constant
  bounds ``x`` (``clip(-0.0, 0.0, 1.0)`` is ``-0.0``); the backends give ``x`` either way,
  so the sign of a zero is not compared there;
* a cast of NaN, an infinity or a float outside the integer range to an integer: NumPy warns
  and gives what the CPU's conversion gives, a GPU saturates; not compared.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import c_backend
from symgrad.backends.c_backend.lowering import LOWERINGS as C_LOWERINGS
from symgrad.backends.cuda_backend.lowering import LOWERINGS as CUDA_LOWERINGS
from symgrad.ir.graph import walk_ops
from symgrad.ops import REGISTRY
from symgrad.ops.core import ELEMENTWISE, REDUCTION, SOURCE
from tests.backends.cuda_emulation import library as emulation
from tests.backends.cuda_emulation.device import EmulatedDevice
from tests.ops.samples import ALL_SAMPLES, OpSample

DTYPES = ["float32", "float64"]
BACKENDS = ["numpy", "c", "cuda"]
RTOL = {"float32": 1e-4, "float64": 1e-6}
OPTIONS = {"accumulate_float64": False}
# ops summing products in the BLAS GEMM's order (see the module docstring)
GEMM_OPS = {"matmul", "conv2d", "conv2d_input_grad", "conv2d_weight_grad"}


def special_values(dtype) -> np.ndarray:
    """±0, ±inf, NaN, ± the smallest subnormal, ± the largest finite value, and numbers at the
    edges of domains (±1: log1p, arcsin, pow) or not integers (pow of a negative base)."""
    info = np.finfo(dtype)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal,
                     -info.smallest_subnormal, info.max, -info.max, 1.0, -1.0, 0.5, -2.5, 3.0],
                    dtype)


# op(x, c) with every special value as the constant c (the simplify pass drops only the
# signed zero that is an identity: x + -0.0 and x - 0.0)
CONSTANT_OPERAND = {
    "add": sg.add, "add-left": lambda x, c: sg.add(c, x), "subtract": sg.subtract,
    "subtract-left": lambda x, c: sg.subtract(c, x),
    "maximum": sg.maximum, "minimum": lambda x, c: sg.minimum(c, x), "multiply": sg.multiply,
    "divide": lambda x, c: c / x, "power": sg.power, "power-base": lambda x, c: c ** x,
    "arctan2": lambda x, c: sg.arctan2(c, x), "where": lambda x, c: sg.where(x > 0, c, x),
    "clip": lambda x, c: sg.clip(x, c, np.inf),
}


def constant_samples(dtype) -> list:
    """One sample per op of :data:`CONSTANT_OPERAND`: a result per special constant."""
    constants = [np.asarray(c, dtype) for c in special_values(dtype)]
    return [OpSample(name.split("-")[0],
                     lambda x, op=op: tuple(op(x, c) for c in constants),
                     [np.zeros(1)], id=f"{name}-constants")
            for name, op in CONSTANT_OPERAND.items()]


def _swept(sample) -> bool:
    """Samples of ops with float inputs that the backends compute themselves; not those with
    program state (parameters: two would share names in the one program of the sweep)."""
    opdef = REGISTRY[sample.op]
    return any(a.dtype.kind == "f" for a in sample.inputs) and (
        opdef.category in (ELEMENTWISE, REDUCTION) or C_LOWERINGS.rule(opdef) is not None) \
        and not sample.program("float64")[0].parameters


def _elementwise_only(sample) -> bool:
    program, _ = sample.program("float64")
    return all(op.opdef.category in (SOURCE, ELEMENTWISE) for op in walk_ops(program.ops))


@dataclasses.dataclass
class Entry:
    """One sample in the sweep's program: ``runs`` holds its inputs for each run."""

    sample: object
    runs: list
    elementwise: bool

    @property
    def zero_sign_compared(self) -> bool:
        floats = sum(a.dtype.kind == "f" for a in self.sample.inputs)
        return not (self.sample.op == "clip" and floats > 1)

    def compared(self, inputs, result) -> np.ndarray | None:
        """Where ``result`` is compared (None: everywhere; see the module docstring)."""
        if self.sample.op == "cast" and result.dtype.kind in "iu":
            info, x = np.iinfo(result.dtype), inputs[0].astype(np.float64)
            whole = np.trunc(np.where(np.isfinite(x), x, 0.0))
            return np.isfinite(x) & (whole >= info.min) & (whole < float(int(info.max) + 1))
        return None


def _cartesian(sample, values) -> list:
    """Every combination of ``values`` over the sample's float inputs, then the first again
    (an odd length, so that a vector loop leaves a scalar remainder), rolled by one more
    element each run: each value of a one-input sample is last in some run."""
    floats = sum(a.dtype.kind == "f" for a in sample.inputs)
    grid = iter(g.ravel() for g in np.meshgrid(*[values] * floats, indexing="ij"))
    size = len(values) ** floats + 1
    arrays = [np.resize(next(grid) if a.dtype.kind == "f" else a.ravel(), size)
              for a in sample.inputs]
    return [[np.roll(a, run) for a in arrays] for run in range(len(values))]


def _patterned(sample, values, dtype) -> list:
    """The sample's inputs with each special value at every third element, then mixed."""
    runs = []
    mixed = values[np.abs(values) != np.finfo(dtype).max]
    if sample.op in GEMM_OPS:
        values = mixed
    for value in list(values) + [None]:
        arrays = []
        for number, array in enumerate(sample.inputs):
            if array.dtype.kind != "f":
                arrays.append(array)
                continue
            flat = array.astype(dtype).ravel()
            if value is None:
                count = min(flat.size, mixed.size)
                flat[:count] = np.roll(mixed, number)[:count]
            else:
                flat[(np.arange(flat.size) + number) % 3 == 0] = value
            arrays.append(flat.reshape(array.shape))
        runs.append(arrays)
    return runs


@dataclasses.dataclass
class Sweep:
    """Every swept sample of one dtype in one program: ``owners[k]`` is the entry fetch ``k``
    belongs to; ``feeds[r]`` and ``expected[r]`` are run ``r``'s feeds and the interpreter's
    results."""

    dtype: str
    program: object
    fetches: list
    entries: list
    owners: list
    feeds: list
    expected: list

    def failures(self, run, got) -> list[str]:
        """One line per output of a sample that ``got`` (a backend's results of run ``run``)
        gets wrong, naming its first wrong elements."""
        lines = []
        for entry, expected, result in zip(self.owners, self.expected[run], got):
            if run >= len(entry.runs):     # the same inputs as its last run
                continue
            inputs = entry.runs[run]
            wrong = mismatches(expected, result, RTOL[self.dtype], entry.zero_sign_compared)
            compared = entry.compared(inputs, expected)
            if compared is not None:
                wrong &= compared
            if not wrong.any():
                continue
            shown = []
            for index in (tuple(map(int, i)) for i in np.argwhere(wrong)[:3]):
                aligned = [a[index] for a in inputs if a.shape == expected.shape]
                where = f"inputs {aligned}" if entry.elementwise else f"at {index}"
                shown.append(f"{where}: expected {expected[index]!r}, got {result[index]!r}")
            lines.append(f"{entry.sample.id} (run {run}): " + "; ".join(shown))
        return lines


def mismatches(expected, got, rtol, zero_sign=True) -> np.ndarray:
    """Where ``got`` is not ``expected``: a value off by more than ``rtol`` (relative, no
    absolute slack: a subnormal flushed to zero is wrong), NaN in one only, another infinity,
    or (``zero_sign``) a zero of the other sign. Non-float results must be equal."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, \
        f"{got.shape} {got.dtype}, expected {expected.shape} {expected.dtype}"
    if expected.dtype.kind != "f":
        return expected != got
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isfinite(expected) & (np.abs(got - expected) <= rtol * np.abs(expected))
    nan = np.isnan(expected)
    right = np.where(nan, np.isnan(got), (got == expected) | close)
    if zero_sign:
        right &= ~((got == 0) & (expected == 0) & (np.signbit(got) != np.signbit(expected)))
    return ~right


@functools.lru_cache(maxsize=None)
def sweep(dtype) -> Sweep:
    """The swept samples of ``dtype`` in one program, with the interpreter's results."""
    values = special_values(dtype)
    entries = []
    for sample in ALL_SAMPLES + constant_samples(dtype):
        if not _swept(sample):
            continue
        elementwise = _elementwise_only(sample)
        runs = _cartesian(sample, values) if elementwise else _patterned(sample, values, dtype)
        entries.append(Entry(sample, runs, elementwise))
    program, fetches, owners = sg.Program(), [], []
    with sg.program_guard(program):
        for number, entry in enumerate(entries):
            inputs = [sg.data(f"s{number}_in{i}", list(a.shape), a.dtype)
                      for i, a in enumerate(entry.runs[0])]
            out = entry.sample.build(*inputs)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            fetches += outs
            owners += [entry] * len(outs)
    runs = max(len(e.runs) for e in entries)
    feeds = [{f"s{number}_in{i}": array for number, entry in enumerate(entries)
              for i, array in enumerate(entry.runs[min(run, len(entry.runs) - 1)])}
             for run in range(runs)]
    reference = sg.compile(program, fetches, backend="interpreter")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = [reference(**f) for f in feeds]
    return Sweep(dtype, program, fetches, entries, owners, feeds, expected)


# integers whose double is another integer (beyond 2**53), the extremes, and powers that wrap
INTEGERS = {"int64": [0, 1, -1, 3, -3, 2 ** 53 + 1, -(2 ** 62) - 3, 2 ** 63 - 1, -(2 ** 63)],
            "int32": [0, 1, -1, 3, -3, 2 ** 24 + 1, 46341, 2 ** 31 - 1, -(2 ** 31)]}
EXPONENTS = [0, 1, 2, 3, 21, 39, 40, 63]


@functools.lru_cache(maxsize=None)
def integers():
    """``(program, fetches, feeds)``: elementwise ops on integer extremes, whose C text
    through double (floor, ceil, rint, pow) would not be exact."""
    program, fetches, feeds = sg.Program(), [], {}
    with sg.program_guard(program):
        for dtype, numbers in INTEGERS.items():
            base, exponent = np.meshgrid(np.array(numbers, dtype), np.array(EXPONENTS, dtype))
            x = sg.data(f"x_{dtype}", [base.size], dtype)
            n = sg.data(f"n_{dtype}", [base.size], dtype)
            feeds.update({f"x_{dtype}": base.ravel(), f"n_{dtype}": exponent.ravel()})
            fetches += [sg.floor(x), sg.ceil(x), sg.round(x), x ** n, x ** 3, sg.abs(x),
                        sg.sign(x), -x, sg.maximum(x, n), sg.clip(x, -n, n)]
    return program, fetches, feeds


def _programs():
    """What each backend compiles: the sweep of each dtype, and the integer program."""
    programs = {dtype: (sweep(dtype).program, sweep(dtype).fetches) for dtype in DTYPES}
    programs["integers"] = integers()[:2]
    return programs


@functools.lru_cache(maxsize=None)
def _c_programs() -> dict:
    """The C programs, compiled in one batch."""
    with c_backend.deferred():
        return {key: sg.compile(*program, backend="c", **OPTIONS)
                for key, program in _programs().items()}


@pytest.fixture(scope="module")
def cuda_device(tmp_path_factory):
    """The emulated device with the CUDA programs, and the programs."""
    if emulation.compiler() is None:
        pytest.skip("g++ is not installed")
    compiled = {key: sg.compile(*program, backend="cuda", **OPTIONS)
                for key, program in _programs().items()}
    library = emulation.Library([c._executable.cuda_source for c in compiled.values()],
                                cache_dir=emulation.session_cache_dir(tmp_path_factory))
    return EmulatedDevice(library), compiled


def _runner(backend, key, request):
    """A function running program ``key`` (see :func:`_programs`) on ``backend``."""
    if backend == "cuda":
        device, compiled = request.getfixturevalue("cuda_device")
        return lambda feeds: device.run(compiled[key], feeds)
    compiled = _c_programs()[key] if backend == "c" else \
        sg.compile(*_programs()[key], backend=backend, **OPTIONS)
    return lambda feeds: compiled(**feeds)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_special_values_match_the_interpreter(backend, dtype, request):
    swept = sweep(dtype)
    run = _runner(backend, dtype, request)
    failures = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for number, feeds in enumerate(swept.feeds):
            failures += swept.failures(number, run(feeds))
    assert not failures, f"{backend} {dtype}:\n" + "\n".join(failures[:40])


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_extremes_match_the_interpreter(backend, request):
    """Integer floor, ceil, round and power are exact (C and CUDA compute them apart from
    the float text, which goes through double); the others wrap as NumPy's do."""
    program, fetches, feeds = integers()
    expected = sg.compile(program, fetches, backend="interpreter")(**feeds)
    got = _runner(backend, "integers", request)(feeds)
    for value, e, g in zip(fetches, expected, got):
        np.testing.assert_array_equal(g, e, err_msg=f"{backend}: {value.op.name} "
                                                    f"of {value.dtype}")


def test_the_sweep_covers_the_ops_with_c_or_cuda_code():
    """Every library op the C or CUDA backend computes itself (elementwise ops, fusible
    reductions, row ops) is in some swept sample, but those whose inputs are never floats
    (logic, ``one_hot``, the random ops)."""
    swept = {op.opdef.name for entry in sweep("float64").entries
             for op in walk_ops(entry.sample.program("float64")[0].ops)}
    own = {name for table in (C_LOWERINGS, CUDA_LOWERINGS) for name, rule in table.rules.items()
           if not getattr(rule, "indexed", False) and name in REGISTRY
           and not REGISTRY[name].user_defined}
    own |= {name for name, opdef in REGISTRY.items() if opdef.reduction is not None}
    assert own - swept <= {"one_hot", "logical_and", "logical_or", "logical_not"}, own - swept
