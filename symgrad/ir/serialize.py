"""Program <-> JSON, without pickle.

``program_to_json(program, array_sink, fetches=())`` returns a JSON-able dict;
``program_from_json(obj, array_source)`` rebuilds an equivalent :class:`Program` (same value ids,
names, types, stop_gradient flags, ``.grad`` links, backward provenance and nested blocks) that
can be printed, verified, compiled and differentiated again; ``fetches_from_json(obj,
program)`` gives back the fetched Values of the loaded program.

Values are referenced by their *position* in :func:`program_values` order (every result of
every op, nested blocks in preorder), not by ``Value.id``: ids are only unique per block (a
fusion op's results reuse the ids of the inner Values they export).

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
    Value, nested Block of the op          {"$value": position}, {"$block": index in op.blocks}
    registered attr class                  {"$object": class name, "fields": {slot: value}}

Attr classes (plain slot records such as the fusion pass's body description) are allowed with
:func:`register_attr_class`; ops kept out of the public registry (the fusion op) are found
through :func:`register_internal_op`. Nothing else is ever imported or instantiated on load.

Layout: ``{"format", "version", "next_id", "inputs", "parameters", "grads", "fetches", "ops",
"detached_ops"}``; each op is ``{"id", "op", "inputs", "attrs", "results", "forward_op", "loc",
"blocks"}`` where ``forward_op`` is the ``id`` of the op it is the backward of and ``blocks`` a
list of nested op lists. ``detached_ops`` keeps forward ops that passes removed from the program
but that backward ops still name as their provenance. Walks are iterative (programs reach
100,000 ops).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArtifactError
from ..gc_pause import gc_paused
from .operation import Operation
from .program import Block, Program
from .value import Value

FORMAT = "symgrad-program"
VERSION = 1

INTERNAL_OPS: dict = {}      # name -> OpDef of library ops kept out of the public registry
ATTR_CLASSES: dict = {}      # name -> class allowed as an attr value (slot records)


def register_internal_op(opdef):
    """Let programs containing ``opdef`` (not in the public registry) be loaded."""
    INTERNAL_OPS[opdef.name] = opdef
    return opdef


def register_attr_class(cls):
    """Allow instances of ``cls`` (a record with ``__slots__``) as attr values; usable as a
    class decorator. Its slots are stored as attrs; loading fills a fresh instance."""
    if not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} must declare __slots__ to be stored as an attr")
    ATTR_CLASSES[cls.__name__] = cls
    return cls


# --- attrs ----------------------------------------------------------------------------------
class _Encoder:
    def __init__(self, array_sink, positions=None, op=None):
        self.array_sink = array_sink
        self.positions = positions or {}
        self.op = op

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
        if isinstance(value, Value) and value in self.positions:
            return {"$value": self.positions[value]}
        if isinstance(value, Block) and self.op is not None and value in self.op.blocks:
            return {"$block": self.op.blocks.index(value)}
        cls = type(value)
        if ATTR_CLASSES.get(cls.__name__) is cls:
            return {"$object": cls.__name__,
                    "fields": {slot: self(getattr(value, slot)) for slot in cls.__slots__}}
        raise TypeError(f"cannot serialize a {cls.__name__} attr without pickle")


class _Decoder:
    def __init__(self, array_source, values=(), op=None):
        self.array_source = array_source
        self.values = values
        self.op = op

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
        if tag == "$value":
            return _at(self.values, payload, "an attr")
        if tag == "$block":
            return self.op.blocks[payload]
        if tag == "$object":
            cls = ATTR_CLASSES.get(payload)
            if cls is None:
                raise ArtifactError(f"attr class {payload!r} is not registered for loading")
            instance = cls.__new__(cls)
            for slot in cls.__slots__:
                setattr(instance, slot, self(obj["fields"][slot]))
            return instance
        raise ArtifactError(f"unknown attr tag {tag!r}")


def encode_attr(value, array_sink):
    """The JSON form of one attr value without Value/Block references (see the module
    docstring); ``TypeError`` for a type that cannot be stored without pickle."""
    return _Encoder(array_sink)(value)


def decode_attr(obj, array_source):
    """Inverse of :func:`encode_attr`."""
    return _Decoder(array_source)(obj)


# --- program -> JSON ------------------------------------------------------------------------
def _walk_ops(block):
    """Every op of ``block`` and of its nested blocks, each op before its inner ops."""
    stack = [iter(block.ops)]
    while stack:
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        yield op
        stack.extend(iter(inner.ops) for inner in reversed(op.blocks))


def program_values(program) -> list:
    """Every Value the program defines, nested blocks included, in serialization order."""
    return [v for op in _walk_ops(program.global_block()) for v in op.results]


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
    return {"id": value.id, "shape": list(value.shape), "dtype": _dtype_name(value.dtype),
            "name": value.name, "stop_gradient": bool(value.stop_gradient)}


def program_to_json(program: Program, array_sink, fetches=()) -> dict:
    """A JSON-able dict describing ``program`` (and which Values are ``fetches``); ndarray
    attrs go through ``array_sink``."""
    with gc_paused():
        return _program_to_json(program, array_sink, fetches)


def _program_to_json(program, array_sink, fetches):
    positions = {v: i for i, v in enumerate(program_values(program))}
    op_ids: dict[Operation, int] = {}
    for op in _walk_ops(program.global_block()):
        op_ids[op] = len(op_ids)
    detached: list[Operation] = []
    for op in list(op_ids):
        forward = op.forward_op
        while forward is not None and forward not in op_ids:
            op_ids[forward] = len(op_ids)
            detached.append(forward)
            forward = forward.forward_op

    def op_record(op, inputs):
        encode = _Encoder(array_sink, positions, op)
        try:
            attrs = {k: encode(v) for k, v in op.attrs.items()}
        except TypeError as exc:
            raise TypeError(f"op {op.name} (%{op.results[0].id if op.results else '?'}): "
                            f"{exc}") from None
        return {"id": op_ids[op], "op": op.name, "inputs": inputs, "attrs": attrs,
                "results": [_value_record(v) for v in op.results],
                "forward_op": None if op.forward_op is None else op_ids[op.forward_op],
                "loc": op.loc}

    top: list = []
    stack = [(iter(program.ops), top)]
    while stack:
        ops, out = stack[-1]
        op = next(ops, None)
        if op is None:
            stack.pop()
            continue
        record = op_record(op, [_position(positions, v, op) for v in op.inputs])
        out.append(record)
        record["blocks"] = [[] for _ in op.blocks]
        stack.extend((iter(block.ops), inner)
                     for block, inner in reversed(list(zip(op.blocks, record["blocks"]))))

    # a detached op's inputs may be gone from the program too: keep their types
    detached_records = [op_record(op, [_value_record(v) for v in op.inputs]) for op in detached]
    grads = [[i, positions[v.grad]] for v, i in positions.items()
             if v.grad is not None and v.grad in positions]
    return {"format": FORMAT, "version": VERSION, "next_id": program._next_id,
            "inputs": [_position(positions, v, "inputs") for v in program.inputs],
            "parameters": [_position(positions, v, "parameters") for v in program.parameters],
            "grads": grads,
            "fetches": [_position(positions, v, "fetches") for v in fetches],
            "ops": top, "detached_ops": detached_records}


def _position(positions, value, where):
    try:
        return positions[value]
    except KeyError:
        label = where if isinstance(where, str) else f"op {where.name}"
        raise ValueError(f"{label} uses {value!r}, which the program does not define") from None


# --- JSON -> program ------------------------------------------------------------------------
def _op_table():
    """Every op a program may name: the public registry plus the library's internal ops."""
    from ..ops.core import REGISTRY  # late imports: the IR layer does not import ops at load
    from .. import passes  # noqa: F401  (registers the library's internal ops)

    return {**INTERNAL_OPS, **REGISTRY}


