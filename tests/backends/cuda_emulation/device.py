"""A CPU device standing in for CuPy, so the generated host module drives the emulated kernels.

``EmulatedDevice(library, schedule, sms)`` builds a module named ``cupy`` out of NumPy:
``RawModule(code=...)`` takes its kernels from ``library`` (the ``.cu`` text is looked up by
hash, so the text the backend hands to CuPy is the text that runs); ``empty``/``empty_like``
return arrays filled with 0xFF bytes (NaN floats, -1 integers), so an output element no kernel
writes shows; the device has ``sms`` multiprocessors (the host module sizes grids from them).
Each kernel launch checks its arguments against the kernel's parameters (count, integer
types, element types) as a mismatch would silently corrupt a real launch, and runs under the
device's schedule; a kernel fault raises :class:`KernelFault`.

``device.run(compiled, feeds)`` runs a :class:`~symgrad.runtime.CompiledProgram` of the CUDA
backend on the device (its host module loaded afresh, so schedules and SM counts apply).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import sys
import types

import numpy as np

from symgrad.errors import SymgradError

SCHEDULES = {
    "forward": 0,
    "reversed": 1 | 2,           # threads, warps and blocks in reverse order
    "greedy-warps": 4,           # each warp runs until all its lanes wait
    "greedy-warps-reversed": 4 | 1 | 2,
    "shuffled": 8,               # a pseudo-random thread order at every pass
}
_INT_TYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
              "uint64": ctypes.c_uint64, "int16": ctypes.c_int16, "uint16": ctypes.c_uint16,
              "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "bool": ctypes.c_bool,
              "float32": ctypes.c_float, "float64": ctypes.c_double}


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: entry point, grid, block and the values of its scalar arguments."""

    entry: str
    grid: tuple
    block: tuple
    scalars: dict


class KernelFault(SymgradError, AssertionError):
    """An emulated kernel deadlocked, diverged at a barrier, shuffled with a bad mask, ran too
    long, faulted, or was launched with arguments that do not match its parameters."""


def _poisoned(array):
    """``array`` (new, so contiguous in C or Fortran order) filled with 0xFF bytes."""
    ctypes.memset(array.ctypes.data, 0xFF, array.nbytes)
    return array


def poisoned_empty(shape, dtype=float, order="C"):
    return _poisoned(np.empty(shape, dtype, order))


def poisoned_empty_like(prototype, dtype=None, order="K", subok=True, shape=None):
    return _poisoned(np.empty_like(prototype, dtype, order, subok, shape))


def _device_only(function):
    """``function`` refusing host scalars as CuPy's does (``cupy.ascontiguousarray`` of a NumPy
    or Python scalar is a TypeError there): NumPy would quietly take them here, and a host
    module that hands them over would pass on this device and fail on a real one."""
    def device_function(a, *args, **kwargs):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"Argument 'a' has incorrect type (expected a device array, got "
                            f"{type(a).__module__}.{type(a).__name__})")
        return function(a, *args, **kwargs)
    return device_function


class EmulatedKernel:
    """A kernel called as CuPy's are: ``kernel(grid, block, args)``."""

    def __init__(self, device, name, launcher, parameters):
        self.device, self.name = device, name
        self.launcher, self.parameters = launcher, parameters

    def _holder(self, arg, parameter):
        if parameter.pointer:
            if isinstance(arg, np.uint64) and int(arg) == 0:    # a null pointer
                return ctypes.c_void_p(0)
            if not isinstance(arg, np.ndarray) or arg.dtype.name != parameter.dtype:
                raise KernelFault(f"{self.name}: argument {parameter.name} wants a "
                                  f"{parameter.dtype} array, got {type(arg).__name__} "
                                  f"{getattr(arg, 'dtype', '')}")
            return ctypes.c_void_p(arg.ctypes.data)
        if type(arg) is not np.dtype(parameter.dtype).type:
            raise KernelFault(f"{self.name}: argument {parameter.name} ({parameter.ctype}) "
                              f"must be numpy.{parameter.dtype}, got {type(arg).__name__}")
        return _INT_TYPES[parameter.dtype](arg.item())

    def __call__(self, grid, block, args, **_):
        if len(args) != len(self.parameters):
            raise KernelFault(f"{self.name}: {len(args)} arguments for "
                              f"{len(self.parameters)} parameters")
        holders = [self._holder(a, p) for a, p in zip(args, self.parameters)]
        pointers = (ctypes.c_void_p * max(1, len(holders)))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        grid = (tuple(int(g) for g in grid) + (1, 1))[:3]
        block = (tuple(int(b) for b in block) + (1, 1))[:3]
        self.device.launches.append(Launch(self.name, grid, block, {
            p.name: a.item() for a, p in zip(args, self.parameters) if not p.pointer}))
        error = ctypes.c_char_p()
        if self.launcher(*grid, *block, self.device.schedule_bits, pointers,
                         ctypes.byref(error)):
            raise KernelFault(f"kernel {self.name} (grid {grid}, block {block}, schedule "
                              f"{self.device.schedule}): {error.value.decode()}")


class EmulatedDevice:
    """NumPy standing in for CuPy over the kernels of ``library`` (see the module docstring)."""

    def __init__(self, library, schedule="forward", sms=1):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; one of {sorted(SCHEDULES)}")
        self.library, self.schedule, self.sms = library, schedule, sms
        self.schedule_bits = SCHEDULES[schedule]
        self.launches: list[Launch] = []      # every launch, in order
        self.module = self._make_module()

    def _make_module(self):
        device = self
        fake = types.ModuleType("cupy")
        fake.__dict__.update({k: v for k, v in np.__dict__.items() if not k.startswith("__")})
        fake.empty, fake.empty_like = poisoned_empty, poisoned_empty_like
        fake.asnumpy = np.asarray
        fake.ascontiguousarray = _device_only(np.ascontiguousarray)

        class RawModule:
            def __init__(self, code=None, options=(), path=None, **_):
                if code is None:
                    raise KernelFault("the emulated device compiles .cu text only (no cubins)")
                self.code = code

            def get_function(self, name):
                launcher, parameters = device.library.kernel(self.code, name)
                return EmulatedKernel(device, name, launcher, parameters)

        class Device:
            attributes = {"MultiProcessorCount": device.sms}
            compute_capability = "80"

        fake.RawModule = RawModule
        fake.ndarray = np.ndarray
        fake.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDeviceCount=lambda: 1), Device=Device)
        return fake

    @contextlib.contextmanager
    def installed(self):
        """``import cupy`` gives this device's module inside the block."""
        saved = sys.modules.get("cupy")
        sys.modules["cupy"] = self.module
        try:
            yield self.module
        finally:
            if saved is None:
                sys.modules.pop("cupy", None)
            else:
                sys.modules["cupy"] = saved

    def run(self, compiled, feeds):
        """The outputs of CUDA-backend program ``compiled`` on ``feeds``, computed here."""
        executable = getattr(compiled, "_executable", compiled)
        with self.installed():
            executable.module = None
            executable.load()
            try:
                return compiled(**feeds) if executable is not compiled else executable.run(feeds)
            finally:
                executable.module = None
