"""Reverse-mode autodiff over the IR."""
from . import ir_backward
