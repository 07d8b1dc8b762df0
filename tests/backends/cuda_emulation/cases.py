"""The programs the emulated CUDA suite runs, each with feeds and the interpreter's answer.

* :func:`sample_cases`: every op sample in three variants (float64 with gradients and fusion,
  float32 with gradients unfused, float16 forward fused);
* :func:`layout_cases`: programs sized to reach every path of the kernels and of the host's
  launch logic: reduction lengths that no split count divides (primes), odd batches, more rows
  than blocks (grid-stride loops over outputs), idle lanes (rows shorter than a warp, column
  blocks past the last output), splits merged with more than 32 partials per output (with 3
  SMs), every reduce kind on data whose answer a wrong identity would change, general
  (non-trailing) reduced axes, epilogues reading broadcast captures and views, dynamic dims.
  With ``sms`` 1 and 3 they cover both grid regimes (see ``codegen_templates/cuda/host.py.j2``).
"""
from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

import symgrad as sg
from symgrad import ir_backward
from tests.ops.samples import ALL_SAMPLES

TOLERANCE = {"float64": 1e-6, "float32": 1e-4, "float16": 2e-2}
# (dtype, with gradients, fusion) of the programs built from each sample
VARIANTS = [("float64", True, True), ("float32", True, False), ("float16", False, True)]


@dataclasses.dataclass
class Case:
    name: str
    program: object
    fetches: list
    feeds: dict
    rtol: float
    atol: float
    options: dict = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def compiled(self):
        return sg.compile(self.program, self.fetches, backend="cuda", **self.options)

    @functools.cached_property
    def expected(self):
        return sg.compile(self.program, self.fetches, backend="interpreter")(**self.feeds)

    @property
    def source(self) -> str:
        return self.compiled._executable.cuda_source

    def check(self, got) -> None:
        """Assert ``got`` (the emulated outputs) matches the interpreter."""
        assert len(got) == len(self.expected), self.name
        for index, (e, g) in enumerate(zip(self.expected, got)):
            message = f"{self.name}: output {index}"
            assert g.shape == e.shape and g.dtype == e.dtype, \
                f"{message}: {g.shape} {g.dtype}, expected {e.shape} {e.dtype}"
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64),
                                       rtol=self.rtol, atol=self.atol, err_msg=message)


@functools.lru_cache(maxsize=None)
def sample_cases() -> tuple[Case, ...]:
    """The op-sample programs (made once per process: the test modules share them)."""
    cases = []
    for sample in ALL_SAMPLES:
        for dtype, with_grad, fusion in VARIANTS:
            prog, fetches = sample.program(dtype, with_grad and sample.grad)
            rtol = TOLERANCE[dtype]
            cases.append(Case(f"{sample.id} {dtype}", prog, fetches, sample.feeds(dtype), rtol,
                              rtol * max(sample.atol, 1e-6) * 100, {"fusion": fusion}))
    return tuple(cases)


def memory_cases() -> tuple[Case, ...]:
    """The programs run under AddressSanitizer: each op sample once (its float32 variant, with
    gradients) and every launch-path program. Whether a kernel reads or writes out of bounds
    depends on the shapes and the launch geometry, which these cover; the other dtype variants
    of a sample run the same index arithmetic."""
    return tuple(c for c in sample_cases() if c.name.endswith(" float32")) + layout_cases()


def _case(cases, name, shapes, build, dtype="float64", dynamic=False, low=0.5, high=1.5):
    rng = np.random.default_rng(len(cases))
    prog = sg.Program()
    with sg.program_guard(prog):
        xs = [sg.data(f"x{i}", [None] + list(s[1:]) if dynamic else list(s), dtype)
              for i, s in enumerate(shapes)]
        outs = build(*xs)
    feeds = {f"x{i}": rng.uniform(low, high, s).astype(dtype) for i, s in enumerate(shapes)}
    rtol = TOLERANCE[dtype]
    cases.append(Case(name, prog, list(outs), feeds, rtol, rtol * 1e-3))


