"""``map_reduce``: a compiled program run data-parallel over Dask arrays, on the driver side.

The graph has one task per chunk of rows, which runs the artifact's standalone module
(:func:`symgrad.distributed.worker.run_chunk`) on that chunk's slice of every sharded input
and the shared replicated inputs. The parts of all ``"sum"`` and ``"mean"`` fetches are then
added by one tree of tasks (fan-in :data:`TREE_FAN_IN`; a handful of tasks, whatever the
number of fetches), whose root divides the means by the rows and casts to the fetches'
dtypes; the per-row outputs of ``"concat"`` fetches are joined into a Dask array chunked like
the inputs. A chunk of no rows is not run and contributes nothing. Everything the call can
check without running the program is checked here, before anything is shipped.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import dask
import dask.array as da
import numpy as np

from ..errors import FeedError, SymgradError
from ..ir.value import format_shape
from ..ops.random import RNG_STEP
from ..runtime.artifact import LoadedProgram, host_array
from ..runtime.compiled import CompiledProgram
from ..runtime.feeds import check_feed
from . import worker
from .shipping import ByValue, active_client, artifact_payload, ship, ship_artifact

REDUCTIONS = ("sum", "mean", "concat")
TREE_FAN_IN = 8   # chunk results added per task of the reduction tree

_RUN_CHUNK = ByValue(worker.run_chunk)
_ADD_PARTS = ByValue(worker.add_parts)
_FINISH = ByValue(worker.finish)


class ShardingError(SymgradError, ValueError):
    """Sharded inputs or fetches that ``map_reduce`` cannot split by rows: chunked along
    another axis, chunked unlike each other, of unknown chunk sizes, or a fetch whose leading
    dim is not the batch under ``reduce="concat"``."""


# --- inputs ----------------------------------------------------------------------------------
def _spec(specs, name, where):
    if name not in specs:
        raise FeedError(f"unknown input {name!r} in {where}; the program's inputs are: "
                        f"{', '.join(specs) or 'none'}")
    return specs[name]


def _shown_chunks(rows) -> str:
    shown = ", ".join(str(n) for n in rows[:4]) + (", ..." if len(rows) > 4 else "")
    return f"{len(rows)} chunks ({shown}) over {sum(rows)} rows"


def _check_sharded_array(name, array, spec):
    """One sharded input: a Dask array of the input's rank, dims and dtype kind, chunked along
    axis 0 only, with known chunk sizes (that match a known leading dim)."""
    if not isinstance(array, da.Array):
        raise TypeError(f"sharded[{name!r}] must be a dask array, got {type(array).__name__} "
                        f"(wrap NumPy data with dask.array.from_array(x, chunks=(rows, ...)))")
    if not spec.shape:
        raise ShardingError(f"input {name!r} is a scalar; only inputs with a leading batch dim "
                            f"can be sharded (pass it in replicated)")
    if any(np.isnan(n) for sizes in array.chunks for n in sizes):
        raise ShardingError(f"sharded input {name!r} has unknown chunk sizes; call "
                            f"{name}.compute_chunk_sizes() first")
    split = [axis for axis, sizes in enumerate(array.chunks) if axis and len(sizes) > 1]
    if split:
        raise ShardingError(
            f"sharded input {name!r} is chunked along axis {split[0]} "
            f"({len(array.chunks[split[0]])} chunks); map_reduce splits rows only: "
            f"rechunk it with {name}.rechunk({{{', '.join(f'{a}: -1' for a in split)}}})")
    batch_free = spec._replace(shape=(None, *spec.shape[1:]))
    check_feed(batch_free, np.empty((0, *array.shape[1:]), array.dtype))
    if spec.shape[0] is not None and any(n not in (0, spec.shape[0]) for n in array.chunks[0]):
        raise ShardingError(f"input {name!r} has a fixed leading dim {spec.shape[0]}, but "
                            f"sharded[{name!r}] has {_shown_chunks(array.chunks[0])}")


def _checked_sharded(sharded, specs) -> tuple[dict, tuple]:
    """The sharded inputs by name and their common row chunks."""
    if not isinstance(sharded, Mapping):
        raise TypeError(f"sharded must map input names to dask arrays, "
                        f"got {type(sharded).__name__}")
    if not sharded:
        raise ValueError("sharded is empty: map_reduce needs at least one input to split by rows")
    for name, array in sharded.items():
        _check_sharded_array(name, array, _spec(specs, name, "sharded"))
    (first, first_array), *others = sharded.items()
    rows = tuple(int(n) for n in first_array.chunks[0])
    for name, array in others:
        if tuple(array.chunks[0]) != rows:
            raise ShardingError(
                f"sharded inputs {first!r} and {name!r} are not chunked alike along axis 0: "
                f"{first!r} has {_shown_chunks(rows)}, {name!r} has "
                f"{_shown_chunks(array.chunks[0])}; rechunk one like the other, e.g. "
                f"{name}.rechunk({{0: {first}.chunks[0]}})")
    return dict(sharded), rows


def _current_parameters(fn, specs, sharded) -> dict:
    """The parameters of a compiled program (or a loaded artifact) whose state no longer holds
    their initial values: their current values, which its artifact does not hold."""
    compiled = fn.compiled if isinstance(fn, LoadedProgram) else fn
    if not isinstance(compiled, CompiledProgram):
        return {}
    return {name: host_array(array) for name, array in compiled.changed_state().items()
            if name in specs and name not in sharded}


def _checked_replicated(replicated, specs, sharded) -> dict:
    """The replicated inputs as arrays of their inputs' dtypes; every required input fed."""
    if not isinstance(replicated, Mapping):
        raise TypeError(f"replicated must map input names to NumPy arrays, "
                        f"got {type(replicated).__name__}")
    checked = {}
    for name, value in replicated.items():
        spec = _spec(specs, name, "replicated")
        if name in sharded:
            raise ValueError(f"input {name!r} is both sharded and replicated")
        if isinstance(value, da.Array):
            raise TypeError(f"replicated[{name!r}] is a dask array; replicated inputs are NumPy "
                            f"arrays sent whole to every worker (compute it, or shard it)")
        checked[name] = check_feed(spec, value)
    missing = [name for name, spec in specs.items()
               if spec.required and name not in sharded and name not in checked]
    if missing:
        raise FeedError(f"missing feed for input(s) {', '.join(map(repr, missing))} "
                        f"(give each in sharded or replicated)")
    return checked