def _lookup_opdef(table, name):
    opdef = table.get(name)
    if opdef is None:
        raise ArtifactError(
            f"program uses op {name!r}, which is not registered in this process; import the "
            f"module that defines it (custom ops must be registered before loading)")
    return opdef


def _new_value(program, record, op, index):
    shape = [None if d is None else int(d) for d in record["shape"]]
    return Value(program, int(record["id"]), shape, _dtype(record["dtype"]), op=op,
                 index=index, name=record["name"], stop_gradient=bool(record["stop_gradient"]))


def _at(values, position, where):
    if not isinstance(position, int) or not 0 <= position < len(values):
        raise ArtifactError(f"{where} uses value #{position!r}, which no op defines")
    return values[position]


def program_from_json(obj, array_source) -> Program:
    """Rebuild the Program described by ``obj`` (from :func:`program_to_json`). Raises
    :class:`~symgrad.errors.ArtifactError` for a malformed description, a newer format or an
    op that is not registered."""
    try:
        with gc_paused():
            return _program_from_json(obj, array_source)
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


def _program_from_json(obj, array_source):
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ArtifactError(f"not a serialized symgrad program (expected format {FORMAT!r})")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ArtifactError(f"serialized program version {version!r} is not supported by this "
                            f"symgrad (it reads versions up to {VERSION}); upgrade symgrad")
    program = Program()
    values: list[Value] = []
    ops: dict[int, Operation] = {}
    pending = []  # (op, record): inputs, attrs and provenance are wired in the second pass
    table = _op_table()

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
        nested = [(Block(program, parent_op=op), inner) for inner in record.get("blocks", [])]
        op.blocks = [b for b, _ in nested]
        stack.extend((iter(inner), b) for b, inner in reversed(nested))

    for record in obj.get("detached_ops", []):
        op = build(record, None)
        op.results = [_new_value(program, r, op, i) for i, r in enumerate(record["results"])]
        op.inputs = [_new_value(program, r, None, 0) for r in record["inputs"]]

    for op, record in pending:
        if op.block is not None:
            op.inputs = [_at(values, v, f"op {op.name}") for v in record["inputs"]]
        decode = _Decoder(array_source, values, op)
        op.attrs = {k: decode(v) for k, v in record["attrs"].items()}
        forward = record.get("forward_op")
        if forward is not None:
            if forward not in ops:
                raise ArtifactError(f"op {op.name}: provenance names unknown op id {forward}")
            op.forward_op = ops[forward]

    program._next_id = max([int(obj["next_id"])] + [v.id + 1 for v in values])
    program.inputs = [_at(values, i, "inputs") for i in obj["inputs"]]
    program.parameters = [_at(values, i, "parameters") for i in obj["parameters"]]
    for position, grad_position in obj.get("grads", []):
        _at(values, position, "grads").grad = _at(values, grad_position, "grads")
    return program
