"""Calling an exported library from Python with ctypes (the tests' way to compare it with
the same program run by symgrad): :class:`Library`, and :func:`exported`."""
from __future__ import annotations

import ctypes
import json
import os

import numpy as np

import symgrad as sg


def exported(program, parent, name):
    """``(fn, oracle, folder, library)``: ``program`` compiled on backend c and exported into
    ``parent/name`` (with NumPy's OpenBLAS and this CPU's flags, as the C backend builds: the
    same code, so the same numbers), compiled on the interpreter, and the library loaded with
    its parameters."""
    fn = sg.compile(*program, backend="c")
    folder = fn.export_c(os.path.join(str(parent), name), name=name, blas="numpy", native=True)
    with open(os.path.join(folder, "manifest.json")) as handle:
        library = Library(folder, json.load(handle))
    assert library.load(os.path.join(folder, f"{name}.params")) == 0, library.error()
    return fn, sg.compile(*program, backend="interpreter"), folder, library


class Library:
    """The library ``lib<name>.so`` of an export folder, with its entry's types from the
    export's ``manifest.json`` (``library`` entry)."""

    def __init__(self, folder, manifest):
        entry = manifest["library"]
        self.name = name = manifest["name"]
        self.lib = ctypes.CDLL(os.path.join(folder, f"lib{name}.so"))
        self.entry = entry
        getattr(self.lib, f"{name}_state_new").restype = ctypes.c_void_p
        getattr(self.lib, f"{name}_state_free").argtypes = [ctypes.c_void_p]
        getattr(self.lib, f"{name}_state_load").argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        getattr(self.lib, f"{name}_state_data").argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.POINTER(ctypes.c_int64)]
        getattr(self.lib, f"{name}_state_data").restype = ctypes.c_void_p
        getattr(self.lib, f"{name}_last_error").restype = ctypes.c_char_p
        self.state = getattr(self.lib, f"{name}_state_new")()
        self.outputs = manifest["outputs"]

    def load(self, path) -> int:
        load = getattr(self.lib, f"{self.name}_state_load")
        return load(ctypes.c_void_p(self.state), path.encode())

    def error(self) -> str:
        return getattr(self.lib, f"{self.name}_last_error")().decode()

    def parameter(self, name, dtype, shape):
        count = ctypes.c_int64()
        address = getattr(self.lib, f"{self.name}_state_data")(ctypes.c_void_p(self.state),
                                                      name.encode(), ctypes.byref(count))
        assert address, name
        buffer = (ctypes.c_char * (count.value * np.dtype(dtype).itemsize)).from_address(address)
        return np.frombuffer(buffer, dtype).reshape(shape).copy()

    def run(self, feeds, output_shapes, dims=None):
        """``(code, outputs)``: run on ``feeds`` (by input name) into new outputs of
        ``output_shapes``; ``dims`` overrides the dims passed ({parameter: size})."""
        arguments = [ctypes.c_void_p(self.state)]
        keep = []
        for item in self.entry["inputs"]:
            array = np.ascontiguousarray(feeds[item["name"]])
            keep.append(array)
            arguments.append(array.ctypes.data_as(ctypes.c_void_p))
            for param in item["dims"]:
                axis = int(param.rsplit("_dim", 1)[1])
                size = (dims or {}).get(param, array.shape[axis])
                arguments.append(ctypes.c_int64(size))
        outputs = []
        for spec, shape in zip(self.outputs, output_shapes):
            array = np.zeros(shape, spec["dtype"])
            outputs.append(array)
            arguments.append(array.ctypes.data_as(ctypes.c_void_p))
        code = getattr(self.lib, f"{self.name}_run")(*arguments)
        return code, outputs

    def close(self):
        getattr(self.lib, f"{self.name}_state_free")(ctypes.c_void_p(self.state))
