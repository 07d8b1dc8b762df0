"""NVRTC, the compiler CuPy's ``RawModule`` uses at run time, without CuPy or a GPU.

The library comes from the ``nvidia-cuda-nvrtc`` wheel (the ``nvrtc`` extra, which the
``test`` extra includes) and is called through ctypes. :func:`compile_like_cupy` passes what
``RawModule(code=..., options=NVRTC_OPTIONS)`` passes: the backend's options, then CuPy's own
``-ftz=true`` and the virtual architecture. NVRTC rejects some code that nvcc accepts (host
standard-library calls such as ``std::tanh`` in device code), which is why both are checked.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
from pathlib import Path

from symgrad.backends.cuda_backend import NVRTC_OPTIONS

CUPY_OPTIONS = ("-ftz=true",)      # what CuPy's compiler adds to every RawModule's options
ARCH = "compute_80"


@functools.lru_cache(maxsize=None)
def library_path() -> Path | None:
    """``libnvrtc.so.*`` of the installed ``nvidia-cuda-nvrtc`` wheel, or None."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        found = sorted(Path(root).glob("*/lib/libnvrtc.so*"))
        found = [p for p in found if "builtins" not in p.name]
        if found:
            return found[-1]
    return None


@functools.lru_cache(maxsize=None)
def load():
    """The NVRTC library (raises OSError when it is not installed or does not load)."""
    path = library_path()
    if path is None:
        raise OSError("the nvidia-cuda-nvrtc wheel is not installed (pip install -e .[nvrtc])")
    lib = ctypes.CDLL(str(path))
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    load().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_like_cupy(source: str, name: str = "program.cu", arch: str = ARCH, extra=()):
    """``(ok, log)`` of compiling ``source`` to PTX as CuPy's RawModule does (``extra``:
    more options, e.g. ``-fdevice-syntax-only`` to stop after the front end)."""
    ok, log, _ = _compile(source, name, arch, extra)
    return ok, log


def ptx_like_cupy(source: str, arch: str = ARCH) -> str:
    """The PTX of ``source`` compiled as CuPy's RawModule compiles it."""
    ok, log, ptx = _compile(source, "program.cu", arch, (), want_ptx=True)
    assert ok, log[-4000:]
    return ptx


def _compile(source, name, arch, extra, want_ptx=False):
    lib = load()
    options = [*NVRTC_OPTIONS, *CUPY_OPTIONS, f"-arch={arch}", *extra]
    program = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0,
                                    None, None)
    if status:
        raise OSError(f"nvrtcCreateProgram: {lib.nvrtcGetErrorString(status).decode()}")
    try:
        array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(program, len(options), array)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        ptx = None
        if want_ptx and status == 0:
            lib.nvrtcGetPTXSize(program, ctypes.byref(size))
            text = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(program, text)
            ptx = text.value.decode()
        return status == 0, log.value.decode(errors="replace"), ptx
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
