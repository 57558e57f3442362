"""cuBLASLt's fp8 GEMM, called directly (ctypes): per-tensor E4M3/E5M2 operands with device scale pointers.

What cuBLASLt takes for an fp8 GEMM on Hopper (sm_89/sm_90), and so what
:func:`plan` asks for before it makes a plan (None otherwise, and
``fp8_gemm`` takes its bfloat16 path):

- compute capability 8.9 or more (the device's);
- per-tensor scales (block and MX scales need Blackwell's scale modes);
- A and B ``CUDA_R_8F_E4M3`` (28) or ``CUDA_R_8F_E5M2`` (29), not both E5M2;
- the TN layout: ``fp8_gemm`` hands row-major ``a`` (M, K) and ``b`` (N, K)
  (``trans_b``), which column-major cuBLAS sees as ``D^T = op(B') @ A'`` with
  B' = b transposed and A' = a as is: TRANSA = T, TRANSB = N;
- leading dimensions (K for both operands, N for D) multiples of 16;
- D bfloat16, float16 or float32 (C of D's type), compute type 32F with 32F
  scalars; the dequantisation factors go in ``A_SCALE_POINTER`` (17) and
  ``B_SCALE_POINTER`` (18) as device pointers, so no launch reads a scale on
  the host and a CUDA graph captures the call; ``FAST_ACCUM`` (25, an int8) is
  on for ``ta.backends.fp8.accumulate = "hopper_fast"``; a bias goes in the
  epilogue (``BIAS_POINTER``, of D's type).

Plans (descriptors, layouts, the heuristic's algorithm) are cached per problem,
as ``cublaslt_direct`` caches the 16-bit ones; the library and handles are that
module's. On the CUDA stand-in the library is its emulation
(``cupy_standin/cublaslt.py``), which refuses what cuBLASLt refuses.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ... import backend
from ... import dtypes as dt
from . import cublas_direct, cublaslt_direct as lt

CUDA_R_8F_E4M3, CUDA_R_8F_E5M2 = 28, 29
DESC_A_SCALE_POINTER, DESC_B_SCALE_POINTER, DESC_FAST_ACCUM = 17, 18, 25
MIN_COMPUTE_CAPABILITY = 89
_OUT_TYPES = {dt.bfloat16: lt.CUDA_R_16BF, dt.float16: lt.CUDA_R_16F, dt.float32: lt.CUDA_R_32F}
_FP8_TYPES = {"e4m3": CUDA_R_8F_E4M3, "e5m2": CUDA_R_8F_E5M2}
_plans: dict[tuple, "tuple | None"] = {}


def compute_capability() -> int:
    """The current device's compute capability as an int (90 for sm_90)."""
    return int(backend.cupy().cuda.Device().compute_capability)


def takes(m: int, n: int, k: int, fmt_a: Any, fmt_b: Any, out: np.dtype) -> bool:
    """Whether cuBLASLt's fp8 GEMM takes this problem on the current device (see the module docstring)."""
    return (compute_capability() >= MIN_COMPUTE_CAPABILITY and not (fmt_a.name == fmt_b.name == "e5m2")
            and out in _OUT_TYPES and k % 16 == 0 and n % 16 == 0 and m > 0)


