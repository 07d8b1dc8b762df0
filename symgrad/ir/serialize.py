"""Program <-> JSON, without pickle.

``program_to_json(program, array_sink, fetches=())`` returns a JSON-able dict;
``program_from_json(obj, array_source, op_table)`` rebuilds an equivalent :class:`Program`
(same value ids, names, types, stop_gradient flags, ``.grad`` links, backward provenance and
nested blocks with their arguments and yields) that can be printed, verified, compiled and
differentiated again; ``fetches_from_json(obj, program)`` gives back the fetched Values of the
loaded program. ``op_table`` maps op names to OpDefs: the IR layer knows no op, so the caller
passes the table (``symgrad.ops.op_table()``: the registry plus the library's internal ops).
Nothing but the ops of that table is ever looked up, imported or instantiated on load.

Values are referenced by their *position* in :func:`program_values` order (every result of
every op and every argument of every block, nested blocks in preorder), not by ``Value.id``:
ids are only unique per block (a fusion op's results reuse the ids of the inner Values they
yield).

Arrays never go into the JSON: ``array_sink(array) -> name`` stores each ndarray attr (a
constant's value, a parameter's init...) and returns a name; ``array_source(name) -> ndarray``
gives it back. Other attrs are encoded with tags so that types survive the round trip::

    None, bool, int, str, finite float     as themselves
    float nan / inf                        {"$float": "nan"}
    tuple, list, dict                      {"$tuple": [...]}, [...], {"$dict": [[k, v], ...]}
    np.dtype                               {"$dtype": "float32"}
    np.generic scalar                      {"$scalar": "float32", "value": 1.5}
    slice, Ellipsis                        {"$slice": [start, stop, step]}, {"$ellipsis": true}
    ndarray                                {"$array": name}

Layout: ``{"format", "version", "next_id", "inputs", "parameters", "grads", "fetches", "ops",
"detached_ops", "dim_constraints"}``; each op is ``{"id", "op", "inputs", "attrs", "results", "forward_op", "loc",
"blocks"}`` where ``forward_op`` is the ``id`` of the op it is the backward of and ``blocks`` a
list of ``{"args": [value records], "ops": [...], "yields": [positions]}``; an op with a
``twin_of`` or ``passes_cotangents`` (:mod:`symgrad.ir.operation`) also has ``"twin_of":
[position or null per result]`` or ``"passes_cotangents": true``. ``detached_ops``
keeps forward ops that passes removed from the program but that backward ops still name as
their provenance, or that assumed something of the dims (``dim_constraints``: ``[left, right,
op id]``, what :mod:`symgrad.backends.dim_code` checks at run time). Walks are iterative (programs reach 100,000 ops).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArtifactError
from ..gc_pause import gc_paused
from .dims import Constraint, dim_from_json, dim_to_json
from .graph import walk_defined, walk_ops
from .operation import Operation
from .program import Block, Program
from .value import Value

FORMAT = "symgrad-program"
VERSION = 2      # 2: blocks carry arguments and yields (format 1 stored fused bodies as objects)


# --- attrs ----------------------------------------------------------------------------------
class _Encoder:
    def __init__(self, array_sink):
        self.array_sink = array_sink

    def __call__(self, value):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int) and not isinstance(value, np.generic):
            return value
        if isinstance(value, float) and not isinstance(value, np.generic):
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, np.ndarray):
            return {"$array": self.array_sink(value)}
        if isinstance(value, np.dtype):
            return {"$dtype": _dtype_name(value)}
        if isinstance(value, np.generic):
            return {"$scalar": value.dtype.name, "value": self(value.item())}
        if isinstance(value, tuple):
            return {"$tuple": [self(v) for v in value]}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {"$dict": [[self(k), self(v)] for k, v in value.items()]}
        if isinstance(value, slice):
            return {"$slice": [self(v) for v in (value.start, value.stop, value.step)]}
        if value is Ellipsis:
            return {"$ellipsis": True}
        raise TypeError(f"cannot serialize a {type(value).__name__} attr without pickle")


class _Decoder:
    def __init__(self, array_source):
        self.array_source = array_source

    def __call__(self, obj):
        if isinstance(obj, list):
            return [self(v) for v in obj]
        if isinstance(obj, dict):
            return self.tagged(obj)
        return obj

    def tagged(self, obj):
        tag = next((key for key in obj if key.startswith("$")), None)
        payload = obj.get(tag)
        if tag == "$float":
            return float(payload)
        if tag == "$array":
            array = np.array(self.array_source(payload), order="C")
            array.flags.writeable = False
            return array
        if tag == "$dtype":
            return _dtype(payload)
        if tag == "$scalar":
            return np.dtype(payload).type(self(obj["value"]))
        if tag == "$tuple":
            return tuple(self(v) for v in payload)
        if tag == "$dict":
            return {self(k): self(v) for k, v in payload}
        if tag == "$slice":
            return slice(*(self(v) for v in payload))
        if tag == "$ellipsis":
            return Ellipsis
        raise ArtifactError(f"unknown attr tag {tag!r}")


def encode_attr(value, array_sink):
    """The JSON form of one attr value (see the module docstring); ``TypeError`` for a type
    that cannot be stored without pickle."""
    return _Encoder(array_sink)(value)


def decode_attr(obj, array_source):
    """Inverse of :func:`encode_attr`."""
    return _Decoder(array_source)(obj)


# --- program -> JSON ------------------------------------------------------------------------
def program_values(program) -> list:
    """Every Value the program defines, nested blocks included, in serialization order: each
    op's results and the arguments of its blocks, then the Values of each block in turn."""
    return list(walk_defined(program.ops))


