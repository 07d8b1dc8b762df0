"""Counter-based random numbers: the ops ``random_uniform`` and ``random_normal``.

Every number is a pure function of ``(seed, stream, step, counter, element index)`` computed
with Philox-4x32-10 (Salmon et al., SC'11; the generator of cuRAND and JAX), implemented
identically three times: the NumPy helpers below (the interpreter's reference and the
generated NumPy code), and the CUDA device functions of ``codegen_templates/cuda/random.cuh``
(in the prelude of every CUDA program; each element of a kernel computes its own number). The float math after Philox uses only IEEE-754 operations
that round the same way everywhere (``+ - * /`` and ``sqrt`` in float64, with CUDA's
``__d*_rn`` intrinsics so that nvcc contracts nothing into an FMA; ``log`` and ``cos``/``sin``
are evaluated by the same short series in every backend), so the interpreter, the NumPy
backend and CUDA give bit-identical numbers.

Philox's key is the 64-bit ``seed``; its 128-bit counter is ``(block, stream, step mod 2^32,
counter mod 2^32)``:

* ``block``: the element index divided by the numbers per block (4 for 32-bit dtypes, 2 for
  float64); element ``i`` uses word ``i % 4`` (or words ``2(i % 2), 2(i % 2) + 1``);
* ``stream``: the op's number among the random ops of its program (attr ``stream``), so two
  random ops never share numbers;
* ``step``: the program's ``rng_step`` parameter (an int64 scalar, an input of every random
  op), which the program advances by one with every call (an ``assign``: program state);
  feeding it sets the step of that call;
* ``counter``: an int scalar input, 0 unless given: inside a loop body pass the iteration
  (``fori_loop``'s ``i`` or a carried counter) so that each iteration draws new numbers.

Uniform numbers take the dtype's significand width of random bits (53, 24, 11 or 8), giving
``u`` in ``[0, 1)`` exactly; then ``low + (high - low) * u`` in float64. Normal numbers come
from Box-Muller on two uniforms ``u1`` in ``(0, 1]`` and ``u2`` in ``[0, 1)`` of one block
(two 32-bit words each for float64): ``r = sqrt(-2 log u1)``, then ``r cos(2 pi u2)`` for
even elements and ``r sin(2 pi u2)`` for odd ones, then ``mean + std * z``. The float64
result is rounded to the dtype (float16 and bfloat16 through float32, as CUDA computes them).
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import dtypes
from ..errors import DTypeError, ShapeError
from ..ir.graph import walk_ops
from ..ir.program import insertion_point, program_guard
from ..ir.value import Value
from .batching import per_example
from .control_flow import in_loop_body
from .core import OPAQUE, Algebra, OpDef, bind, dtypes_shape, program_of, register
from .source import as_value, parameter

__all__: list = []

RNG_STEP = "rng_step"       # the parameter holding a program's step counter
_STREAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # program -> next stream


# --- the generator in NumPy (the generated module's helpers: self-contained functions) -----------
def _sg_philox(block, stream, step, counter, seed):
    """Philox-4x32-10 of the counters ``(block, stream, step, counter)`` (each taken mod
    2^32; ``block`` an array) under the 64-bit key ``seed``: four uint64 arrays holding the
    32-bit output words."""
    mask = np.uint64(0xFFFFFFFF)
    c0 = np.asarray(block, dtype=np.uint64) & mask
    c1 = np.full_like(c0, int(stream) & 0xFFFFFFFF)
    c2 = np.full_like(c0, int(step) & 0xFFFFFFFF)
    c3 = np.full_like(c0, int(counter) & 0xFFFFFFFF)
    k0, k1 = int(seed) & 0xFFFFFFFF, (int(seed) >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0 = c0 * np.uint64(0xD2511F53)
        p1 = c2 * np.uint64(0xCD9E8D57)
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & mask,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & mask)
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1, c2, c3


def _sg_log(x):
    """Natural log of float64 ``x`` in ``(0, 1]``: ``x = m 2^e`` with ``m`` in
    ``[sqrt(1/2), sqrt(2))``, ``log m = 2 atanh(s)``, ``s = (m - 1) / (m + 1)``, summed to
    ``s^21`` by Horner's rule (identical in every backend)."""
    m, e = np.frexp(x)
    low = m < 0.7071067811865476
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    p = np.full_like(z, 2.0 / 21.0)
    for k in range(9, -1, -1):
        p = p * z + 2.0 / (2 * k + 1)
    return e * 0.6931471805599453 + s * p