# --- fetches ---------------------------------------------------------------------------------
def _reduce_modes(reduce, count) -> list[str]:
    modes = [reduce] * count if isinstance(reduce, str) else reduce
    if not isinstance(modes, (list, tuple)):
        raise TypeError(f"reduce must be one of {REDUCTIONS} or a list with one per fetch, "
                        f"got {type(reduce).__name__}")
    if len(modes) != count:
        raise ValueError(f"reduce lists {len(modes)} reductions for {count} fetches")
    for mode in modes:
        if mode not in REDUCTIONS:
            raise ValueError(f"unknown reduction {mode!r}; use one of {', '.join(REDUCTIONS)}")
    return list(modes)


@dataclasses.dataclass(frozen=True)
class _Fetch:
    """One fetch, its reduction, the dtype its parts are summed in and its result dtype:
    floating fetches keep their dtype (summed in at least float64); integer and bool fetches
    follow NumPy (``sum`` in int64, or uint64 for unsigned; ``mean`` in float64)."""

    label: str
    shape: tuple
    dtype: np.dtype
    mode: str

    @property
    def accumulator(self) -> np.dtype:
        if self.mode == "concat":
            return self.dtype
        if self.dtype.kind in "fc":
            return np.promote_types(self.dtype, np.float64)
        if self.mode == "mean":
            return np.dtype(np.float64)
        return np.dtype(np.uint64 if self.dtype.kind == "u" else np.int64)

    @property
    def result_dtype(self) -> np.dtype:
        return self.dtype if self.dtype.kind in "fc" else self.accumulator

    @property
    def empty_shape(self) -> tuple:
        """The shape of the part a chunk of no rows gives (zeros, or no per-row outputs)."""
        return (0, *self.shape[1:]) if self.mode == "concat" else self.shape

    def check(self, rows):
        """Refuse, before running anything, what the parts could not be reduced into."""
        if self.mode == "concat":
            if not self.shape or (self.shape[0] is not None
                                  and any(n not in (0, self.shape[0]) for n in rows)):
                raise ShardingError(
                    f"reduce='concat' needs per-row outputs, but {self.label} has shape "
                    f"{format_shape(self.shape)}, whose leading dim is not the batch (the "
                    f"inputs have {_shown_chunks(rows)}); reduce it with 'sum' or 'mean'")
            known = self.shape[1:]
        else:
            known = self.shape
        if None in known:
            raise ShardingError(
                f"{self.label} has shape {format_shape(self.shape)} with unknown dims, which "
                f"reduce={self.mode!r} cannot lay out"
                + (" (per-row outputs need 'concat')" if self.mode != "concat" else ""))


