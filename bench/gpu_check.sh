#!/usr/bin/env bash
# One call on a GPU machine: the GPU tests, then the GPU benchmark (under 9 minutes).
#
# Works with our venv or with any python3 that has numpy + cuda-bindings (+ NVRTC), e.g.
# a machine with torch/cupy: oxiwork runs from the source tree via PYTHONPATH (no pip
# install). Uses pytest when it is importable, else the tests' plain-python runner.
#
#   bash bench/gpu_check.sh            # tests + full benchmark
#   QUICK=1 bash bench/gpu_check.sh    # tests + small benchmark sizes
#   GPU_JSON=out.json bash ...         # also write the benchmark's numbers to out.json
#   TESTS=-k\ example bash ...         # pytest arguments selecting which GPU tests run
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
status=0

banner() { printf '\n==================== %s ====================\n' "$1"; }

banner "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi: not available"
"$PY" - <<'PYEOF'
import importlib, sys
print("python", sys.version.split()[0])
for mod in ("numpy", "cuda.bindings", "cuda.pathfinder", "torch", "cupy", "pytest", "networkx"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod:16s} {getattr(m, '__version__', 'present')}")
    except Exception as e:
        print(f"{mod:16s} MISSING ({type(e).__name__})")
try:
    from cuda.bindings import nvrtc
    print("nvrtc           ", nvrtc.nvrtcVersion()[1:])
except Exception as e:
    print("nvrtc            MISSING", e)
from oxiwork.executor.driver import probe
reason = probe(0)
print("GPU probe:", "OK" if reason is None else reason)
PYEOF

banner "GPU tests"
if "$PY" -c "import pytest" 2>/dev/null; then
  # shellcheck disable=SC2086  # TESTS is a word list of pytest arguments
  timeout 330 "$PY" -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider -o addopts="" \
    -o faulthandler_timeout=150 --durations=0 ${TESTS:-} \
    || status=1
else
  echo "(pytest not importable: plain-python runner)"
  timeout 330 "$PY" tests/gpu/test_gpu_executors.py || status=1
fi

banner "GPU benchmark"
args=()
[ -n "${QUICK:-}" ] && args+=(--quick)
[ -n "${GPU_JSON:-}" ] && args+=(--json "$GPU_JSON")
timeout 200 "$PY" bench/gpu.py "${args[@]}" || status=1

banner "done (exit $status)"
exit $status
