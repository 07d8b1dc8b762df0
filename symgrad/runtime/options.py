"""Compile options shared by the pass pipeline and the backends."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Options of :func:`symgrad.compile`.

    ``passes``: names of the passes to run, in pipeline order, or ``None`` for the backend's
    default pipeline (the interpreter runs none; code generators run all). ``fusion``: build
    fused groups (switch off to get one kernel per op). ``chunk_size``: elements per chunk of
    a fused NumPy loop. ``accumulate_float64``: accumulate float32 sums in float64.
    ``cache_dir``: where generated modules are cached (default ``$SYMGRAD_CACHE_DIR`` or
    ``~/.cache/symgrad``). ``max_group_size``: cap on ops per fused group. ``threads``: threads
    a chunked NumPy loop of at least 4 chunks is split across (contiguous row ranges on a
    thread pool the generated module makes on first use); ``None`` means the number of CPUs
    the process may use (``os.sched_getaffinity``, else ``os.cpu_count()``), at most 8, read
    when the program runs; ``1`` runs every loop on the calling thread and
    the module has no pool.
    """

    passes: tuple | None = None
    fusion: bool = True
    chunk_size: int = 65536
    accumulate_float64: bool = True
    cache_dir: str | None = None
    max_group_size: int = 64
    return_numpy: bool = False   # CUDA backend: return NumPy arrays instead of CuPy
    threads: int | None = None

    def __post_init__(self):
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be None or a positive int, got {self.threads!r}")

    def replace(self, **changes) -> "CompileOptions":
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """Stable text of the options for cache keys."""
        fields = dataclasses.asdict(self)
        fields.pop("cache_dir")
        return repr(sorted(fields.items()))
