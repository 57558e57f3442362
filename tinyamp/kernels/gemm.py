"""GEMM with float32 accumulation: the one routine every LOWER contraction reaches.

matmul, linear, bmm and conv2d (through im2col) all end here when they run in
float16 or bfloat16. The promise this module keeps, on every device, is the one
tensor cores keep: products of 16-bit inputs are summed in (at least) float32
and the sum is rounded **once** to the output dtype.

- :func:`gemm` - the routine. Works on raw arrays (``numpy.ndarray`` or
  ``cupy.ndarray``), never Tensors.

  * CPU: upcast each operand to float32 once, float32 BLAS (``np.matmul``), one
    rounding. NumPy's own float16 matmul has no BLAS path and runs hundreds of
    times slower, so it is never used.
  * GPU: an explicit cuBLAS ``gemmEx`` / ``gemmStridedBatchedEx`` call for
    every dtype, the compute type chosen in one place (:func:`compute_type`:
    ``CUBLAS_COMPUTE_32F`` for 16-bit and float32 operands) and in plain
    sight; cuBLAS is called directly (``cublas_direct.py``), so a GEMM can be
    captured in a CUDA graph. :data:`last_gpu_call` records what the last
    call passed, for tests.

- :func:`gemm_bias` - ``op(a) @ op(b) + bias`` for 16-bit operands, the bias
  added to the float32 accumulator and the sum rounded once. On a GPU the bias
  rows are written into C first and one cuBLAS call with ``beta = 1`` adds the
  product to them: the 16-bit output is written once, and no float32 result
  makes a round trip through memory (the first layer's largest array).

- float32 operands follow ``ta.set_float32_matmul_precision`` /
  ``ta.backends.cuda.matmul.allow_tf32`` (:func:`float32_compute`): when TF32 is
  allowed a GPU gets cuBLAS's ``CUBLAS_COMPUTE_32F_FAST_TF32`` explicitly (CuPy
  reads ``CUPY_TF32`` only when it starts) and the CPU rounds each operand to
  TF32 (:func:`round_to_tf32`) before its float32 BLAS: the numbers tensor
  cores multiply, summed in float32.

- :func:`gemm_fp16_accumulate` - a TEACHING variant that accumulates in
  float16 and shows why nobody should: a length-4096 dot product of ones stops
  growing at 2048. Never the default, never reached by an op.

CuPy is only reached through :mod:`tinyamp.backend`, so this module imports and
runs on machines without it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from .cpu import widened
from .cuda import cublas_direct, cublaslt_direct, cuda_vector
from .convert import convert

Array = Any  # numpy.ndarray or cupy.ndarray
DTypeLike = Any  # anything numpy.dtype() accepts

SUPPORTED = dt.FLOATING  # float16, bfloat16, float32, float64

# cudaDataType_t values from CUDA's library_types.h (a stable ABI). Written out
# because CuPy's runtime module does not export CUDA_R_16BF in every release.
_CUDA_DATA_TYPE = {dt.float16: 2, dt.bfloat16: 14, dt.float32: 0, dt.float64: 1}

# cuBLAS takes 32-bit sizes; folding a batch into M must stay below this.
_INT32_MAX = 2**31 - 1

last_gpu_call: dict[str, Any] = {}
"""What the most recent GPU gemm passed to the library (updated in place).