@functools.lru_cache(maxsize=None)
def layout_cases() -> tuple[Case, ...]:
    """The launch-path programs (made once per process)."""
    cases = []
    add = functools.partial(_case, cases)
    # maps: partial last block; a grid-stride loop (more elements than 256 x 32 x SMs)
    add("map-grid-stride", [(30011,)], lambda x: [sg.tanh(x) * 2.0 + x])
    add("map-odd-batch-broadcast", [(37, 7), (7,)], lambda x, b: [sg.exp(x - b)], dynamic=True)
    # rows: a warp per output; more rows than blocks; rows shorter than a warp (idle lanes)
    add("row-warps-many-rows", [(1031, 45)], lambda x: [sg.sum(sg.tanh(x), axis=1)],
        dynamic=True)
    add("row-short-rows", [(301, 5)], lambda x: [sg.max(x, axis=1), sg.min(x, axis=1)],
        low=-2.0, high=-1.0)
    # rows split over blocks (K prime: no split count divides it), merged per output
    add("row-warps-split", [(3, 1009)], lambda x: [sg.sum(x, axis=1) * 2.0])
    add("row-block-split", [(20011,)], lambda x: [sg.sum(sg.tanh(x * 1.5) + x), x * 2.0],
        "float32", dynamic=True)
    # whole-block teams: more rows than blocks (second barrier reused), negative data for max
    add("row-block-many-rows", [(101, 4099)], lambda x: [sg.max(sg.exp(x), axis=1) * -2.0],
        low=-2.0, high=-1.0)
    # more than 32 partials per output: the merge kernel's lanes loop (3 SMs: 48 splits)
    add("row-block-split-wide", [(200003,)], lambda x: [sg.mean(x)], "float32")
    # columns: 32 outputs per block, partial last block, split K (prime) merged
    add("col-split", [(3001, 41), (41,)],
        lambda x, b: [sg.sum(x * b, axis=0) + b, sg.mean(x, axis=0, keepdims=True)])
    add("col-many-blocks", [(9, 1301)], lambda x: [sg.min(x, axis=0)], low=1.0, high=2.0)
    add("col-late-map", [(3001, 40), (40,)],
        lambda x, b: [sg.sum(x * b, axis=0), sg.exp(x * b) - x])
    # general layouts: reduced axes that are not the trailing (row) or leading (col) ones
    add("col-general", [(5, 301, 7), (5, 1, 7)],
        lambda x, c: [sg.min(x - c, axis=1, keepdims=True) * c])
    add("prod-leading", [(5, 301, 7)], lambda x: [sg.prod(x, axis=(0, 1))], low=0.99, high=1.01)
    add("row-general", [(6, 5, 41)],
        lambda x: [sg.sum(x, axis=(0, 2)), sg.max(x, axis=(0, 2), keepdims=True) - 1.0])
    add("broadcast-views", [(67, 1), (1, 49)],
        lambda a, b: [sg.sum(sg.broadcast_to(a, (67, 49)) * b, axis=1) / sg.sum(b)])
    add("loss-and-gradient", [(701, 9)],
        lambda x: [sg.sum(sg.tanh(x) * x), *ir_backward.grad(sg.sum(sg.tanh(x) * x), [x])],
        "float32", dynamic=True)
    add("half-storage", [(1003, 3)], lambda x: [sg.sum(sg.exp(x), axis=0), x * 2.0], "float16")
    # row ops (a warp per row): rows longer than a warp, more rows than warps, a class axis
    # that is not the last, integer labels and the loss's gradient
    add("row-op-softmax-long-rows", [(1031, 41)], lambda x: [sg.nn.softmax(x, axis=1)],
        dynamic=True)
    add("row-op-log-softmax-inner", [(45, 37)], lambda x: [sg.nn.log_softmax(x, axis=0)])
    add("row-op-cross-entropy", [(301, 37)], _cross_entropy_and_gradient, "float32")
    # a long repetitive chain: groups of the same structure launch one shared kernel
    add("shared-kernels", [(37, 8)], _repeated_chain, dynamic=True, low=-1.0, high=1.0)
    return tuple(cases)


def _cross_entropy_and_gradient(x):
    labels = sg.constant(np.arange(x.shape[0]) * 7 % x.shape[1])
    loss = sg.mean(sg.nn.softmax_cross_entropy(x, labels))
    return [loss, *ir_backward.grad(loss, [x])]


def _repeated_chain(x, n=300):
    y = x
    for i in range(n):
        y = sg.tanh(y) if i % 2 else y * 0.9
    return [y, *ir_backward.grad(sg.sum(y), [x])]


def distinct_kernels(compiled_list) -> list[str]:
    """The distinct kernel texts of CUDA programs, renamed apart (kernel names are unique only
    within a program), to compile many in one translation unit after one prelude."""
    texts = {}
    for compiled in compiled_list:
        for text in compiled.kernels.values():
            texts.setdefault(re.sub(r"\bk\d+_", "K_", text), None)
    return [re.sub(r"\bK_", f"u{i}_", text) for i, text in enumerate(texts)]
