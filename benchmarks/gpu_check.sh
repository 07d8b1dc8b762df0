#!/usr/bin/env bash
# One command on a GPU machine: install what is missing (CuPy, test tools), run the CUDA
# tests (pytest -m cuda), then the GPU benchmark. Logs go to $OUT (default ./gpu_logs).
# Usage: bash benchmarks/gpu_check.sh [--quick]     (--quick: small benchmark sizes)
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
LOGS="${OUT:-$PWD/gpu_logs}"
mkdir -p "$LOGS"

has() { "$PY" -c "import $1" >/dev/null 2>&1; }

{
  nvidia-smi || echo "nvidia-smi not found"
  has symgrad || "$PY" -m pip install -q -e . || exit 1
  has pytest || "$PY" -m pip install -q pytest
  has hypothesis || "$PY" -m pip install -q hypothesis
  has cupy || "$PY" -m pip install -q "cupy-cuda12x>=13" || "$PY" -m pip install -q cupy-cuda13x
  "$PY" -c "import cupy; print('cupy', cupy.__version__, 'devices:', cupy.cuda.runtime.getDeviceCount())"
} 2>&1 | tee "$LOGS/setup.log"

"$PY" -m pytest -m cuda tests/backends -q -rs -p no:cacheprovider 2>&1 | tee "$LOGS/pytest_cuda.log"
tests=${PIPESTATUS[0]}

"$PY" benchmarks/gpu.py "$@" --json "$LOGS/gpu_bench.json" 2>&1 | tee "$LOGS/gpu_bench.log"
bench=${PIPESTATUS[0]}

echo "pytest -m cuda exit code: $tests; benchmarks/gpu.py exit code: $bench" | tee -a "$LOGS/summary.log"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