Keys: ``function`` ("gemmEx" or "gemmStridedBatchedEx"),
``compute_type`` (the cublasComputeType_t int),
``compute_type_name``, ``algo``, ``a_type``/``b_type``/``c_type`` (dtype
names), ``m``/``n``/``k`` (cuBLAS's column-major sizes) and ``batch_count``.
"""


# --------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------

def _describe(a: Array, b: Array, trans_a: bool, trans_b: bool) -> str:
    flags = "".join(
        f", {name}=True" for name, on in (("trans_a", trans_a), ("trans_b", trans_b)) if on
    )
    return (f"a {tuple(a.shape)} {a.dtype.name}, "
            f"b {tuple(b.shape)} {b.dtype.name}{flags}")


def _check(name: str, a: Array, b: Array, out_dtype: DTypeLike,
           trans_a: bool, trans_b: bool) -> tuple[tuple[int, ...], int, int, int, np.dtype]:
    """Validate operands; return (batch shape, M, K, N, output dtype).

    Every message starts with the function's name and shows both operands, so
    an error raised deep inside a backward pass still says which GEMM failed.
    """
    for arr in (a, b):
        if not (isinstance(arr, np.ndarray) or backend.is_cupy_array(arr)):
            raise TypeError(f"{name}: expected numpy or cupy arrays, got {type(arr).__name__}")
    # The description is built only when raising: _check runs on every GEMM.
    if backend.is_cupy_array(a) != backend.is_cupy_array(b):
        raise ValueError(f"{name}: operands live on different devices "
                         f"({backend.device_of(a)} and {backend.device_of(b)}): {_describe(a, b, trans_a, trans_b)}")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{name}: operands must be at least 2-D (promote vectors "
                         f"before calling): {_describe(a, b, trans_a, trans_b)}")
    if a.dtype != b.dtype:
        raise ValueError(f"{name}: dtype mismatch, both operands must share one dtype: "
                         f"{_describe(a, b, trans_a, trans_b)}")
    if a.dtype not in SUPPORTED:
        raise ValueError(f"{name}: unsupported dtype {a.dtype.name} (expected float16, "
                         f"bfloat16, float32 or float64): {_describe(a, b, trans_a, trans_b)}")
    out = a.dtype if out_dtype is None else np.dtype(out_dtype)
    if out not in SUPPORTED:
        raise ValueError(f"{name}: unsupported out_dtype {out.name} (expected float16, "
                         f"bfloat16, float32 or float64): {_describe(a, b, trans_a, trans_b)}")
    m, k = a.shape[-2:][::-1] if trans_a else a.shape[-2:]
    k_b, n = b.shape[-2:][::-1] if trans_b else b.shape[-2:]
    if k != k_b:
        raise ValueError(f"{name}: inner dimensions differ ({k} vs {k_b}); op(a) is "
                         f"{m}x{k} and op(b) is {k_b}x{n}: {_describe(a, b, trans_a, trans_b)}")
    if a.ndim == 2 and b.ndim == 2:
        return (), int(m), int(k), int(n), out  # plain matrices (every linear layer): no batch to broadcast
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise ValueError(f"{name}: batch dimensions {tuple(a.shape[:-2])} and "
                         f"{tuple(b.shape[:-2])} do not broadcast: {_describe(a, b, trans_a, trans_b)}") from None
    return batch, int(m), int(k), int(n), out


# --------------------------------------------------------------------------
# float32 operands: float32 or TF32
# --------------------------------------------------------------------------


def round_to_tf32(x: Array) -> Array:
    """float32 ``x`` with its mantissa rounded to TF32's 10 bits (round to nearest, ties to even); NaN kept."""
    xp = backend.array_module(x)
    bits = xp.ascontiguousarray(x, dtype=dt.float32).view(xp.uint32)
    odd = (bits >> 13) & 1
    rounded = ((bits + (0x0FFF + odd)) & 0xFFFFE000).view(xp.float32)
    return xp.where(xp.isnan(x), x, rounded)


def float32_compute() -> str:
    """How a float32 GEMM runs now: "tf32" when ``set_float32_matmul_precision`` allows it, else "float32".

    An open precision trace is told (the op running the GEMM is listed with TF32).
    """
    if not precision.tf32_matmul():
        return "float32"
    tracer = precision.current_trace()
    if tracer is not None:
        tracer.note_tf32()
    return "tf32"


# --------------------------------------------------------------------------
# gemm
# --------------------------------------------------------------------------

def gemm(a: Array, b: Array, out_dtype: DTypeLike = None, *,
         trans_a: bool = False, trans_b: bool = False) -> Array:
    """``op(a) @ op(b)`` with at least float32 accumulation and one rounding.

    Args:
        a: ``(..., M, K)`` array, or ``(..., K, M)`` with ``trans_a=True``.
        b: ``(..., K, N)`` array, or ``(..., N, K)`` with ``trans_b=True``.
            Both at least 2-D (callers promote vectors), same dtype (float16,
            bfloat16, float32 or float64), same device. Batch dimensions
            broadcast as in ``numpy.matmul``.
        out_dtype: dtype of the result; default the input dtype. For 16-bit
            inputs ``float32`` returns the float32 accumulator unrounded, for
            callers that apply an epilogue (bias, activation) in float32
            before their own single downcast.
        trans_a, trans_b: use the transpose of the last two axes, without a
            copy (a backward pass computes ``g @ w.T`` as
            ``gemm(g, w, trans_b=True)``).

    Returns:
        Array of shape ``batch + (M, N)`` and dtype ``out_dtype``, on the
        operands' device.

    Raises:
        ValueError: dtype or device mismatch, an inner-dimension mismatch,
            batch dimensions that do not broadcast, or an unsupported dtype;
            the message names ``gemm`` and both shapes and dtypes.
    """
    batch, m, k, n, out = _check("gemm", a, b, out_dtype, trans_a, trans_b)
    if backend.is_cupy_array(a):
        return _gemm_gpu(a, b, out, trans_a, trans_b, batch, m, k, n)
    return _gemm_cpu(a, b, out, trans_a, trans_b)


def gemm_bias(a: Array, b: Array, bias: Array, *, trans_b: bool = False) -> Array:
    """``round(float32(op(a) @ op(b)) + float32(bias))``: 16-bit 2-D operands, ``bias`` (N,) of their dtype.

    The float32 accumulator plus the widened bias, rounded once to the
    operands' dtype. On a GPU one cuBLASLt call computes it, the bias added in
    the GEMM's epilogue (``cublaslt_direct.py``); should cuBLASLt offer no
    algorithm, a float32 GEMM, the bias added and one cast do the same.
    """
    _batch, m, _k, n, out = _check("gemm_bias", a, b, None, False, trans_b)
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in dt.LOW_PRECISION:
        raise ValueError(f"gemm_bias: needs 2-D float16/bfloat16 operands, got {_describe(a, b, False, trans_b)}")
    if bias.shape != (n,) or bias.dtype != a.dtype:
        raise ValueError(f"gemm_bias: bias must be ({n},) {a.dtype.name}, got {tuple(bias.shape)} {bias.dtype.name}"
                         f" for {_describe(a, b, False, trans_b)}")
    if not backend.is_cupy_array(a):
        acc = _gemm_cpu(a, b, dt.float32, False, trans_b)
        acc += convert(bias, dt.float32)
        return convert(acc, out)
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
                                 a_type=a.dtype.name, b_type=b.dtype.name, c_type=c.dtype.name, m=n, n=m, k=_k)
            return c
        acc = _gemm_gpu(a, b, dt.float32, False, trans_b, (), m, _k, n)
        acc += bias.astype(dt.float32)
        return convert(acc, out)