def _plan(handle: int, problem: tuple) -> "tuple | None":
    m, n, k, type_a, type_b, out_type, epilogue = problem
    library = lt._library()
    desc = ctypes.c_void_p()
    lt._check(library.cublasLtMatmulDescCreate(ctypes.byref(desc), lt.CUBLAS_COMPUTE_32F, lt.CUDA_R_32F),
              "cublasLtMatmulDescCreate")
    setter = library.cublasLtMatmulDescSetAttribute
    lt._set(setter, desc.value, lt.DESC_TRANSA, ctypes.c_int32(1), "cublasLtMatmulDescSetAttribute")
    lt._set(setter, desc.value, lt.DESC_TRANSB, ctypes.c_int32(0), "cublasLtMatmulDescSetAttribute")
    if epilogue:
        lt._set(setter, desc.value, lt.DESC_EPILOGUE, ctypes.c_uint32(lt.EPILOGUE_BIAS),
                "cublasLtMatmulDescSetAttribute")
    layouts = []
    # Column-major: A' = b's codes (K x N, ld K) used transposed, B' = a's codes (K x M, ld K), D (N x M, ld N).
    for data_type, rows, cols, ld in ((type_b, k, n, k), (type_a, k, m, k), (out_type, n, m, n)):
        layout = ctypes.c_void_p()
        lt._check(library.cublasLtMatrixLayoutCreate(ctypes.byref(layout), data_type, rows, cols, ld),
                  "cublasLtMatrixLayoutCreate")
        layouts.append(layout.value)
    preference = ctypes.c_void_p()
    lt._check(library.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "cublasLtMatmulPreferenceCreate")
    lt._set(library.cublasLtMatmulPreferenceSetAttribute, preference.value, lt.PREF_MAX_WORKSPACE_BYTES,
            ctypes.c_uint64(cublas_direct.WORKSPACE_BYTES), "cublasLtMatmulPreferenceSetAttribute")
    result, count = lt.HeuristicResult(), ctypes.c_int(0)
    lt._check(library.cublasLtMatmulAlgoGetHeuristic(handle, desc.value, layouts[0], layouts[1], layouts[2],
                                                     layouts[2], preference.value, 1, ctypes.byref(result),
                                                     ctypes.byref(count)), "cublasLtMatmulAlgoGetHeuristic")
    if count.value < 1 or result.workspace_size > cublas_direct.WORKSPACE_BYTES:
        return None
    return desc.value, layouts[0], layouts[1], layouts[2], result.algo


def matmul(a: Any, b: Any, out_dtype: np.dtype, bias: Any, fast_accum: bool) -> Any:
    """``a @ b^T * (scale_inv(a) * scale_inv(b)) (+ bias)`` as ``out_dtype``: one cuBLASLt call, or None when
    the heuristic offers no algorithm. ``a`` (M, K) and ``b`` (N, K): per-tensor ``Fp8Array``s on the GPU,
    C-contiguous codes (``takes`` said yes)."""
    (m, k), n = a.shape, b.shape[0]
    cp = backend.cupy()
    out = cp.empty((m, n), dtype=out_dtype)
    problem = (m, n, k, _FP8_TYPES[a.fmt.name], _FP8_TYPES[b.fmt.name], _OUT_TYPES[out_dtype], bias is not None)
    device_id = a.data.device.id
    handle = lt._handle(device_id)
    key = (handle, problem)
    plan = _plans.get(key, False)
    if plan is False:
        plan = _plans[key] = _plan(handle, problem)
    if plan is None:
        return None
    desc, a_layout, b_layout, d_layout, algo = plan
    library = lt._library()
    setter = library.cublasLtMatmulDescSetAttribute
    # A' is b and B' is a: their dequantisation factors go in that order.
    lt._set(setter, desc, DESC_A_SCALE_POINTER, ctypes.c_void_p(b.scale_inv.data.ptr), "cublasLtMatmulDescSetAttribute")
    lt._set(setter, desc, DESC_B_SCALE_POINTER, ctypes.c_void_p(a.scale_inv.data.ptr), "cublasLtMatmulDescSetAttribute")
    lt._set(setter, desc, DESC_FAST_ACCUM, ctypes.c_int8(int(fast_accum)), "cublasLtMatmulDescSetAttribute")
    if bias is not None:
        lt._set(setter, desc, lt.DESC_BIAS_POINTER, ctypes.c_void_p(bias.data.ptr), "cublasLtMatmulDescSetAttribute")
    workspace = cublas_direct.workspace(device_id)
    stream = cp.cuda.get_current_stream().ptr
    lt._check(library.cublasLtMatmul(handle, desc, lt._ONE_REF, b.data.data.ptr, a_layout, a.data.data.ptr, b_layout,
                                     lt._ZERO_REF, out.data.ptr, d_layout, out.data.ptr, d_layout,
                                     ctypes.byref(algo), workspace, cublas_direct.WORKSPACE_BYTES, stream),
              "cublasLtMatmul")
    return out


@backend.on_cuda_switch
def _forget_plans() -> None:
    _plans.clear()