def _sg_cos_sin_2pi(u):
    """``(cos(2 pi u), sin(2 pi u))`` of float64 ``u`` in ``[0, 1)``: the quadrant from
    ``4u``, then series of ``cos`` and ``sin`` on ``[0, pi/2)`` in nested form (identical in
    every backend)."""
    t = u * 4.0
    q = np.floor(t)
    theta = (t - q) * 1.5707963267948966
    z = theta * theta
    s = np.ones_like(z)
    c = np.ones_like(z)
    for k in range(12, 0, -1):
        s = 1.0 - z * s / ((2 * k) * (2 * k + 1))
        c = 1.0 - z * c / ((2 * k - 1) * (2 * k))
    s = theta * s
    cos = np.where(q == 0, c, np.where(q == 1, -s, np.where(q == 2, -c, s)))
    sin = np.where(q == 0, s, np.where(q == 1, c, np.where(q == 2, -s, -c)))
    return cos, sin


def _sg_random_numbers(step, counter, like, shape, dtype, seed, stream, wide, numbers):
    """The random numbers of a result of ``shape`` (``like``'s when given) as ``dtype``:
    ``numbers(words)`` turns the Philox words of some blocks (an array of shape (blocks, 4))
    into the float64 numbers of their elements (blocks, per block). Blocks go in chunks, so
    the temporaries stay small; 16-bit dtypes are rounded through float32, as the CUDA
    kernels compute them."""
    if like:
        shape = like[0].shape
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.int64))
    per_block = 2 if wide else 4
    count = -(-size // per_block)
    values = np.empty(count * per_block)
    for start in range(0, count, 16384):
        blocks = np.arange(start, min(start + 16384, count), dtype=np.uint64)
        words = np.stack(_sg_philox(blocks, stream, step, counter, seed), axis=-1)
        values[start * per_block:(start + len(blocks)) * per_block] = numbers(words).reshape(-1)
    values = values[:size]
    dtype = np.dtype(dtype)
    if dtype.itemsize < 4:
        values = values.astype(np.float32)
    return values.astype(dtype).reshape(shape)


def _sg_random_uniform(step, counter, *like, shape, dtype, seed, stream, bits, low, high):
    """Uniform numbers in ``[low, high)`` (see :mod:`symgrad.ops.random`)."""
    def numbers(words):
        if bits > 32:
            pairs = words.reshape(-1, 2)
            drawn = ((pairs[:, 1] << np.uint64(32)) | pairs[:, 0]) >> np.uint64(64 - bits)
        else:
            drawn = words >> np.uint64(32 - bits)
        return low + (high - low) * (drawn.astype(np.float64) * 2.0 ** -bits)
    return _sg_random_numbers(step, counter, like, shape, dtype, seed, stream, bits > 32,
                              numbers)


def _sg_random_normal(step, counter, *like, shape, dtype, seed, stream, bits, mean, std):
    """Normal numbers of ``mean`` and ``std`` (see :mod:`symgrad.ops.random`)."""
    def numbers(words):
        if bits > 32:
            first = ((words[:, 1:2] << np.uint64(32)) | words[:, 0:1]) >> np.uint64(11)
            second = ((words[:, 3:4] << np.uint64(32)) | words[:, 2:3]) >> np.uint64(11)
            u1 = (first + np.uint64(1)).astype(np.float64) * 2.0 ** -53
            u2 = second.astype(np.float64) * 2.0 ** -53
        else:
            u1 = (words[:, 0::2] + np.uint64(1)).astype(np.float64) * 2.0 ** -32
            u2 = words[:, 1::2].astype(np.float64) * 2.0 ** -32
        radius = np.sqrt(-2.0 * _sg_log(u1))
        cos, sin = _sg_cos_sin_2pi(u2)
        return mean + std * np.stack([radius * cos, radius * sin], axis=-1)
    return _sg_random_numbers(step, counter, like, shape, dtype, seed, stream, bits > 32,
                              numbers)


# every function the references below call: what a generated module that draws numbers holds
NUMPY_HELPERS = (_sg_philox, _sg_log, _sg_cos_sin_2pi, _sg_random_numbers)

# --- the ops --------------------------------------------------------------------------------------
def _random_rule(types, attrs):
    (step_shape, step_dtype), (counter_shape, counter_dtype) = types[:2]
    if tuple(step_shape) != () or np.dtype(step_dtype) != np.int64:
        raise DTypeError(f"the step must be an int64 scalar, got {dtypes_shape(types[0])}")
    if tuple(counter_shape) != () or np.dtype(counter_dtype).kind not in "iu":
        raise DTypeError(f"the counter must be an int scalar, got {dtypes_shape(types[1])}")
    shape = tuple(types[2][0]) if len(types) > 2 else tuple(attrs["shape"])
    return shape, dtypes.as_dtype(attrs["dtype"])


def _random_dims(input_dims, attrs, shapes):
    """The numbers take the dims of the optional third input (the run-time shape)."""
    return [input_dims[2] if len(input_dims) > 2 else None]


@per_example
def _random_batch(op, inputs, axes, size):
    """Each example draws its own numbers: one draw with the batch in front of the
    per-example shape, the run-time shape of a batched Value giving it, or a static batch
    size. The step and counter must be shared."""
    if any(axis is not None for axis in axes[:2]):
        return NotImplemented
    if len(inputs) > 2 and axes[2] is not None:      # the shape of a batched Value
        return [bind(op.opdef, inputs, op.attrs)], [0]
    shape = tuple(op.results[0].shape)
    if size is None or None in shape:
        return NotImplemented
    return [bind(op.opdef, inputs[:2], {**op.attrs, "shape": (size,) + shape})], [0]


def _random_op(name, helper, params, what):
    """Register the random op ``name`` with the NumPy ``helper`` as its reference; ``params``
    are its distribution's two attrs (after :data:`ATTRS`)."""
    PARAMS[name] = params
    return register(OpDef(
        name, OPAQUE, _random_rule, impl=helper, dims=_random_dims, batch=_random_batch,
        algebra=Algebra(shape_only=(2,)),
        doc=f"{what} from Philox-4x32-10 (inputs: step, counter and an optional Value giving "
            f"the run-time shape); no gradient."))


ATTRS = ("shape", "dtype", "seed", "stream", "bits")   # every random op's, then its PARAMS
PARAMS: dict = {}   # op name -> its distribution's two attrs

random_uniform_p = _random_op("random_uniform", _sg_random_uniform, ("low", "high"),
                              "Uniform numbers in [low, high)")
random_normal_p = _random_op("random_normal", _sg_random_normal, ("mean", "std"),
                             "Normal numbers (Box-Muller)")
RANDOM_OPS = (random_uniform_p, random_normal_p)


# --- building random ops --------------------------------------------------------------------------
def rng_step(program):
    """The program's step counter: the int64 scalar parameter ``rng_step`` (initially 0),
    made in the global block on first use, with the ``assign`` that advances it by one
    with every call (program state, see :mod:`symgrad.ops.state`)."""
    for value in program.parameters:
        if value.name == RNG_STEP:
            return value
    from .state import assign

    with program_guard(program), insertion_point(program.global_block()):
        step = parameter(RNG_STEP, [], "int64", init=0, stop_gradient=True)
        assign(step + 1, step)
    return step


def _next_stream(program) -> int:
    """A stream number no random op of ``program`` has (the count of random ops built so far,
    found by a walk when the program was made elsewhere: a clone, a loaded artifact)."""
    stream = _STREAMS.get(program)
    if stream is None:
        taken = [op.attrs["stream"] for op in walk_ops(program.ops)
                 if op.opdef in RANDOM_OPS]
        stream = max(taken, default=-1) + 1
    _STREAMS[program] = stream + 1
    return stream


def _check_scalar(name, value, what):
    if isinstance(value, Value) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or isinstance(value, bool):
        raise TypeError(f"{name}: {what} must be a Python number, got {value!r}")
    return float(value)


def _resolve_shape(name, shape):
    """``(static shape attr, extra inputs)``: a sequence of ints, or a Value whose run-time
    shape the result takes (an input read for its shape only)."""
    if isinstance(shape, Value):
        return shape.shape, ([shape] if None in shape.shape else [])
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or any(
            isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ShapeError(f"{name}: shape must be a sequence of non-negative ints or a Value "
                         f"(whose run-time shape the result takes), got {shape!r}")
    return tuple(int(d) for d in shape), []


def draw(opdef, shape, dtype, seed, counter, params):
    """Build one random op (the front end of :mod:`symgrad.random`): ``params`` are its
    distribution's attrs; inside a loop body a ``counter`` is required."""
    name = f"random.{opdef.name.partition('_')[2]}"
    dtype = dtypes.as_dtype(dtype)
    if not dtypes.is_float(dtype):
        raise DTypeError(f"{name}: dtype must be a floating dtype, got {dtype}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= int(seed) < 2 ** 64:
        raise ValueError(f"{name}: seed must be an int in [0, 2**64), got {seed!r}")
    values = [v for v in (shape, counter) if isinstance(v, Value)]
    program = program_of(values, name)
    if counter is None:
        if in_loop_body():
            raise ValueError(f"{name}: inside a loop body, pass counter= (the iteration: "
                             f"fori_loop's i, or an int carried by the loop) so that each "
                             f"iteration draws new numbers")
        counter = 0
    if not isinstance(counter, Value):
        number = np.int64(counter)
        counter = program.cached_scalar_constant(
            (number.dtype, int, int(number)), lambda: as_value(number, program=program))
    static, like = _resolve_shape(name, shape)
    attrs = {"shape": static, "dtype": dtype.name, "seed": int(seed),
             "stream": _next_stream(program), "bits": dtypes.significand_bits(dtype),
             **{k: _check_scalar(name, v, k) for k, v in params.items()}}
    return bind(opdef, [rng_step(program), counter] + like, attrs, program=program)
