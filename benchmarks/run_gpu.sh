#!/usr/bin/env bash
# Everything issue 6 needs a GPU for, in one run, with every output collected in one folder:
#   the machine (nvidia-smi, CuPy's config, torch), the GPU tests (pytest -m gpu) and the rest of
#   the suite (the NVRTC compile test among it), the stand-in/CuPy conformance test verbosely,
#   bench_cublas_call.py (host time of the direct cuBLAS call vs CuPy's wrapper), bench_gemm.py,
#   bench_gpu.py (GEMM vs torch, MLP 784-8192-10 step at batch 4096/8192,
#   eager and captured as a CUDA graph (issue 11), peak memory, host syncs, the targets; issue 20: each
#   elementwise/reduction kernel's bandwidth against a device-to-device copy, and the GPU time per AMP
#   step from CUPTI next to PyTorch's eager and captured steps),
#   bench_mnist.py on cuda, and the MNIST example with --device cuda (AMP, AMP replayed as a CUDA
#   graph, and float32) next to the CPU run it must match within one point of accuracy.
#
#   benchmarks/run_gpu.sh [OUT_DIR]          (default gpu-results/<date>)
#   PYTHON=.venv/bin/python benchmarks/run_gpu.sh
#   QUICK=1 ...                              (tests and bench_gpu only)
#
# A failing step is recorded in OUT_DIR/status.txt and the run goes on; the exit status is 1 if any
# step failed. Copy the figures into benchmarks/RESULTS.md (GPU model, driver, CUDA, CuPy, date).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu-results/$(date +%Y%m%d-%H%M%S)}"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
: > "$OUT/status.txt"
failed=0

step() {  # step NAME COMMAND...: run, tee the output to OUT/NAME.txt, record the exit status
    local name=$1
    shift
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$OUT/$name.txt"
    local rc=${PIPESTATUS[0]}
    echo "$name: exit $rc" >> "$OUT/status.txt"
    if [ "$rc" -ne 0 ]; then failed=1; fi
}

step machine bash -c "nvidia-smi; $PY -c 'import cupy; cupy.show_config()'; \
$PY -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available())' \
|| echo 'torch: not importable (the torch comparisons will be skipped)'"
step pytest-gpu "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider
# The stand-in against CuPy (issue 17): every difference listed here is a difference of the stand-in to fix.
step conformance "$PY" -m pytest -m gpu -v -rs -p no:cacheprovider tests/test_standin_conformance.py
step pytest-rest "$PY" -m pytest -q -p no:cacheprovider
step bench-gpu "$PY" benchmarks/bench_gpu.py --json "$OUT/bench_gpu.json"
step bench-cublas-call "$PY" benchmarks/bench_cublas_call.py --json "$OUT/bench_cublas_call.json"
if [ -z "${QUICK:-}" ]; then
    step bench-gemm "$PY" benchmarks/bench_gemm.py --json "$OUT/bench_gemm.json"
    step bench-mnist-cuda "$PY" benchmarks/bench_mnist.py --device cuda --batch 4096 8192 --hidden 8192 \
        --json "$OUT/bench_mnist_cuda.json"
    step mnist-cuda-amp "$PY" examples/mnist_mlp.py --device cuda --amp --json "$OUT/mnist_cuda_amp.json"
    step mnist-cuda-amp-graph "$PY" examples/mnist_mlp.py --device cuda --amp --cuda-graph \
        --json "$OUT/mnist_cuda_amp_graph.json"
    step mnist-cuda-float32 "$PY" examples/mnist_mlp.py --device cuda --no-amp --json "$OUT/mnist_cuda_float32.json"
    step mnist-cpu-amp "$PY" examples/mnist_mlp.py --device cpu --amp --json "$OUT/mnist_cpu_amp.json"
fi
echo "=== results in $OUT"
cat "$OUT/status.txt"
exit "$failed"
