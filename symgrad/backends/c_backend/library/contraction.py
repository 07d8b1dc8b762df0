"""``einsum`` in an exported library: nested loops over the letters of its explicit
subscripts (one letter per dim of each operand; the front end writes them so).

The output's letters are the outer loops, the summed letters the inner ones; each operand is
read at the sum over its axes of the axis's letter index times its stride (a letter repeated
in one operand, ``"ii->i"``, reads its diagonal; a dim of 1 under a larger letter broadcasts
with stride 0). The sum runs in the order of the loops, in the result's type (NumPy's einsum
and BLAS sum in other orders: the numbers agree to rounding). Emitted (``"ij,jk->ik"``)::

    /* %3 = einsum(%a, %b) {subscripts='ij,jk->ik'} */
    for (int64_t sg_l0 = 0; sg_l0 < (sg_s0); sg_l0++)
        for (int64_t sg_l2 = 0; sg_l2 < (4); sg_l2++) {
            double sg_acc = 0;
            for (int64_t sg_l1 = 0; sg_l1 < (3); sg_l1++)
                sg_acc += (double)a[sg_l0 * ((3)) + sg_l1 * (1)] * (double)b[...];
            v3[sg_l0 * ((4)) + sg_l2 * (1)] = sg_acc;
        }
"""
from __future__ import annotations

from ..ctype import c_type, supported
from .moves import heading, strides


def einsum_rule(gen, op) -> bool:
    result = op.results[0]
    if op.name != "einsum" or result.dtype.kind not in "iuf" or \
            not all(supported(v.dtype) for v in list(op.inputs) + [result]):
        return False
    inputs, _, output = op.attrs["subscripts"].partition("->")
    terms = inputs.split(",")
    letters = list(dict.fromkeys(output + "".join(terms)))
    number = {c: k for k, c in enumerate(letters)}
    sizes: dict = {}          # letter -> a C expression of its size (a dim that is not 1)
    for term, value in zip(terms + [output], list(op.inputs) + [result]):
        for c, dim, code in zip(term, value.dims, gen.dims.dims_of(value)):
            if dim != 1 or c not in sizes:
                sizes[c] = code

    def offset(term, value):
        within = strides(gen.dims.dims_of(value))
        parts = [f"sg_l{number[c]} * ({stride})" for c, dim, stride in
                 zip(term, value.dims, within) if not (dim == 1 and sizes[c] != "1")]
        return " + ".join(parts) or "0"
    T = c_type(result.dtype)
    summed = [c for c in letters if c not in output]
    product = " * ".join(f"({T}){gen.read(v)}[{offset(term, v)}]"
                         for term, v in zip(terms, op.inputs))
    target = gen.allocate(result)
    lines, pad = [f"    /* {heading(op)} */"], "    "
    for c in output:
        lines.append(f"{pad}for (int64_t sg_l{number[c]} = 0; sg_l{number[c]} < ({sizes[c]}); "
                     f"sg_l{number[c]}++)")
        pad += "    "
    lines.append(f"{pad}{{")
    lines.append(f"{pad}    {T} sg_acc = 0;")
    inner = pad + "    "
    for c in summed:
        lines.append(f"{inner}for (int64_t sg_l{number[c]} = 0; sg_l{number[c]} < "
                     f"({sizes[c]}); sg_l{number[c]}++)")
        inner += "    "
    lines.append(f"{inner}sg_acc += {product};")
    lines.append(f"{pad}    {target}[{offset(output, result)}] = sg_acc;")
    lines.append(f"{pad}}}")
    gen.body.append("\n".join(lines))
    return True


RULES = (einsum_rule,)
