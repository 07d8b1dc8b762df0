"""Data-parallel runs of compiled programs on Dask (install the ``dask`` extra).

:func:`map_reduce` splits the rows of Dask arrays into one task per chunk, runs the
program's AOT artifact on each chunk through the artifact's standalone module (so workers
need NumPy and Dask, not symgrad), and reduces the fetches with a tree: ``"sum"``,
``"mean"`` weighted by rows, or ``"concat"`` of per-row outputs. See docs/scaling-out.md.
"""
try:
    import dask.array  # noqa: F401
    import distributed  # noqa: F401
except ImportError as exc:   # pragma: no cover - depends on the environment
    raise ImportError(f"symgrad.distributed needs Dask: pip install 'symgrad[dask]' ({exc})") \
        from exc

from .driver import REDUCTIONS, TREE_FAN_IN, ShardingError, map_reduce

__all__ = ["REDUCTIONS", "TREE_FAN_IN", "ShardingError", "map_reduce"]