_DTYPE_NAMES: dict = {}   # np.dtype -> name, and name -> np.dtype (dtype.name is slow)


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def _dtype(name) -> np.dtype:
    dtype = _DTYPE_NAMES.get(name)
    if dtype is None:
        dtype = _DTYPE_NAMES[name] = np.dtype(name)
    return dtype


def _value_record(value):
    record = {"id": value.id, "shape": list(value.shape), "dtype": _dtype_name(value.dtype),
              "name": value.name, "stop_gradient": bool(value.stop_gradient)}
    if value.dims is not value.shape:
        record["dims"] = [dim_to_json(d) for d in value.dims]
    return record


def program_to_json(program: Program, array_sink, fetches=()) -> dict:
    """A JSON-able dict describing ``program`` (and which Values are ``fetches``); ndarray
    attrs go through ``array_sink``."""
    with gc_paused():
        return _program_to_json(program, array_sink, fetches)


def _program_to_json(program, array_sink, fetches):
    positions = {v: i for i, v in enumerate(program_values(program))}
    op_ids: dict[Operation, int] = {}
    for op in walk_ops(program.ops):
        op_ids[op] = len(op_ids)
    detached: list[Operation] = []

    def detach(op):   # an op the program no longer holds, named for provenance
        while op is not None and op not in op_ids:
            op_ids[op] = len(op_ids)
            detached.append(op)
            op = op.forward_op

    for op in list(op_ids):
        detach(op.forward_op)
    for _, op in program.dim_constraints:
        detach(op)
    constraints = [[dim_to_json(c.left), dim_to_json(c.right), op_ids[op]]
                   for c, op in program.dim_constraints]
    encode = _Encoder(array_sink)

    def op_record(op, inputs):
        try:
            attrs = {k: encode(v) for k, v in op.attrs.items()}
        except TypeError as exc:
            raise TypeError(f"op {op.name} (%{op.results[0].id if op.results else '?'}): "
                            f"{exc}") from None
        return {"id": op_ids[op], "op": op.name, "inputs": inputs, "attrs": attrs,
                "results": [_value_record(v) for v in op.results],
                "forward_op": None if op.forward_op is None else op_ids[op.forward_op],
                "loc": op.loc}

    def autodiff_fields(op, record):
        if op.passes_cotangents:
            record["passes_cotangents"] = True
        twin = op.twin_of
        if twin is not None and all(v is None or v in positions for v in twin):
            record["twin_of"] = [None if v is None else positions[v] for v in twin]

    top: list = []
    stack = [(iter(program.ops), top)]
    while stack:
        ops, out = stack[-1]
        op = next(ops, None)
        if op is None:
            stack.pop()
            continue
        record = op_record(op, [_position(positions, v, op) for v in op.inputs])
        autodiff_fields(op, record)
        out.append(record)
        record["blocks"] = []
        for block in op.blocks:
            block_record = {"args": [_value_record(v) for v in block.args], "ops": [],
                            "yields": [_position(positions, v, op) for v in block.yields]}
            record["blocks"].append(block_record)
        stack.extend((iter(block.ops), block_record["ops"])
                     for block, block_record in reversed(list(zip(op.blocks, record["blocks"]))))

    # a detached op's inputs may be gone from the program too: keep their types
    detached_records = [op_record(op, [_value_record(v) for v in op.inputs]) for op in detached]
    grads = [[i, positions[v.grad]] for v, i in positions.items()
             if v.grad is not None and v.grad in positions]
    return {"format": FORMAT, "version": VERSION, "next_id": program._next_id,
            "inputs": [_position(positions, v, "inputs") for v in program.inputs],
            "parameters": [_position(positions, v, "parameters") for v in program.parameters],
            "grads": grads,
            "fetches": [_position(positions, v, "fetches") for v in fetches],
            "ops": top, "detached_ops": detached_records, "dim_constraints": constraints}


