#!/usr/bin/env bash
# Everything tinyamp needs a GPU for, in one run of at most GPU_BUDGET_S seconds (default 450), in this order:
#   1. machine: nvidia-smi, CuPy's config, torch's version
#   2. pytest-gpu: every test marked gpu (the CUDA variants of the device/cuda_backend tests: the Philox
#      generator and the CUDA-graph replays' draws among them; the stand-in/CuPy conformance test)
#   3. bench-gpu-issue20: bench_gpu.py --issue20 (each kernel's bandwidth against a device-to-device copy,
#      the widening conversion beside the layout it replaced; the GPU time per AMP step from CUPTI)
#   4. bench-gpu: bench_gpu.py --no-issue20 (GEMM vs torch, the MLP 784-8192-10 step eager and captured)
#   5. bench-host-waits, 6. bench-graph-replay (host time of each phase of a graphed step's call),
#   7. bench-cublas-call, 8. bench-gemm, 9. bench-mnist-cuda (tinyamp vs torch)
#   10. mnist-amp, 11. mnist-amp-graph: examples/mnist_mlp.py --device cuda --amp [--cuda-graph]
#   12. bench-host-waits-against, when an older tree was carried (see the step)
# Each step runs under its own time limit (what is left of the budget at most), writes its log (and its JSON)
# and goes on past a failure; a step that no longer fits in the budget is skipped and says so. At the end
# (and after every step, so a run stopped early keeps what it measured) summary.txt lists each step's exit
# status and time and the key lines (tests passed/failed, the conversion kernels' bandwidth, the accuracies).
#
# On the device tool (15 device minutes a session, 10 a call; $OUT is set and brings back at most 8 files):
#   run(command="bash benchmarks/run_gpu.sh", timeout_s=600)
#   -> $OUT/summary.txt and $OUT/results.tgz (every step's log and JSON); the summary is also printed last.
# Expected on an H200: about 6 minutes (the GPU tests ~90 s and bench_gpu --issue20 ~60 s as measured before,
# the rest estimated); never more than the 450 s budget plus 10 s, so a 600 s call always ends with the summary.
# Elsewhere:
#   benchmarks/run_gpu.sh [OUT_DIR]            (default gpu-results/<date>; the files unpacked there)
#   PYTHON=.venv/bin/python GPU_BUDGET_S=900 benchmarks/run_gpu.sh
# Some steps only (a rerun after a fix): GPU_STEPS="bench-gpu-issue20 mnist-amp" bash benchmarks/run_gpu.sh
# Checking this script without a GPU (tiny sizes on the CUDA stand-in; about a minute on 2 CPU cores; the
# GPU tests are all skipped there; tests/benchmarks/test_run_gpu.py runs the benchmark and example steps this way):
#   TINYAMP_CUDA=standin GPU_SMALL=1 benchmarks/run_gpu.sh /tmp/gpu-check
# The exit status is 1 if any step failed or was skipped. Copy the figures into benchmarks/RESULTS.md (GPU
# model, driver, CUDA, CuPy, date).
set -u -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
BUDGET="${GPU_BUDGET_S:-450}"
DEST="${1:-${OUT:-gpu-results/$(date -u +%Y%m%d-%H%M%S)}}"
mkdir -p "$DEST"
if [ -n "${OUT:-}" ] && [ "$DEST" = "$OUT" ]; then
    RES="$(mktemp -d)/results"  # packed into $OUT/results.tgz after each step
else
    RES="$DEST"
fi
mkdir -p "$RES"
SUMMARY="$RES/summary.txt"
: > "$SUMMARY"
failed=0

if [ -n "${GPU_SMALL:-}" ]; then  # tiny sizes: checks the commands, measures nothing
    WORKERS=(-n 2)
    BENCH_GPU=(--batches 64 --hidden 128 --gemm-sizes 64 --repeats 3)
    HOST_WAITS=(--batch 64 --hidden 128 --steps 2)
    REPLAY=(--batch 64 --hidden 128 --rounds 1)
    GEMM=(--repeats 1 --gpu-sizes 64 128)
    MNIST_BENCH=(--batch 64 --hidden 128 --rounds 1)
    EXAMPLE=(--hidden 128 --steps 4)
else
    WORKERS=(-n 16)
    BENCH_GPU=()
    HOST_WAITS=(--batch 4096 --hidden 8192)
    REPLAY=(--batch 4096 --hidden 8192)
    GEMM=()
    MNIST_BENCH=(--batch 8192 --hidden 8192 --rounds 3)
    EXAMPLE=()
fi
# pytest's plugins, where installed: xdist's workers; a per-test limit (a hung test fails alone).
plugins=$(timeout 30 "$PY" -c "import importlib.util as u
print(*[m for m in ('xdist', 'pytest_timeout') if u.find_spec(m)])" 2>/dev/null)
case " $plugins " in *" xdist "*) ;; *) WORKERS=() ;; esac
PYTEST_TIMEOUT=()
case " $plugins " in *" pytest_timeout "*) PYTEST_TIMEOUT=(--timeout 150) ;; esac

