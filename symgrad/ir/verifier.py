"""The IR verifier: SSA order, program membership, and result types against shape rules."""
from __future__ import annotations

from ..errors import VerificationError
from .printer import format_op


def verify(program) -> None:
    """Check that every op's inputs are defined earlier in the same program, that results
    belong to their op, and that result types equal what the op's shape rule infers."""
    defined: set[int] = set()
    for position, op in enumerate(program.ops):
        def where():
            return f"op #{position} `{format_op(op)}`"

        for value in op.inputs:
            if value.program is not program:
                raise VerificationError(f"{where()}: input %{value.id} belongs to another program")
            if id(value) not in defined:
                raise VerificationError(f"{where()}: input %{value.id} is used before it is defined")
        try:
            expected = op.opdef.infer_types([(v.shape, v.dtype) for v in op.inputs], op.attrs)
        except Exception as exc:  # the shape rule itself rejects the op
            raise VerificationError(f"{where()}: shape rule fails: {exc}") from exc
        actual = [(v.shape, v.dtype) for v in op.results]
        if [(tuple(s), d) for s, d in expected] != actual:
            raise VerificationError(
                f"{where()}: result types {actual} differ from the shape rule's {expected}")
        for index, value in enumerate(op.results):
            if value.op is not op or value.index != index or value.program is not program:
                raise VerificationError(f"{where()}: result {index} is not owned by the op")
            if id(value) in defined:
                raise VerificationError(f"{where()}: %{value.id} is defined twice")
            defined.add(id(value))
