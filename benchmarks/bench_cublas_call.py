"""Host time to issue one GEMM: CuPy's cuBLAS wrapper against tinyamp's direct ctypes call.

tinyamp calls libcublas directly (``tinyamp/kernels/cuda/cublas_direct.py``) for
every GEMM, eager or captured, because CuPy's wrappers refuse every call
during a stream capture. This measures what that costs the host per call,
on small float16 GEMMs (64x64x64, so the GPU keeps up and the host's issue
time is what is timed; the stream is drained after each timed round):

  * ``cupy wrapper``: ``cupy_backends.cuda.libs.cublas.gemmEx`` on CuPy's handle
    (what ``kernels/gemm.py`` called before);
  * ``direct``: ``cublas_direct.handle`` + ``cublas_direct.gemmEx`` (ctypes);
  * ``gemm()``: tinyamp's whole ``kernels.gemm.gemm`` call (checks, output
    allocation, the direct call).

    python benchmarks/bench_cublas_call.py [--json benchmarks/bench_cublas_call.json]

On a machine without a GPU, ``TINYAMP_CUDA=standin`` runs it on the CUDA
stand-in (a smoke test: the stand-in multiplies on the host, so its times
say nothing about cuBLAS).
"""

from __future__ import annotations

import argparse

import numpy as np

import tinyamp as ta  # noqa: F401 - loads the CUDA backend choice
from common import interleaved, machine, table, write_json
from tinyamp import backend
from tinyamp.kernels.cuda import cublas_direct
from tinyamp.kernels.gemm import gemm

SIZE = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args()
    cp = backend.cupy()
    wrapper = backend.cuda_lib("cupy_backends.cuda.libs.cublas")
    n = args.size
    a = cp.asarray(np.random.default_rng(0).standard_normal((n, n)).astype(np.float16))
    c = cp.empty((n, n), np.float16)
    alpha, beta = np.ones((), np.float32), np.zeros((), np.float32)
    cupy_handle = cp.cuda.device.get_cublas_handle()
    f16 = 2  # CUDA_R_16F
    args_tail = (n, n, n, alpha.ctypes.data, a.data.ptr, f16, n, a.data.ptr, f16, n, beta.ctypes.data,
                 c.data.ptr, f16, n, cublas_direct.CUBLAS_COMPUTE_32F, cublas_direct.CUBLAS_GEMM_DEFAULT_TENSOR_OP)

    def via_wrapper() -> None:
        wrapper.gemmEx(cupy_handle, 0, 0, *args_tail)

    def direct() -> None:
        cublas_direct.gemmEx(cublas_direct.handle(a), 0, 0, *args_tail)

    def whole() -> None:
        gemm(a, a)

    sync = cp.cuda.get_current_stream().synchronize
    results = interleaved({"cupy wrapper": via_wrapper, "direct": direct, "gemm()": whole}, sync=sync)
    base = results["cupy wrapper"]["median"]
    rows = [[name, f"{r['median'] * 1e6:.2f}", f"{r['min'] * 1e6:.2f}", f"{r['median'] / base:.3f}"]
            for name, r in results.items()]
    device = "CUDA stand-in (host emulation)" if backend.standin_active() else \
        cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    print(f"float16 GEMM {n}x{n}x{n}, host time per call, {device}")
    print(table(rows, ["call", "median us", "min us", "vs wrapper"]))
    if args.json:
        write_json(args.json, {"machine": machine(), "device": device, "size": n, "results": results})


if __name__ == "__main__":
    main()