def _position(positions, value, where):
    try:
        return positions[value]
    except KeyError:
        label = where if isinstance(where, str) else f"op {where.name}"
        raise ValueError(f"{label} uses {value!r}, which the program does not define") from None


# --- JSON -> program ------------------------------------------------------------------------
def _lookup_opdef(table, name):
    opdef = table.get(name) if isinstance(name, str) else None
    if opdef is None:
        raise ArtifactError(
            f"program uses op {name!r}, which is not registered in this process; import the "
            f"module that defines it (custom ops must be registered before loading)")
    return opdef


def _new_value(program, record, op, index, arg_of=None):
    shape = [None if d is None else int(d) for d in record["shape"]]
    if "dims" in record:
        try:
            dims = [dim_from_json(d, program._anonymous_dims) for d in record["dims"]]
        except ValueError as exc:
            raise ArtifactError(f"value %{record['id']}: {exc}") from None
        if len(dims) != len(shape) or any(
                (d is None) == (type(s) is int) or d is not None and d != s
                for d, s in zip(shape, dims)):
            raise ArtifactError(f"value %{record['id']}: dims {record['dims']!r} do not fit "
                                f"its shape {record['shape']!r}")
        shape = dims
    return Value(program, int(record["id"]), shape, _dtype(record["dtype"]), op=op,
                 index=index, name=record["name"], stop_gradient=bool(record["stop_gradient"]),
                 arg_of=arg_of)


def _at(values, position, where):
    if not isinstance(position, int) or not 0 <= position < len(values):
        raise ArtifactError(f"{where} uses value #{position!r}, which no op defines")
    return values[position]


def program_from_json(obj, array_source, op_table) -> Program:
    """Rebuild the Program described by ``obj`` (from :func:`program_to_json`), looking its
    ops up by name in ``op_table``. Raises :class:`~symgrad.errors.ArtifactError` for a
    malformed description, another format version or an op the table does not hold."""
    try:
        with gc_paused():
            return _program_from_json(obj, array_source, op_table)
    except ArtifactError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ArtifactError(f"malformed program description: {type(exc).__name__}: {exc}") \
            from None


def fetches_from_json(obj, program) -> list:
    """The Values of ``program`` (loaded from ``obj``) that ``obj`` lists as fetches."""
    values = program_values(program)
    fetches = obj.get("fetches", [])
    if not isinstance(fetches, list):
        raise ArtifactError("malformed program description: 'fetches' is not a list")
    return [_at(values, position, "fetches") for position in fetches]


