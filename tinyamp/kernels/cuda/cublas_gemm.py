"""The GEMM on a GPU: one direct cuBLAS call per product (``gemm.py`` checks and dispatches here).

``gemm`` of CuPy operands is one ``gemmEx`` / ``gemmStridedBatchedEx`` call
for every dtype, with the compute type ``gemm.compute_type`` chose
(``CUBLAS_COMPUTE_32F`` for 16-bit and float32 operands); ``gemm_bias`` is one
cuBLASLt call with the bias added in the GEMM's epilogue. cuBLAS is called
directly (``cublas_direct.py``, ``cublaslt_direct.py``), so a GEMM can be
captured in a CUDA graph. :data:`last_gpu_call` records what the last call
passed, for tests.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import backend
from ... import dtypes as dt
from ..convert import convert
from . import cublas_direct, cublaslt_direct

Array = Any  # cupy.ndarray (or the stand-in's)

# cudaDataType_t values from CUDA's library_types.h (a stable ABI). Written out
# because CuPy's runtime module does not export CUDA_R_16BF in every release.
_CUDA_DATA_TYPE = {dt.float16: 2, dt.bfloat16: 14, dt.float32: 0, dt.float64: 1}

# cuBLAS takes 32-bit sizes; folding a batch into M must stay below this.
_INT32_MAX = 2**31 - 1

last_gpu_call: dict[str, Any] = {}
"""What the most recent GPU gemm passed to the library (updated in place).