def _gemm_cpu(a: np.ndarray, b: np.ndarray, out: np.dtype, trans_a: bool, trans_b: bool) -> np.ndarray:
    # Emulate the GPU numerics: exact upcast, float32 BLAS, one rounding.
    # The float16 -> float32 cast is a scalar loop in NumPy,
    # so each operand is converted exactly once (and only once when a is b,
    # as in x @ x.T), and transposes stay views that BLAS reads directly.
    # convert() is astype, bit for bit, through the fast CPU kernels (convert.py).
    # An operand just rounded from float32 (a Cast node's output) comes with its widening (cpu/widened.py).
    acc = dt.opmath_dtype(a.dtype)  # float32 for 16-bit inputs; others keep their own
    a_acc = a if a.dtype == acc else (widened.take(a) if a.ndim == 2 else None)
    if a_acc is None:
        a_acc = convert(a, acc)
    b_acc = a_acc if b is a else (b if b.dtype == acc else (widened.take(b) if b.ndim == 2 else None))
    if b_acc is None:
        b_acc = convert(b, acc)
    if a.dtype == dt.float32 and float32_compute() == "tf32":  # what TF32 tensor cores multiply
        a_acc, b_acc = round_to_tf32(a_acc), (round_to_tf32(b_acc) if b is not a else None)
        b_acc = a_acc if b_acc is None else b_acc
    if trans_a:
        a_acc = a_acc.swapaxes(-1, -2)
    if trans_b:
        b_acc = b_acc.swapaxes(-1, -2)
    result = np.matmul(a_acc, b_acc)
    if result.dtype == out:
        return result
    low = widened.round_in_place(result, out)  # in a backward replay: a weight gradient, widened next
    return convert(result, out) if low is None else low