def _fetches(outputs, modes, rows) -> list[_Fetch]:
    fetches = []
    for index, (spec, mode) in enumerate(zip(outputs, modes)):
        label = f"fetch {index}" + (f" ({spec.name!r})" if spec.name else "")
        fetch = _Fetch(label, tuple(spec.shape), np.dtype(spec.dtype), mode)
        fetch.check(rows)
        fetches.append(fetch)
    return fetches


# --- the graph -------------------------------------------------------------------------------
def _tree(results):
    """The chunk results summed by a tree of ``add_parts`` tasks, fan-in TREE_FAN_IN, in
    chunk order (so the sum is the same however the tasks are scheduled)."""
    level = list(results)
    while len(level) > 1:
        groups = [level[i:i + TREE_FAN_IN] for i in range(0, len(level), TREE_FAN_IN)]
        level = [group[0] if len(group) == 1 else dask.delayed(_ADD_PARTS, pure=True)(*group)
                 for group in groups]
    return level[0]


def _reduced(fetches, results, rows) -> list:
    """Dask arrays of the ``"sum"``/``"mean"`` fetches, from one tree over all of them."""
    if not fetches:
        return []
    finals = dask.delayed(_FINISH, pure=True, nout=len(fetches))(
        _tree(results), [(f.mode, f.result_dtype.name) for f in fetches], sum(rows))
    return [da.from_delayed(final, shape=fetch.shape, dtype=fetch.result_dtype)
            for final, fetch in zip(finals, fetches)]


def _concatenated(fetches, results, rows) -> list:
    """Dask arrays of the ``"concat"`` fetches: the chunks' per-row outputs, joined."""
    return [da.concatenate([da.from_delayed(result[1 + index], shape=(n, *fetch.shape[1:]),
                                            dtype=fetch.dtype)
                            for result, n in zip(results, rows)], axis=0)
            for index, fetch in enumerate(fetches)]