Keys: ``function`` ("gemmEx", "gemmStridedBatchedEx" or, for ``gemm_bias``, "cublasLtMatmul"),
``compute_type`` (the cublasComputeType_t int),
``compute_type_name``, ``algo``, ``a_type``/``b_type``/``c_type`` (dtype
names), ``m``/``n``/``k`` (cuBLAS's column-major sizes) and ``batch_count``.
"""


def gemm_gpu(a: Array, b: Array, out: np.dtype, trans_a: bool, trans_b: bool,
             batch: tuple[int, ...], m: int, k: int, n: int, compute_type: int) -> Array:
    """``gemm`` of CuPy operands (checked by ``gemm._check``, sizes given): one cuBLAS call, one rounding."""
    cp = backend.cupy()
    with a.device:  # allocate and pick the cuBLAS handle on the operands' GPU
        # cuBLAS writes C in the 16-bit input dtype or float32 (float32/float64 inputs: their own dtype);
        # anything else is that result plus one cast (still a single rounding).
        if a.dtype in dt.LOW_PRECISION:
            c_dtype = out if out in (a.dtype, dt.float32) else dt.float32
        else:
            c_dtype = a.dtype
        if m == 0 or n == 0 or math.prod(batch) == 0:
            return cp.empty(batch + (m, n), dtype=out)
        if k == 0:  # an empty sum; cuBLAS is not asked to define it
            return cp.zeros(batch + (m, n), dtype=out)
        # cuBLAS called directly (cublas_direct.py): CuPy's wrappers refuse every call while a stream captures.
        low = a.dtype in dt.LOW_PRECISION
        result = _cublas_gemm(cp, cublas_direct, cublas_direct.handle(a), a, b, c_dtype, trans_a, trans_b,
                              compute_type=compute_type,
                              algo=cublas_direct.CUBLAS_GEMM_DEFAULT_TENSOR_OP if low
                              else cublas_direct.CUBLAS_GEMM_DEFAULT)
        return result if result.dtype == out else result.astype(out)


def gemm_bias_gpu(a: Array, b: Array, bias: Array, out: np.dtype, trans_b: bool, m: int, _k: int, n: int) -> Array:
    """``gemm_bias`` of CuPy operands (checked by ``gemm.gemm_bias``): one cuBLASLt call, the bias in its epilogue."""
    cp = backend.cupy()
    if not backend.is_cupy_array(bias) or bias.device != a.device:
        raise ValueError(f"gemm_bias: bias must be on the operands' device {a.device}, got {bias.device}")
    with a.device:
        if m == 0 or n == 0 or _k == 0:
            return cp.empty((m, n), dtype=out) if m == 0 or n == 0 else cp.broadcast_to(bias, (m, n)).copy()
        a, b, bias = cp.ascontiguousarray(a), cp.ascontiguousarray(b), cp.ascontiguousarray(bias)
        c = cp.empty((m, n), dtype=out)
        if cublaslt_direct.matmul_bias(a, b, bias, c, trans_b):
            last_gpu_call.clear()
            last_gpu_call.update(function="cublasLtMatmul", epilogue="bias", compute_type_name="CUBLAS_COMPUTE_32F",
                                 a_type=_DTYPE_NAMES[a.dtype], b_type=_DTYPE_NAMES[b.dtype],
                                 c_type=_DTYPE_NAMES[c.dtype], m=n, n=m, k=_k)
            return c
        acc = gemm_gpu(a, b, dt.float32, False, trans_b, (), m, _k, n, cublas_direct.CUBLAS_COMPUTE_32F)
        acc += bias.astype(dt.float32)
        return convert(acc, out)


def _sizes(a: Array, b: Array, trans_a: bool, trans_b: bool) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of operands ``gemm._check`` has accepted."""
    m, k = a.shape[-2:][::-1] if trans_a else a.shape[-2:]
    n = b.shape[-2] if trans_b else b.shape[-1]
    batch = () if a.ndim == 2 and b.ndim == 2 else tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return batch, int(m), int(k), int(n)


def _row_major(xp: Any, x: Array, trans: bool, batch: tuple[int, ...]
               ) -> tuple[Array, bool, int]:
    """Lay one operand out for cuBLAS: (array, trans, batch stride in elements).

    The array comes back C-contiguous, either 2-D (one matrix shared by the
    whole batch: stride 0, nothing materialised) or 3-D ``(L, rows, cols)``.
    A transposed view of a C-contiguous array is used as is, with its trans
    flag flipped, so ``w.T`` never costs a copy.
    """
    rows, cols = x.shape[-2:]
    n_batch = math.prod(batch)
    own = math.prod(x.shape[:-2])
    if own == 1:
        x, stride = (x if x.ndim == 2 else x.reshape(rows, cols)), 0
    elif own == n_batch:
        # Broadcasts to the batch with the same element count, so only
        # leading ones differ: the same matrices in the same order.
        x, stride = x.reshape(n_batch, rows, cols), rows * cols
    else:
        # Partly broadcast (e.g. (2,1,M,K) against (5,K,N)): no single batch
        # stride describes it, so materialise the broadcast copy.
        full = xp.ascontiguousarray(xp.broadcast_to(x, batch + (rows, cols)))
        x, stride = full.reshape(n_batch, rows, cols), rows * cols
    if not x.flags.c_contiguous:
        flipped = x.swapaxes(-1, -2)
        if flipped.flags.c_contiguous:
            x, trans = flipped, not trans
        else:
            x = xp.ascontiguousarray(x)
    return x, trans, stride


# alpha/beta are host scalars of the compute type's scale type (float32, or float64 for CUBLAS_COMPUTE_64F;
# the handle stays in host pointer mode), read before the call returns, so constant arrays serve every call.
# Their addresses are taken once (the arrays live as long as the module).
_ALPHA = np.ones((), dtype=np.float32)
_BETA = np.zeros((), dtype=np.float32)
_ALPHA64 = np.ones((), dtype=np.float64)
_BETA64 = np.zeros((), dtype=np.float64)
_SCALARS = (_ALPHA.ctypes.data, _BETA.ctypes.data)
_SCALARS64 = (_ALPHA64.ctypes.data, _BETA64.ctypes.data)
# cublasComputeType_t values (cublas_api.h, a stable ABI) -> their names, for last_gpu_call.
_COMPUTE_TYPE_NAMES = {68: "CUBLAS_COMPUTE_32F", 64: "CUBLAS_COMPUTE_16F", 70: "CUBLAS_COMPUTE_64F",
                       77: "CUBLAS_COMPUTE_32F_FAST_TF32"}
# dtype -> its name (numpy's dtype.name is computed at every read).
_DTYPE_NAMES = {np.dtype(d): np.dtype(d).name for d in _CUDA_DATA_TYPE}


def _cublas_gemm(xp: Any, cublas: Any, handle: int, a: Array, b: Array,
                 c_dtype: np.dtype, trans_a: bool, trans_b: bool, *,
                 compute_type: int, algo: int) -> Array:
    """One cuBLAS call computing ``op(a) @ op(b)`` into a new ``c_dtype`` array.

    ``xp`` and ``cublas`` are passed in (cupy and its cuBLAS wrapper in real
    use) so the argument plumbing can be checked against a host stand-in.

    cuBLAS is column-major. A C-contiguous (r, c) array is, to cuBLAS, the
    column-major c x r matrix holding its transpose. So the row-major
    ``C = op(a) @ op(b)`` is computed as the column-major
    ``C^T = op(b)^T @ op(a)^T``: b goes first, m=N and n=M, each operand
    keeps its own trans flag, and every leading dimension is the stored row
    length.
    """
    batch, m, k, n = _sizes(a, b, trans_a, trans_b)
    n_batch = math.prod(batch)
    a, trans_a, stride_a = _row_major(xp, a, trans_a, batch)
    b, trans_b, stride_b = _row_major(xp, b, trans_b, batch)
    out = xp.empty(batch + (m, n), dtype=c_dtype)

    rows_c = m
    if n_batch > 1 and stride_b == 0 and not trans_a and n_batch * m <= _INT32_MAX:
        # A shared, untransposed b (x @ W for a batch of x): the batch folds
        # into M and the whole thing is one plain GEMM.
        a, stride_a, rows_c, n_batch = a.reshape(n_batch * m, k), 0, n_batch * m, 1

    op_n, op_t = cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T
    # alpha and beta in the compute type's scale type: float64 for CUBLAS_COMPUTE_64F, else float32.
    alpha, beta = _SCALARS64 if compute_type == cublas_direct.CUBLAS_COMPUTE_64F else _SCALARS
    c_dtype = np.dtype(c_dtype)
    in_type, c_type = _CUDA_DATA_TYPE[a.dtype], _CUDA_DATA_TYPE[c_dtype]
    args_b = (b.data.ptr, in_type, b.shape[-1])
    args_a = (a.data.ptr, in_type, a.shape[-1])
    if n_batch == 1:
        function = "gemmEx"
        cublas.gemmEx(handle, op_t if trans_b else op_n, op_t if trans_a else op_n,
                      n, rows_c, k, alpha, *args_b, *args_a,
                      beta, out.data.ptr, c_type, n, compute_type, algo)
    else:
        function = "gemmStridedBatchedEx"
        cublas.gemmStridedBatchedEx(
            handle, op_t if trans_b else op_n, op_t if trans_a else op_n,
            n, m, k, alpha, *args_b, stride_b, *args_a, stride_a,
            beta, out.data.ptr, c_type, n, m * n,
            n_batch, compute_type, algo)

    last_gpu_call.clear()
    last_gpu_call.update(function=function, compute_type=compute_type,
                         compute_type_name=_COMPUTE_TYPE_NAMES.get(compute_type), algo=algo,
                         a_type=_DTYPE_NAMES[a.dtype], b_type=_DTYPE_NAMES[b.dtype],
                         c_type=_DTYPE_NAMES[c_dtype], m=n, n=rows_c, k=k,
                         batch_count=n_batch)
    return out