pack() {  # the device tool brings back at most 8 files: one archive of every step's files, and the summary
    if [ "$RES" != "$DEST" ]; then
        tar -czf "$DEST/results.tgz.part" -C "$(dirname "$RES")" results && mv "$DEST/results.tgz.part" "$DEST/results.tgz"
        cp "$SUMMARY" "$DEST/summary.txt"
    fi
}

step() {  # step NAME LIMIT_S COMMAND...: run it (its output to RES/NAME.log), record the exit status and time
    local name=$1 limit=$2
    shift 2
    case " ${GPU_STEPS:-$name} " in *" $name "*) ;; *) return ;; esac
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt 30 ]; then
        echo "$name: SKIPPED (${left}s left of the ${BUDGET}s budget)" | tee -a "$SUMMARY"
        failed=1
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit}s): $*"
    local start=$SECONDS
    timeout -k 10 "$limit" "$@" < /dev/null 2>&1 | tee "$RES/$name.log"
    local rc=${PIPESTATUS[0]}
    local what="exit $rc"
    { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && what="TIMED OUT after ${limit}s (exit $rc)"
    [ "$rc" -ne 0 ] && failed=1
    printf '%s: %s, %ss\n' "$name" "$what" "$((SECONDS - start))" | tee -a "$SUMMARY"
    pack
}

step machine 60 bash -c "nvidia-smi; $PY -c 'import cupy; cupy.show_config()'; \
$PY -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available())' \
|| echo 'torch: not importable (the torch comparisons will be skipped)'"
step pytest-gpu 210 "$PY" -m pytest -m gpu -q -rfE -p no:cacheprovider "${WORKERS[@]}" "${PYTEST_TIMEOUT[@]}" \
    --junitxml "$RES/pytest_gpu.xml"
step bench-gpu-issue20 150 "$PY" benchmarks/bench_gpu.py --issue20 "${BENCH_GPU[@]}" --json "$RES/bench_gpu_issue20.json"
step bench-gpu 150 "$PY" benchmarks/bench_gpu.py --no-issue20 "${BENCH_GPU[@]}" --json "$RES/bench_gpu.json"
step bench-host-waits 90 "$PY" benchmarks/bench_host_waits.py "${HOST_WAITS[@]}" --json "$RES/bench_host_waits.json"
step bench-graph-replay 60 "$PY" benchmarks/bench_graph_replay.py "${REPLAY[@]}" --json "$RES/bench_graph_replay.json"
step bench-cublas-call 60 "$PY" benchmarks/bench_cublas_call.py --json "$RES/bench_cublas_call.json"
step bench-gemm 90 "$PY" benchmarks/bench_gemm.py "${GEMM[@]}" --json "$RES/bench_gemm.json"
step bench-mnist-cuda 150 "$PY" benchmarks/bench_mnist.py --device cuda "${MNIST_BENCH[@]}" \
    --json "$RES/bench_mnist_cuda.json"
step mnist-amp 90 "$PY" examples/mnist_mlp.py --device cuda --amp "${EXAMPLE[@]}" --json "$RES/mnist_amp.json"
step mnist-amp-graph 90 "$PY" examples/mnist_mlp.py --device cuda --amp --cuda-graph "${EXAMPLE[@]}" \
    --json "$RES/mnist_amp_graph.json"
# 12, last, in what the budget leaves: the eager step's host time against an older tree, in alternating
# subprocesses, when one was carried (run(carry=[".probe/old"]) brings the ignored .probe/old, a checkout's
# tinyamp package; HOST_AGAINST names another).
AGAINST="${HOST_AGAINST:-.probe/old}"
if [ -d "$AGAINST/tinyamp" ]; then
    step bench-host-waits-against 120 "$PY" benchmarks/bench_host_waits.py "${HOST_WAITS[@]}" --against "$AGAINST" \
        --pairs "${HOST_PAIRS:-3}" --json "$RES/bench_host_waits_against.json"
fi

{
    echo "--- key lines"
    grep -h -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$RES/pytest-gpu.log" | tail -1
    grep -h -E 'tinyamp_convert_(f16|bf16)_f32|tinyamp_column_sum|kernel_vs_copy' "$RES/bench-gpu-issue20.log"
    [ -f "$RES/bench-host-waits-against.log" ] && grep -h 'this / against' "$RES/bench-host-waits-against.log"
    for name in mnist-amp mnist-amp-graph; do
        [ -f "$RES/$name.log" ] && echo "$name: $(grep -h '^test accuracy' "$RES/$name.log")"
    done
    echo "total ${SECONDS}s of a ${BUDGET}s budget; files: $DEST"
} >> "$SUMMARY" 2>/dev/null
pack
echo "=== summary"
cat "$SUMMARY"
exit "$failed"