def compute_type(dtype: np.dtype) -> int:
    """The cublasComputeType_t of a GEMM on ``dtype`` operands: the one place it is chosen.

    16-bit operands accumulate in float32 (``CUBLAS_COMPUTE_32F``); float32
    operands too, with TF32 products when :func:`float32_compute` allows them
    (``CUBLAS_COMPUTE_32F_FAST_TF32``); float64 in float64.
    """
    if dtype == dt.float64:
        return cublas_direct.CUBLAS_COMPUTE_64F
    if dtype == dt.float32 and float32_compute() == "tf32":
        return cublas_direct.CUBLAS_COMPUTE_32F_FAST_TF32
    return cublas_direct.CUBLAS_COMPUTE_32F


def _gemm_gpu(a: Array, b: Array, out: np.dtype, trans_a: bool, trans_b: bool,
              batch: tuple[int, ...], m: int, k: int, n: int) -> Array:
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
                              compute_type=compute_type(a.dtype),
                              algo=cublas_direct.CUBLAS_GEMM_DEFAULT_TENSOR_OP if low
                              else cublas_direct.CUBLAS_GEMM_DEFAULT)
        return result if result.dtype == out else result.astype(out)


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
        x, stride = x.reshape(rows, cols), 0
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
_ALPHA = np.ones((), dtype=np.float32)
_BETA = np.zeros((), dtype=np.float32)
_BETA_ONE = np.ones((), dtype=np.float32)  # C += AB: the product added to what C holds
_ALPHA64 = np.ones((), dtype=np.float64)
_BETA64 = np.zeros((), dtype=np.float64)
_BETA64_ONE = np.ones((), dtype=np.float64)
_COMPUTE_TYPE_NAMES = {"CUBLAS_COMPUTE_32F": 68, "CUBLAS_COMPUTE_16F": 64, "CUBLAS_COMPUTE_64F": 70,
                       "CUBLAS_COMPUTE_32F_FAST_TF32": 77}


def _compute_type_name(cublas: Any, compute_type: int) -> "str | None":
    for name, value in _COMPUTE_TYPE_NAMES.items():
        if compute_type == getattr(cublas, name, value):
            return name
    return None