def map_reduce(fn, sharded, replicated=None, reduce="mean", compute=True, key=None):
    """Run ``fn`` data-parallel over the rows of Dask arrays and reduce its fetches.

    ``fn``: a compiled program, a loaded artifact or an artifact path. ``sharded``: input
    name -> Dask array chunked along axis 0 only, with the same chunks for every name (each
    chunk of rows is one task). ``replicated``: input name -> NumPy array that every chunk
    shares (sent to each worker once per call); parameters not given take their value from
    the artifact. A compiled program or loaded artifact runs with the current values of its
    state (``fn.state``: each parameter its calls have updated travels as a replicated input
    unless given here); ``map_reduce`` never changes that state. ``reduce``: ``"sum"``,
    ``"mean"`` (each chunk's output weighted by its rows: the mean over all rows of a program
    that takes a mean over its batch) or ``"concat"`` (per-row outputs joined along axis 0),
    or a list with one per fetch. Floating fetches keep their dtype (parts are summed in at
    least float64, by a tree); integer and bool fetches follow NumPy (``sum`` in int64,
    ``mean`` in float64). A program that draws random numbers runs chunk ``k`` of ``K`` at
    step ``step * K + k`` (``step``: its ``rng_step`` as fed, or as its state holds it), as
    if the chunks were ``K`` calls in a row: each chunk draws its own numbers. A chunk of no
    rows is not run and contributes nothing (zeros to a ``"sum"`` or ``"mean"``, no rows to
    a ``"concat"``).

    What the workers run is always an artifact that the installed symgrad writes from the
    program: a loaded artifact ships the program ``sg.load`` verified and compiled from its
    ``program.json`` (never its files), and an artifact path is first loaded with
    ``sg.load(path, key=key)``, every check included. ``key`` (bytes or str; only with a
    path): the key the artifact must be signed with.

    Returns the list of fetches as NumPy arrays, or as Dask arrays with ``compute=False``.
    The graph runs on the active scheduler: a ``dask.distributed.Client`` if one is the
    default (a worker plugin then installs the artifact once on every worker, those that
    join or restart later included, and tasks carry only its digest), else Dask's local
    scheduler. Workers run the artifact's standalone module and need
    NumPy and Dask, not symgrad.

    Errors, raised before anything runs: an artifact path that ``sg.load`` refuses
    (:class:`~symgrad.ArtifactError`), ``key`` with anything but a path (``TypeError``), an
    unknown input name or a missing required input (:class:`~symgrad.FeedError`), a feed of
    the wrong rank, dims or dtype kind (:class:`~symgrad.FeedError` /
    :class:`~symgrad.FeedTypeError`), and
    :class:`ShardingError` for inputs chunked along another axis, chunked unlike each other
    or of unknown chunk sizes, and for ``"concat"`` of a fetch whose leading dim is not the
    batch (a fetch that only shows this when it runs raises ``ValueError`` then).
    """
    shipped = artifact_payload(fn, key)
    specs = {spec.name: spec for spec in shipped.inputs}
    sharded, rows = _checked_sharded(sharded, specs)
    if isinstance(replicated, Mapping):
        replicated = {**_current_parameters(fn, specs, sharded), **replicated}
    elif replicated is None:
        replicated = _current_parameters(fn, specs, sharded)
    replicated = _checked_replicated(replicated, specs, sharded)
    fetches = _fetches(shipped.outputs, _reduce_modes(reduce, len(shipped.outputs)), rows)
    if "mean" in (fetch.mode for fetch in fetches) and sum(rows) == 0:
        raise ShardingError("reduce='mean' over zero rows: the sharded inputs are empty")

    client = active_client()
    artifact_node = ship_artifact(client, shipped)
    replicated_node = ship(replicated) if replicated else {}
    plan = {"sharded": list(sharded),
            "fetches": [(f.mode, f.accumulator.name, f.label, f.empty_shape) for f in fetches],
            "step": RNG_STEP if RNG_STEP in specs and RNG_STEP not in sharded else None,
            "chunks": len(rows)}
    blocks = [array.to_delayed(optimize_graph=False).ravel() for array in sharded.values()]
    per_row = [fetch for fetch in fetches if fetch.mode == "concat"]
    results = [dask.delayed(_RUN_CHUNK, pure=True, nout=1 + len(per_row))(
        artifact_node, replicated_node, plan, index, *chunk)
        for index, chunk in enumerate(zip(*blocks))]
    reduced = iter(_reduced([f for f in fetches if f.mode != "concat"], results, rows))
    joined = iter(_concatenated(per_row, results, rows))
    arrays = [next(joined if fetch.mode == "concat" else reduced) for fetch in fetches]
    if not compute:
        return arrays
    return [np.asarray(value) for value in dask.compute(*arrays)]
