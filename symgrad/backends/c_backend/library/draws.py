"""Random numbers in an exported library: ``random_uniform`` and ``random_normal``.

Each element is a pure function of the seed, the op's stream, the program's step (the
``rng_step`` parameter, which the program's ``assign`` advances with every call, committed
with the rest of the state), the op's counter and the element's index
(:mod:`symgrad.ops.random`). The library computes it with the CUDA backend's device
functions compiled as C (``c/library/random.c.j2``), so its numbers are the interpreter's
bits. Emitted::

    /* %5 = random_normal(%rng_step, %4) {shape=(3, 4), dtype='float32', ...} */
    for (int64_t sg_o = 0; sg_o < (int64_t)(12); sg_o++)
        v5[sg_o] = (float)sg_random_normal((unsigned long long)sg_o, (long long)rng[0],
                                           (long long)v4[0], 7ull, 0LL, 24LL, 0.0, 1.0);
"""
from __future__ import annotations

from ....ops.random import PARAMS, RANDOM_OPS
from ..ctype import c_type, supported
from .moves import heading


def _double(value) -> str:
    return repr(float(value)) if abs(float(value)) != float("inf") else \
        ("HUGE_VAL" if value > 0 else "-HUGE_VAL")


def random_rule(gen, op) -> bool:
    if op.opdef not in RANDOM_OPS or not supported(op.results[0].dtype):
        return False
    step, counter = op.inputs[:2]
    result = op.results[0]
    attrs = op.attrs
    first, second = (_double(attrs[name]) for name in PARAMS[op.name])
    function = "sg_random_uniform" if op.name == "random_uniform" else "sg_random_normal"
    gen.helper("c/library/random.c.j2")
    target = gen.allocate(result)
    gen.body.append(
        f"    /* {heading(op)} */\n"
        f"    for (int64_t sg_o = 0; sg_o < (int64_t)({gen.count(result)}); sg_o++)\n"
        f"        {target}[sg_o] = ({c_type(result.dtype)}){function}((unsigned long long)sg_o, "
        f"(long long){gen.read(step)}[0], (long long){gen.read(counter)}[0], "
        f"{int(attrs['seed'])}ull, {int(attrs['stream'])}LL, {int(attrs['bits'])}LL, "
        f"{first}, {second});")
    return True


RULES = (random_rule,)