def _program_from_json(obj, array_source, table):
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ArtifactError(f"not a serialized symgrad program (expected format {FORMAT!r})")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ArtifactError(f"serialized program version {version!r} is not supported by this "
                            f"symgrad (it reads versions up to {VERSION}); upgrade symgrad")
    if version < VERSION:
        raise ArtifactError(f"serialized program version {version} was written by an older "
                            f"symgrad (this one reads version {VERSION}); compile and save the "
                            f"program again")
    program = Program()
    program._anonymous_dims = {}   # number -> Symbol of the anonymous dims met (while loading)
    values: list[Value] = []
    ops: dict[int, Operation] = {}
    pending = []         # (op, record): inputs, attrs and provenance are wired in the second pass
    pending_yields = []  # (block, positions)

    def build(record, block):
        op = Operation(_lookup_opdef(table, record["op"]), [], {}, block, loc=record.get("loc"))
        op_id = record["id"]
        if op_id in ops:
            raise ArtifactError(f"op id {op_id} appears twice")
        ops[op_id] = op
        pending.append((op, record))
        return op

    stack = [(iter(obj["ops"]), program.global_block())]
    while stack:
        records, block = stack[-1]
        record = next(records, None)
        if record is None:
            stack.pop()
            continue
        op = build(record, block)
        block.ops.append(op)
        for index, result in enumerate(record["results"]):
            value = _new_value(program, result, op, index)
            values.append(value)
            op.results.append(value)
        nested = []
        for block_record in record.get("blocks", []):
            inner = Block(program, parent_op=op)
            for index, arg in enumerate(block_record["args"]):
                value = _new_value(program, arg, None, index, arg_of=inner)
                values.append(value)
                inner.args.append(value)
            pending_yields.append((inner, block_record["yields"]))
            nested.append((inner, block_record["ops"]))
        op.blocks = [b for b, _ in nested]
        stack.extend((iter(inner_ops), b) for b, inner_ops in reversed(nested))

    for record in obj.get("detached_ops", []):
        op = build(record, None)
        op.results = [_new_value(program, r, op, i) for i, r in enumerate(record["results"])]
        op.inputs = [_new_value(program, r, None, 0) for r in record["inputs"]]

    decode = _Decoder(array_source)
    for op, record in pending:
        if op.block is not None:
            op.inputs = [_at(values, v, f"op {op.name}") for v in record["inputs"]]
        op.attrs = {k: decode(v) for k, v in record["attrs"].items()}
        forward = record.get("forward_op")
        if forward is not None:
            if forward not in ops:
                raise ArtifactError(f"op {op.name}: provenance names unknown op id {forward}")
            op.forward_op = ops[forward]
        op.passes_cotangents = bool(record.get("passes_cotangents", False))
        twin = record.get("twin_of")
        if twin is not None:
            op.twin_of = tuple([None if v is None else _at(values, v, f"op {op.name}")
                                for v in twin])
    for block, positions in pending_yields:
        block.yields = [_at(values, v, "a block's yields") for v in positions]

    program._next_id = max([int(obj["next_id"])] + [v.id + 1 for v in values])
    for left, right, op_id in obj.get("dim_constraints", []):
        if op_id not in ops:
            raise ArtifactError(f"a dim constraint names unknown op id {op_id}")
        program.dim_constraints.append((Constraint(dim_from_json(left, program._anonymous_dims),
                                                   dim_from_json(right,
                                                                 program._anonymous_dims)),
                                        ops[op_id]))
    program._next_dim = max(program._anonymous_dims, default=-1) + 1
    del program._anonymous_dims
    program.inputs = [_at(values, i, "inputs") for i in obj["inputs"]]
    program.parameters = [_at(values, i, "parameters") for i in obj["parameters"]]
    for position, grad_position in obj.get("grads", []):
        _at(values, position, "grads").grad = _at(values, grad_position, "grads")
    return program
