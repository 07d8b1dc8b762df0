"""The CUDA backend: one ``.cu`` source and one host module per program.

``build(program, fetches, options)`` renders both without CuPy or a GPU (so ``symgrad dump
--backend cuda`` and nvcc checks work anywhere) and caches them on disk. The returned
:class:`CudaExecutable` imports CuPy on its first run: it compiles the ``.cu`` source into one
``cupy.RawModule``, uploads the constants and runs the host module. Without CuPy (or without a
device) running raises :class:`CudaUnavailableError`; ``source``, ``kernels`` and
``cuda_source`` work regardless. ``cubins(archs)`` compiles the source for each architecture
(with nvcc when it is on the PATH, else NVRTC through CuPy) for ahead-of-time artifacts. A
program holding bfloat16 Values compiles (kernels store it as 16 raw bits and compute in
float) but does not run: CuPy has no bfloat16 arrays.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ...errors import SymgradError
from ...option_schema import Option
from .. import Backend, CustomLowering, cache
from ..common import cache_prefix, signature_literals
from ..options import (ACCUMULATE_FLOAT64, CACHE_DIR, CHUNK_SIZE, FLUSH_DENORMALS, THREADS,
                       chunk_loop_policy)
from ..host import bind_references
from ..host import lowers as numpy_lowers
from ..host.generator import uses_extension_dtypes
from .host import generate
from .lowering import LOWERINGS, register_lowering

NAME = "cuda"
# No contraction of a product and a sum into one fma (NVRTC's and nvcc's default): it rounds
# once where NumPy rounds twice, and a*b + c whose product overflows is then finite, not inf
# (the C backend builds with -ffp-contract=off for the same reason). flush_denormals=True
# adds -ftz=true (float32 subnormals flush to zero): FLUSH_OPTION. CuPy appends -ftz=true to
# RawModule's options whatever the program asks, so the NVRTC build of a program run without
# a cubin flushes float32 subnormals either way; cubins are built as the option says.
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false")
NVCC_OPTIONS = ("-std=c++17", "-fmad=false")
FLUSH_OPTION = "-ftz=true"
INSTALL_HINT = "CuPy with a CUDA device is required to run; install symgrad[cuda]"


def compiler_options(base, flush) -> tuple:
    """``base`` (NVRTC_OPTIONS or NVCC_OPTIONS), with FLUSH_OPTION when ``flush``."""
    return (*base, FLUSH_OPTION) if flush else tuple(base)


class CudaUnavailableError(SymgradError, RuntimeError):
    """The program was compiled for CUDA but CuPy or a CUDA device is missing."""


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise CudaUnavailableError(f"{INSTALL_HINT} (importing cupy failed: {exc})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:   # CuPy raises its own CUDARuntimeError without a driver
        raise CudaUnavailableError(f"{INSTALL_HINT} (no CUDA device: {exc})") from None
    if count == 0:
        raise CudaUnavailableError(f"{INSTALL_HINT} (no CUDA device found)")
    return cupy


def device_arch() -> str:
    """``sm_XY`` of the current CUDA device (needs CuPy and a device)."""
    cupy = _import_cupy()
    return f"sm_{cupy.cuda.Device().compute_capability}"


class CudaExecutable:
    """A program compiled for CUDA: ``run(feeds_by_name, buffers=None, dims=None) -> list of CuPy
    arrays``: the ``outputs`` fetches (NumPy with ``options.return_numpy``), then the new
    values of the assigned parameters (always on the device; nothing is written in place, so
    ``buffers`` is ignored). ``source``: the host module; ``cuda_source``: the one ``.cu``
    file; ``kernels``: kernel name -> its CUDA text; ``entries``: the ``extern "C"`` entry
    points; ``path``: the cached host module; ``stats``."""

    backend = NAME
    numpy_module = None
    in_place = overwrites = ()

    def __init__(self, generated, path, cu_path, options, stats, outputs=None):
        self.source = generated.source
        self.cuda_source = generated.cuda_source
        self.kernels = generated.kernels
        self.entries = generated.entries
        self.constants = generated.constants
        self.references = generated.references
        self.path = path
        self.cu_path = cu_path
        self.options = options
        self.stats = stats
        self.outputs = outputs
        self.module = None

    def load(self, cubin=None):
        """Import the host module and load its kernels (compiled by NVRTC, or from ``cubin``
        bytes built for this device); done by the first run. Returns the module."""
        if self.stats.get("bfloat16"):
            raise CudaUnavailableError("this program holds bfloat16 Values: its CUDA source "
                                       "compiles, but CuPy has no bfloat16 arrays to run it "
                                       "with (use the numpy backend, or float16/float32)")
        cupy = _import_cupy()
        module = cache.load_module(self.path, self.source)
        bind_references(module, self.references)
        if cubin is not None:
            with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as handle:
                handle.write(cubin)
            try:
                raw = cupy.RawModule(path=handle.name)
                kernels = {name: raw.get_function(name) for name in self.entries}
            finally:
                os.unlink(handle.name)
        else:
            raw = cupy.RawModule(code=self.cuda_source, options=compiler_options(
                NVRTC_OPTIONS, self.options.flush_denormals))
            kernels = {name: raw.get_function(name) for name in self.entries}
        device = cupy.cuda.Device()
        module.KERNELS.update(kernels)
        module.MAX_BLOCKS = int(device.attributes["MultiProcessorCount"]) * 32
        module.CONSTANTS.update({k: cupy.asarray(v) for k, v in self.constants.items()})
        self.module = module
        return module

    def run(self, feeds, buffers=None, dims=None):
        module = self.module or self.load()
        results = module.run(dims, None, **feeds)
        if self.options.return_numpy:
            count = len(results) if self.outputs is None else self.outputs
            return [r.get() for r in results[:count]] + list(results[count:])
        return results

    def cubins(self, archs=None) -> dict:
        """``{arch: cubin bytes}`` of the program's ``.cu`` source for each architecture
        (``"sm_90"``...; default: the current device's). Uses nvcc when it is on the PATH,
        else NVRTC through CuPy."""
        archs = list(archs) if archs else [device_arch()]
        nvcc = shutil.which("nvcc")
        flush = self.options.flush_denormals
        return {arch: (_nvcc_cubin(nvcc, self.cuda_source, arch, flush) if nvcc
                       else _nvrtc_cubin(self.cuda_source, arch, flush)) for arch in archs}


def _nvcc_cubin(nvcc, source, arch, flush=False) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        cu, cubin = os.path.join(folder, "program.cu"), os.path.join(folder, "program.cubin")
        with open(cu, "w", encoding="utf-8") as handle:
            handle.write(source)
        done = subprocess.run([nvcc, "-cubin", f"-arch={arch}",
                               *compiler_options(NVCC_OPTIONS, flush), "-o", cubin, cu],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed for {arch}:\n{done.stderr}")
        with open(cubin, "rb") as handle:
            return handle.read()


def _nvrtc_cubin(source, arch, flush=False) -> bytes:
    _import_cupy()
    from cupy.cuda import nvrtc

    program = nvrtc.createProgram(source, "program.cu", [], [])
    try:
        nvrtc.compileProgram(program, [*compiler_options(NVRTC_OPTIONS, flush),
                                       f"--gpu-architecture={arch}"])
        return nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


def build(program, fetches, options):
    inputs, outputs = signature_literals(program, fetches)
    generated = generate(program, fetches, options, inputs, outputs)
    _, paths, hit = cache.store_sources(
        NAME, cache_prefix(NAME, program, fetches),
        {".py": generated.source, ".cu": generated.cuda_source}, options)
    stats = {"cache_hit": hit, "kernels": len(generated.kernels),
             "source_lines": generated.source.count("\n"),
             "cuda_lines": generated.cuda_source.count("\n"),
             "bfloat16": uses_extension_dtypes(program)}
    return CudaExecutable(generated, paths[".py"], paths[".cu"], options, stats,
                          outputs=len(outputs))


def _cubin_archs(requested):
    """Architectures to build cubins for: those requested, else the current device's when a
    GPU is present, else none (the .cu source is always saved)."""
    if requested is not None:
        return list(requested)
    try:
        return [device_arch()]
    except Exception:  # no CuPy or no device: source only
        return []


def artifact_files(executable, tree, save_options) -> dict:
    """``cuda/host.py``, ``cuda/program.cu``, one file per kernel, and (when saving with
    ``cubin_archs``) a cubin per architecture."""
    kernels = {}
    for number, (name, kernel_source) in enumerate(sorted(executable.kernels.items())):
        kernels[name] = f"cuda/kernel{number}.cu"
        tree.add(kernels[name], kernel_source.encode("utf-8"))
    tree.add("cuda/host.py", executable.source.encode("utf-8"))
    entry = {"host": "cuda/host.py", "kernels": kernels, "source": "cuda/program.cu",
             "cubins": {}}
    tree.add(entry["source"], executable.cuda_source.encode("utf-8"))
    requested = (save_options or {}).get("cubin_archs")
    if requested is not None:
        archs = _cubin_archs(requested)
        for number, (arch, cubin) in enumerate((executable.cubins(archs) if archs
                                                else {}).items()):
            entry["cubins"][arch] = f"cuda/program{number}.cubin"
            tree.add(entry["cubins"][arch], cubin)
    return entry


def lowers(opdef) -> bool:
    """Ops with a rule in the CUDA lowering table (and fusible reductions) run in kernels;
    every other op the NumPy backend lowers runs on CuPy."""
    return LOWERINGS.lowers(opdef) or opdef.reduction is not None or numpy_lowers(opdef)

def _check_custom_expression(name, expression, category) -> None:
    """``cuda=`` of a user op: a CUDA expression over its operands (``{0}``...) and ``{T}``."""
    if not isinstance(expression, str):
        raise TypeError(f"custom_op {name!r}: cuda= must be a str (a CUDA expression), "
                        f"got {type(expression).__name__}")


RETURN_NUMPY = Option("return_numpy", bool, False, "return NumPy arrays instead of CuPy arrays")


def _host_arrays(results) -> list:
    return [r.get() if hasattr(r, "get") else r for r in results]


BACKEND = Backend(NAME, build, lowers, artifact_files=artifact_files,
                  artifact_binaries=("cubins",), require_run=lambda: device_arch(),
                  host_arrays=_host_arrays,
                  # the host module is the NumPy generator's: its loops read chunk_size, threads
                  options=(CHUNK_SIZE, THREADS, ACCUMULATE_FLOAT64, FLUSH_DENORMALS, CACHE_DIR,
                           RETURN_NUMPY),
                  fusion_policy=chunk_loop_policy,
                  custom_lowering=CustomLowering(_check_custom_expression, register_lowering))
