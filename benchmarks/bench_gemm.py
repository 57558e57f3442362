"""Benchmark tinyamp's gemm against the plain matmuls it stands in for.

CPU (always): ``gemm`` on float16/bfloat16 (upcast, float32 BLAS, one rounding)
against ``np.matmul`` in float32 and NumPy's native float16 matmul (no BLAS;
timed at the small size only, it takes about a second a call).

GPU (when ``tinyamp.backend.cuda_available()``): ``gemm`` float16 (cuBLAS,
CUBLAS_COMPUTE_32F) against ``cupy.matmul`` in float32, and against
``torch.matmul`` in float16 when torch with CUDA imports. Timed with CUDA
events after warm-up calls.

Prints a table and writes JSON (``--json``, default next to this script).
Usage: ``python benchmarks/bench_gemm.py [--json PATH] [--repeats N] [--gpu-sizes N ...]``

On a small shared machine, BLAS threads that wait for a busy core make CPU
timings jump in scheduler ticks; ``OPENBLAS_NUM_THREADS=1`` gives steadier
numbers, and ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` set high
avoid page-fault noise. The JSON records these variables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

try:
    from tinyamp import backend
    from tinyamp.kernels.gemm import gemm
except ImportError:  # run as a script from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tinyamp import backend
    from tinyamp.kernels.gemm import gemm

CPU_SHAPES = [(256, 784, 1024), (1024, 1024, 1024)]  # (M, K, N)
GPU_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
NATIVE_FP16_MAX_FLOP = 1e9  # native float16 matmul only at the small size
_ENV_RECORDED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_",
                 "MALLOC_TRIM_THRESHOLD_", "CUPY_TF32", "CUPY_ACCELERATORS")


def _time_cpu(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds per call, one call per sample (each call is milliseconds)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _row(device: str, op: str, shape: tuple[int, int, int], samples: list[float]) -> dict:
    m, k, n = shape
    median = statistics.median(samples)
    return {"device": device, "op": op, "M": m, "K": k, "N": n,
            "median_ms": median * 1e3, "min_ms": min(samples) * 1e3,
            "repeats": len(samples), "gflops": 2.0 * m * k * n / median / 1e9}


def _bench_cpu_shape(shape: tuple[int, int, int], repeats: int) -> list[dict]:
    m, k, n = shape
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((m, k), dtype=np.float32)
    b32 = rng.standard_normal((k, n), dtype=np.float32)
    a16, b16 = a32.astype(np.float16), b32.astype(np.float16)
    abf, bbf = a32.astype(ml_dtypes.bfloat16), b32.astype(ml_dtypes.bfloat16)
    bt16 = np.ascontiguousarray(b16.T)  # weight stored (N, K), as nn.Linear keeps it
    cases = [
        ("np.matmul float32", lambda: np.matmul(a32, b32)),
        ("gemm float16", lambda: gemm(a16, b16)),
        ("gemm float16 -> float32 out", lambda: gemm(a16, b16, np.float32)),
        ("gemm float16 trans_b (x @ W.T)", lambda: gemm(a16, bt16, trans_b=True)),
        ("gemm bfloat16", lambda: gemm(abf, bbf)),
    ]
    rows = [_row("cpu", name, shape, _time_cpu(fn, repeats)) for name, fn in cases]
    if 2.0 * m * k * n <= NATIVE_FP16_MAX_FLOP:
        rows.append(_row("cpu", "np.matmul float16 (native, no BLAS)", shape,
                         _time_cpu(lambda: np.matmul(a16, b16), 2, warmup=0)))
    return rows


def bench_cpu(repeats: int) -> list[dict]:
    return [row for shape in CPU_SHAPES for row in _bench_cpu_shape(shape, repeats)]


def _time_cuda(cp: Any, fn: Callable[[], Any], repeats: int, warmup: int = 3) -> list[float]:
    """Seconds per call from CUDA events around each call."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    samples = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return samples


def _time_torch(torch: Any, fn: Callable[[], Any], repeats: int, warmup: int = 3) -> list[float]:
    """Like _time_cuda, with torch's events (torch runs on its own stream)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return samples


def _bench_gpu_shape(cp: Any, torch: Any, shape: tuple[int, int, int],
                     repeats: int) -> list[dict]:
    m, k, n = shape
    rng = cp.random.default_rng(0)
    a32 = rng.standard_normal((m, k), dtype=cp.float32)
    b32 = rng.standard_normal((k, n), dtype=cp.float32)
    a16, b16 = a32.astype(cp.float16), b32.astype(cp.float16)
    cases = [
        ("gemm float16 (cuBLAS, COMPUTE_32F)", lambda: gemm(a16, b16)),
        ("gemm float16 -> float32 out", lambda: gemm(a16, b16, np.float32)),
        ("cupy.matmul float32", lambda: cp.matmul(a32, b32)),
    ]
    rows = [_row("cuda", name, shape, _time_cuda(cp, fn, repeats)) for name, fn in cases]
    if torch is not None:
        ta, tb = torch.as_tensor(a16, device="cuda"), torch.as_tensor(b16, device="cuda")
        rows.append(_row("cuda", "torch.matmul float16", shape,
                         _time_torch(torch, lambda: torch.matmul(ta, tb), repeats)))
    return rows


def bench_gpu(repeats: int, shapes: "list[tuple[int, int, int]]" = GPU_SHAPES) -> list[dict]:
    cp = backend.cupy()
    try:
        import torch  # noqa: PLC0415 - optional comparison only
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    rows = []
    for shape in shapes:
        rows += _bench_gpu_shape(cp, torch, shape, repeats)
        cp.get_default_memory_pool().free_all_blocks()  # 8192^3 wants the room
    return rows


def _print_table(rows: list[dict]) -> None:
    header = f"{'device':6} {'M x K x N':>16}  {'op':38} {'median ms':>10} {'GFLOP/s':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = f"{r['M']}x{r['K']}x{r['N']}"
        print(f"{r['device']:6} {shape:>16}  {r['op']:38} "
              f"{r['median_ms']:10.2f} {r['gflops']:10.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(Path(__file__).with_name("bench_gemm.json")),
                        help="where to write the results (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per case")
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU section")
    parser.add_argument("--gpu-sizes", type=int, nargs="+", default=[s[0] for s in GPU_SHAPES],
                        help="square GPU GEMMs, n x n x n (default: %(default)s)")
    args = parser.parse_args(argv)

    rows = bench_cpu(args.repeats)
    gpu_note = None
    if args.no_gpu:
        gpu_note = "skipped (--no-gpu)"
    elif backend.cuda_available():
        rows += bench_gpu(max(args.repeats, 10), [(n, n, n) for n in args.gpu_sizes])
    else:
        gpu_note = "no CUDA GPU available"
    _print_table(rows)
    if gpu_note:
        print(f"GPU: {gpu_note}")

    result = {
        "benchmark": "gemm",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__,
                    "env": {k: v for k, v in os.environ.items() if k in _ENV_RECORDED}},
        "gpu": gpu_note or "measured",
        "results": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