def _cublas_gemm(xp: Any, cublas: Any, handle: int, a: Array, b: Array,
                 c_dtype: np.dtype, trans_a: bool, trans_b: bool, *,
                 compute_type: int, algo: int, accumulate_into: "Array | None" = None) -> Array:
    """One cuBLAS call computing ``op(a) @ op(b)`` into a new ``c_dtype`` array, or adding it to
    ``accumulate_into`` (C-contiguous, the result's shape and ``c_dtype``: beta = 1) and returning that.

    ``xp`` and ``cublas`` are passed in (cupy and its cuBLAS wrapper in real
    use) so the argument plumbing can be checked against a host stand-in.

    cuBLAS is column-major. A C-contiguous (r, c) array is, to cuBLAS, the
    column-major c x r matrix holding its transpose. So the row-major
    ``C = op(a) @ op(b)`` is computed as the column-major
    ``C^T = op(b)^T @ op(a)^T``: b goes first, m=N and n=M, each operand
    keeps its own trans flag, and every leading dimension is the stored row
    length.
    """
    batch, m, k, n, _ = _check("gemm", a, b, None, trans_a, trans_b)
    n_batch = math.prod(batch)
    a, trans_a, stride_a = _row_major(xp, a, trans_a, batch)
    b, trans_b, stride_b = _row_major(xp, b, trans_b, batch)
    if accumulate_into is None:
        out, beta = xp.empty(batch + (m, n), dtype=c_dtype), _BETA
    else:
        out, beta = accumulate_into, _BETA_ONE
        if out.shape != batch + (m, n) or out.dtype != c_dtype or not out.flags.c_contiguous:
            raise ValueError(f"gemm: accumulate_into must be a C-contiguous {np.dtype(c_dtype).name} array of "
                             f"shape {batch + (m, n)}, got {out.dtype.name} {tuple(out.shape)}")

    rows_c = m
    if n_batch > 1 and stride_b == 0 and not trans_a and n_batch * m <= _INT32_MAX:
        # A shared, untransposed b (x @ W for a batch of x): the batch folds
        # into M and the whole thing is one plain GEMM.
        a, stride_a, rows_c, n_batch = a.reshape(n_batch * m, k), 0, n_batch * m, 1

    op_n, op_t = cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T
    if compute_type == getattr(cublas, "CUBLAS_COMPUTE_64F", 70):  # float64 scale type
        alpha, beta = _ALPHA64, (_BETA64 if beta is _BETA else _BETA64_ONE)
    else:
        alpha = _ALPHA
    in_type, c_type = _CUDA_DATA_TYPE[a.dtype], _CUDA_DATA_TYPE[np.dtype(c_dtype)]
    args_b = (b.data.ptr, in_type, b.shape[-1])
    args_a = (a.data.ptr, in_type, a.shape[-1])
    if n_batch == 1:
        function = "gemmEx"
        cublas.gemmEx(handle, op_t if trans_b else op_n, op_t if trans_a else op_n,
                      n, rows_c, k, alpha.ctypes.data, *args_b, *args_a,
                      beta.ctypes.data, out.data.ptr, c_type, n, compute_type, algo)
    else:
        function = "gemmStridedBatchedEx"
        cublas.gemmStridedBatchedEx(
            handle, op_t if trans_b else op_n, op_t if trans_a else op_n,
            n, m, k, alpha.ctypes.data, *args_b, stride_b, *args_a, stride_a,
            beta.ctypes.data, out.data.ptr, c_type, n, m * n,
            n_batch, compute_type, algo)

    last_gpu_call.clear()
    last_gpu_call.update(function=function, compute_type=compute_type,
                         compute_type_name=_compute_type_name(cublas, compute_type), algo=algo,
                         a_type=a.dtype.name, b_type=b.dtype.name,
                         c_type=np.dtype(c_dtype).name, m=n, n=rows_c, k=k,
                         batch_count=n_batch)
    return out


# --------------------------------------------------------------------------
# The teaching variant
# --------------------------------------------------------------------------

def gemm_fp16_accumulate(a: Array, b: Array) -> Array:
    """TEACHING ONLY: ``a @ b`` with a float16 running sum. Never the default.

    Shows what float32 accumulation protects against. The running sum is
    rounded to float16 after every addition (each product of two float16
    numbers is exact, so this is the only rounding). Once the sum reaches
    2048, float16's spacing is 2 and adding 1 rounds back to 2048: a length-
    4096 dot product of ones returns 2048, where :func:`gemm` returns 4096.

    Same shapes and broadcasting as :func:`gemm` without the trans flags;
    both operands must be float16. It loops over K in Python (vectorised over
    the batch, M and N), so it is slow by design. On the GPU it runs the same
    emulation with CuPy rather than cuBLAS's ``CUBLAS_COMPUTE_16F``: tensor
    cores add short blocks of products in wider precision before they round,
    so the hardware's result depends on the chip, while this one does not.
    """
    batch, m, k, n, _ = _check("gemm_fp16_accumulate", a, b, None, False, False)
    if a.dtype != dt.float16:
        raise ValueError("gemm_fp16_accumulate: float16 operands only: "
                         + _describe(a, b, False, False))
    xp = backend.array_module(a)
    # float64 holds a float16 sum plus an exact float16 product without error
    # for any realistic exponent gap, so astype(float16) is the one rounding.
    a64, b64 = a.astype(dt.float64), b.astype(dt.float64)
    total = xp.zeros(batch + (m, n), dtype=dt.float64)
    for i in range(k):
        total = (total + a64[..., :, i:i + 1] * b64[..., i:i + 1, :])
        total = total.astype(dt.float16).astype(dt.float64)
    return total.astype(dt.float16)
