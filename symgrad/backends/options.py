"""Options the code generators share (each backend lists those it reads in its ``Backend``),
and the fusion policy of the backends that run chunk loops on a thread pool."""
from __future__ import annotations

from ..option_schema import Option
from ..passes.options import FusionPolicy

# a chunk loop of fewer chunks runs on the calling thread (generated modules read it)
MIN_PARALLEL_CHUNKS = 4
# the same for a fused group of only cheap ops (no transcendental function) in a generated
# NumPy module: its threads hand NumPy's GIL to each other at every ufunc call and share the
# memory bandwidth. Measured on the 2-core machine: groups of cheap ops over 131k to 2M
# float32 elements (1 to 4 where/multiply/add steps a chunk) ran 0.86x to 1.05x as fast on 2
# threads as on 1, W8's four relu/bias groups (131k to 524k elements) 0.63x to 0.86x; a lone
# float64 sin over 1M points (W5) 1.84x, a convolution's ranges (their GEMMs) 1.45x
NUMPY_GROUP_MIN_PARALLEL_CHUNKS = 16

CHUNK_SIZE = Option("chunk_size", int, 65536, "elements per chunk of a fused loop", minimum=1)
THREADS = Option(
    "threads", int, None, "threads a chunked loop of at least 4 chunks (16 for a NumPy "
    "backend's fused group of cheap ops only) is split across (contiguous row ranges on a "
    "thread pool the generated module makes on first use); None "
    "means the number of CPUs the process may use (os.sched_getaffinity, else os.cpu_count()), "
    "at most 8, read when the program runs; 1 runs every loop on the calling thread and the "
    "module has no pool", nullable=True, minimum=1)
ACCUMULATE_FLOAT64 = Option("accumulate_float64", bool, True,
                            "accumulate float32 sums in float64")
FLUSH_DENORMALS = Option(
    "flush_denormals", bool, False, "compiled code reads subnormal floats as 0 and writes 0 for "
    "a subnormal result (the CPU's flush-to-zero and denormals-are-zero modes, set for each "
    "call and restored after it; CUDA: -ftz=true), as XLA's CPU code and "
    "torch.set_flush_denormal(True) do: much faster where values pass through subnormals (a "
    "vanishing gradient through many tanh steps), and results differ from NumPy's only where "
    "NumPy's pass below the smallest normal float (1.2e-38 in float32, 2.2e-308 in float64)")
CACHE_DIR = Option("cache_dir", str, None, "where generated code is cached (default "
                   "$SYMGRAD_CACHE_DIR or ~/.cache/symgrad)", nullable=True, in_cache_key=False)


def chunk_loop_policy(options) -> FusionPolicy:
    """Fusion for a backend whose groups are chunk loops split between ``options.threads``
    threads: an op that fuses with nothing still gets a loop of its own when it spans at least
    :data:`MIN_PARALLEL_CHUNKS` chunks (a single library call would run on one thread)."""
    if options.threads == 1:
        return FusionPolicy()
    return FusionPolicy(alone_min_elements=MIN_PARALLEL_CHUNKS * options.chunk_size)
