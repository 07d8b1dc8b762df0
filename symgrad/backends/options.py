"""Options the code generators share (each backend lists those it reads in its ``Backend``),
and the fusion policy of the backends that run chunk loops on a thread pool."""
from __future__ import annotations

from ..option_schema import Option
from ..passes.options import FusionPolicy

# a chunk loop of fewer chunks runs on the calling thread (generated modules read it)
MIN_PARALLEL_CHUNKS = 4

CHUNK_SIZE = Option("chunk_size", int, 65536, "elements per chunk of a fused loop", minimum=1)
THREADS = Option(
    "threads", int, None, "threads a chunked loop of at least 4 chunks is split across "
    "(contiguous row ranges on a thread pool the generated module makes on first use); None "
    "means the number of CPUs the process may use (os.sched_getaffinity, else os.cpu_count()), "
    "at most 8, read when the program runs; 1 runs every loop on the calling thread and the "
    "module has no pool", nullable=True, minimum=1)
ACCUMULATE_FLOAT64 = Option("accumulate_float64", bool, True,
                            "accumulate float32 sums in float64")
CACHE_DIR = Option("cache_dir", str, None, "where generated code is cached (default "
                   "$SYMGRAD_CACHE_DIR or ~/.cache/symgrad)", nullable=True, in_cache_key=False)


def chunk_loop_policy(options) -> FusionPolicy:
    """Fusion for a backend whose groups are chunk loops split between ``options.threads``
    threads: an op that fuses with nothing still gets a loop of its own when it spans at least
    :data:`MIN_PARALLEL_CHUNKS` chunks (a single library call would run on one thread)."""
    if options.threads == 1:
        return FusionPolicy()
    return FusionPolicy(alone_min_elements=MIN_PARALLEL_CHUNKS * options.chunk_size)
