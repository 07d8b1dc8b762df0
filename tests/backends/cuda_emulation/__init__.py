"""The CUDA backend's generated code, run on the CPU: deterministic, checked, no GPU needed.

* :mod:`.translate`: a ``.cu`` source, as the backend writes it (prelude included), made C++
  for the shim ``cuda_on_cpu.h`` (CUDA threads as fibers under fixed schedules; deadlocks,
  divergent barriers, bad shuffle masks, endless loops and faults reported, not hung on);
* :mod:`.library`: many programs in one g++-built shared library, cached by content hash;
* :mod:`.device`: NumPy standing in for CuPy, so the generated host module drives the
  launches (outputs poisoned with NaN bytes, SM count chosen, arguments checked);
* :mod:`.cases`: the programs of the suite (op samples, and sizes that reach every path);
* :mod:`.asan`: the same programs under AddressSanitizer, in a child process;
* :mod:`.nvrtc`: NVRTC from the ``nvidia-cuda-nvrtc`` wheel, compiling as CuPy does;
* :mod:`.mutations`: planted kernel bugs, each of which the checks above must catch.

Nothing here is specific to one kind of program: any ``.cu`` whose host module launches its
``extern "C"`` kernels through ``cupy.RawModule`` runs (new intrinsics go into the shim).
"""
