"""The IR layer: Values, Operations, Blocks, Programs, the printer, verifier and graph views."""
from .operation import Operation
from .printer import format_op, format_program, value_label
from .program import Block, Program, default_main_program, program_guard
from .value import Value, format_shape

__all__ = ["Block", "Operation", "Program", "Value", "default_main_program", "format_op",
           "format_program", "format_shape", "program_guard", "value_label"]
