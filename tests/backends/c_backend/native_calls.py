"""Counting the native ops a C program's segments compute, from its source."""
import re


def _calls(compiled) -> list:
    """Per call of a native function by a segment's step: True for a pair's (two matmuls side
    by side, whose function writes ``sg_y0`` and ``sg_y1``: ``c/matmul_pair.c.j2``)."""
    source = compiled._executable.source
    pairs = set(re.findall(r"SG_LINK int (sg_n_\w+)\([^)]*sg_y1\)", source))
    return [name in pairs for name in re.findall(r"= -(sg_n_\w+)\(", source)]


def native_products(compiled) -> int:
    """How many native ops the segments compute: one per call, two per pair's."""
    return sum(2 if pair else 1 for pair in _calls(compiled))


def native_pairs(compiled) -> int:
    """How many calls compute two matmuls side by side."""
    return sum(_calls(compiled))
