"""The IR verifier: SSA order and scoping, program membership, region captures, and result
types against shape rules, in every block."""
from __future__ import annotations

from ..errors import VerificationError
from .graph import free_values
from .printer import explicit_count, format_op


def verify(program) -> None:
    """Check, block by block (nested blocks included), that every Value an op reads (or a
    block yields) is defined earlier in its block, as an argument of it, or before the region
    op in an enclosing block; that results belong to their op; that a region op lists every
    Value its blocks capture among its inputs; that result types equal what the op's
    shape rule infers; and that an op's ``twin_of`` names, per result, None or a Value of the
    same type defined earlier in the op's block."""
    _verify_block(program, program.global_block(), set(), "op #")


def _verify_block(program, block, visible, prefix):
    """``visible``: the Values of enclosing blocks defined before this block's op; the block's
    own definitions are added while it is checked and removed after, so they never leak out.
    Recursion is over nesting depth only."""
    defined = []
    for arg in block.args:
        if arg.program is not program or arg.arg_of is not block:
            raise VerificationError(f"{prefix}: argument %{arg.id} is not owned by its block")
        visible.add(arg)
        defined.append(arg)
    for position, op in enumerate(block.ops):
        def where():
            return f"{prefix}{position} `{format_op(op)}`"

        if op.block is not block:
            raise VerificationError(f"{where()}: the op does not name its block")
        for value in op.inputs:
            if value.program is not program:
                raise VerificationError(f"{where()}: input %{value.id} belongs to another program")
            if value not in visible:
                raise VerificationError(f"{where()}: input %{value.id} is used before it is "
                                        f"defined, or outside the region that defines it")
        for index, inner in enumerate(op.blocks):
            if inner.parent_op is not op:
                raise VerificationError(f"{where()}: block {index} does not name its op")
            _verify_block(program, inner, visible, f"{prefix}{position}.{index}.")
        if op.blocks:
            inputs = set(op.inputs)
            missing = [v for v in free_values(op.blocks) if v not in inputs]
            if missing:
                raise VerificationError(f"{where()}: its blocks read %{missing[0].id}, which "
                                        f"the op does not list among its inputs")
            if explicit_count(op) > len(op.inputs):
                raise VerificationError(f"{where()}: fewer inputs than explicit operands")
        try:
            expected = op.opdef.infer_types([(v.shape, v.dtype) for v in op.inputs], op.attrs,
                                            op.blocks)
        except Exception as exc:  # the shape rule itself rejects the op
            raise VerificationError(f"{where()}: shape rule fails: {exc}") from exc
        actual = [(v.shape, v.dtype) for v in op.results]
        if [(tuple(s), d) for s, d in expected] != actual:
            raise VerificationError(
                f"{where()}: result types {actual} differ from the shape rule's {expected}")
        if op.twin_of is not None:
            _verify_twin(op, block, visible, where)
        for index, value in enumerate(op.results):
            if value.op is not op or value.index != index or value.program is not program:
                raise VerificationError(f"{where()}: result {index} is not owned by the op")
            if value in visible:
                raise VerificationError(f"{where()}: %{value.id} is defined twice")
            visible.add(value)
            defined.append(value)
    for value in block.yields:
        if value not in visible:
            raise VerificationError(f"{prefix[:-1]}: yields %{value.id}, which the block "
                                    f"cannot see")
    if block.parent_op is not None:
        visible.difference_update(defined)


def _verify_twin(op, block, visible, where) -> None:
    """``op.twin_of``: one entry per result, each None or a Value of the result's type that
    ``block`` defines before ``op`` (in ``visible``, the Values seen so far)."""
    twin = op.twin_of
    if len(twin) != len(op.results):
        raise VerificationError(f"{where()}: twin_of has {len(twin)} entries for "
                                f"{len(op.results)} results")
    for value, result in zip(twin, op.results):
        if value is None:
            continue
        if value.block is not block or value not in visible:
            raise VerificationError(f"{where()}: twin_of names %{value.id}, which is not "
                                    f"defined earlier in the op's block")
        if value.shape != result.shape or value.dtype != result.dtype:
            raise VerificationError(f"{where()}: twin_of pairs %{result.id} ({result.type_str}) "
                                    f"with %{value.id} ({value.type_str})")
