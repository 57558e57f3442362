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
    every dtype (``cuda/cublas_gemm.py``), the compute type chosen here, in one
    place and in plain sight (:func:`compute_type`: ``CUBLAS_COMPUTE_32F`` for
    16-bit and float32 operands).

- :func:`gemm_bias` - ``op(a) @ op(b) + bias``, linear's forward on every
  device: for 16-bit operands the bias added to the float32 accumulator and the
  sum rounded once. On a GPU one cuBLASLt call adds the bias in the GEMM's
  epilogue (the 16-bit output is written once, and no float32 result makes a
  round trip through memory); on the CPU one numba pass after the float32 BLAS.

- :func:`gemm_bias_gelu` / :func:`gemm_dgelu` - a linear layer followed by a
  tanh GELU, forward (the output and the pre-activation) and the gradient at
  the GELU's input from the next GEMM (with the bias gradient). On a GPU with
  ``GELU_EPILOGUE`` on, each is one cuBLASLt call with its GELU_AUX_BIAS /
  DGELU_BGRAD epilogue (the activation applied to the float32 accumulator);
  otherwise the GEMM and the GELU kernels, one after the other.

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

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from .convert import convert
from .cpu import cpu_numba, cpu_path
from .cuda import cublas_direct, cublas_gemm, cublaslt_direct
from .gelu import gelu as _gelu, gelu_backward as _gelu_backward

Array = Any  # numpy.ndarray or cupy.ndarray
DTypeLike = Any  # anything numpy.dtype() accepts

SUPPORTED = dt.FLOATING  # float16, bfloat16, float32, float64
# cuBLASLt's GELU epilogues (a tanh GELU folded into its GEMM, forward and backward): off, because "where
# measured faster" needs a GPU and issue 28's session had none; the GEMM + GELU kernels run instead.
GELU_EPILOGUE = False


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
    gpu_a, gpu_b = backend.is_cupy_array(a), backend.is_cupy_array(b)
    for arr, gpu in ((a, gpu_a), (b, gpu_b)):
        if not (gpu or isinstance(arr, np.ndarray)):
            raise TypeError(f"{name}: expected numpy or cupy arrays, got {type(arr).__name__}")
    # The description is built only when raising: _check runs on every GEMM.
    if gpu_a != gpu_b:
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
        return cublas_gemm.gemm_gpu(a, b, out, trans_a, trans_b, batch, m, k, n, compute_type(a.dtype))
    return _gemm_cpu(a, b, out, trans_a, trans_b)


def gemm_bias(a: Array, b: Array, bias: Array, *, trans_b: bool = False) -> Array:
    """``op(a) @ op(b) + bias`` of 2-D operands, ``bias`` (N,) of their dtype: linear's forward on every device.

    16-bit operands: ``round(float32(op(a) @ op(b)) + float32(bias))``, the
    float32 accumulator plus the widened bias, rounded once to the operands'
    dtype. On a GPU one cuBLASLt call computes it, the bias added in the GEMM's
    epilogue (``cuda/cublas_gemm.py``; should cuBLASLt offer no algorithm, a
    float32 GEMM, the bias added and one cast do the same); on the CPU the
    float32 BLAS product, then one numba pass adds the bias and rounds
    (``cpu_numba``'s ``bias_round``; without numba the add and ``convert``).
    float32/float64 operands: the GEMM, the bias added in place into its result.
    """
    _batch, m, k, n, out = _check("gemm_bias", a, b, None, False, trans_b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm_bias: needs 2-D operands, got {_describe(a, b, False, trans_b)}")
    if bias.shape != (n,) or bias.dtype != a.dtype:
        raise ValueError(f"gemm_bias: bias must be ({n},) {a.dtype.name}, got {tuple(bias.shape)} {bias.dtype.name}"
                         f" for {_describe(a, b, False, trans_b)}")
    gpu = backend.is_cupy_array(a)
    if a.dtype not in dt.LOW_PRECISION:
        y = (cublas_gemm.gemm_gpu(a, b, out, False, trans_b, (), m, k, n, compute_type(a.dtype)) if gpu
             else _gemm_cpu(a, b, out, False, trans_b))
        y += bias  # in place on the GEMM's fresh result: no second output buffer
        return y
    if gpu:
        return cublas_gemm.gemm_bias_gpu(a, b, bias, out, trans_b, m, k, n)
    acc = _gemm_cpu(a, b, dt.float32, False, trans_b)
    bias32 = convert(bias, dt.float32)
    if cpu_path.LOADED and cpu_path.BACKEND == "numba":
        y = np.empty(acc.shape, out)
        cpu_numba.KERNELS[_BIAS_ROUND[out]](acc, bias32, y.view(np.uint16))
        return y
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf in the sum: as the numba pass, silently
        acc += bias32
    return convert(acc, out)


_BIAS_ROUND = {dt.float16: "bias_round_f16", dt.bfloat16: "bias_round_bf16"}  # the numba epilogue by output dtype


def _check_gelu(name: str, a: Array, b: Array, vector: Array, trans_b: bool) -> int:
    """N after gemm_bias's checks of 16-bit 2-D operands and an (N,) vector of their dtype."""
    _batch, _m, _k, n, _ = _check(name, a, b, None, False, trans_b)
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in dt.LOW_PRECISION:
        raise ValueError(f"{name}: needs 2-D float16/bfloat16 operands, got {_describe(a, b, False, trans_b)}")
    if vector.shape != (n,) or vector.dtype != a.dtype:
        raise ValueError(f"{name}: bias must be ({n},) {a.dtype.name}, got {tuple(vector.shape)} {vector.dtype.name}"
                         f" for {_describe(a, b, False, trans_b)}")
    return n


def _epilogue_takes(*arrays: Array) -> bool:
    """Whether cuBLASLt's GELU epilogues may run on these: the switch on, C-contiguous GPU arrays, N % 8 == 0."""
    return (GELU_EPILOGUE and all(backend.is_cupy_array(x) and x.flags.c_contiguous for x in arrays)
            and arrays[-1].shape[-1] % 8 == 0)


def gemm_bias_gelu(a: Array, b: Array, bias: Array, *, trans_b: bool = False) -> tuple[Array, Array]:
    """``(gelu_tanh(z), z)``, ``z = op(a) @ op(b) + bias``: 16-bit 2-D operands, the float32 accumulator.

    With cuBLASLt's GELU_AUX_BIAS epilogue (``GELU_EPILOGUE``, a GPU) one call
    writes both: ``z`` rounded once and GELU of the float32 ``z`` rounded once.
    Otherwise :func:`gemm_bias` and the tanh GELU kernel of the rounded ``z``
    (one more rounding between them: the two differ in the last bit).
    """
    n = _check_gelu("gemm_bias_gelu", a, b, bias, trans_b)
    if _epilogue_takes(a, b, bias, bias):
        cp = backend.cupy()
        with a.device:
            y, z = cp.empty((a.shape[0], n), dtype=a.dtype), cp.empty((a.shape[0], n), dtype=a.dtype)
            if cublaslt_direct.matmul_epilogue(a, b, bias, y, trans_b, "gelu_aux_bias", aux=z):
                return y, z
    z = gemm_bias(a, b, bias, trans_b=trans_b)
    return _gelu(z, "tanh"), z


def gemm_dgelu(g: Array, b: Array, z: Array, *, trans_b: bool = False) -> tuple[Array, Array]:
    """``(dz, db)``: ``dz = (g @ op(b)) * gelu_tanh'(z)``, the gradient at a tanh GELU's input ``z`` from the
    next layer's output gradient ``g``, and ``db`` its column sums (that layer's bias gradient), 16-bit.

    With cuBLASLt's DGELU_BGRAD epilogue (``GELU_EPILOGUE``, a GPU) one call
    writes both, from the float32 product; otherwise the GEMM (rounded), the
    GELU backward kernel and the column sum.
    """
    _batch, m, _k, n, _ = _check("gemm_dgelu", g, b, None, False, trans_b)
    if g.ndim != 2 or b.ndim != 2 or g.dtype not in dt.LOW_PRECISION or z.shape != (m, n) or z.dtype != g.dtype:
        raise ValueError(f"gemm_dgelu: needs 2-D float16/bfloat16 operands and z ({m}, {n}) of their dtype, got "
                         f"z {tuple(z.shape)} {z.dtype.name} for {_describe(g, b, False, trans_b)}")
    if _epilogue_takes(g, b, z):
        cp = backend.cupy()
        with g.device:
            dz, db = cp.empty(z.shape, dtype=z.dtype), cp.empty((n,), dtype=z.dtype)
            if cublaslt_direct.matmul_epilogue(g, b, db, dz, trans_b, "dgelu_bgrad", aux=z):
                return dz, db
    dz = _gelu_backward(gemm(g, b, trans_b=trans_b), z, "tanh")
    xp = backend.array_module(dz)
    return dz, dz.sum(axis=0, dtype=xp.float32).astype(dz.dtype)


def _gemm_cpu(a: np.ndarray, b: np.ndarray, out: np.dtype, trans_a: bool, trans_b: bool) -> np.ndarray:
    # Emulate the GPU numerics: exact upcast, float32 BLAS, one rounding.
    # The float16 -> float32 cast is a scalar loop in NumPy,
    # so each operand is converted exactly once (and only once when a is b,
    # as in x @ x.T), and transposes stay views that BLAS reads directly.
    # convert() is astype, bit for bit, through the fast CPU kernels (convert.py).
    acc = dt.opmath_dtype(a.dtype)  # float32 for 16-bit inputs; others keep their own
    a_acc = a if a.dtype == acc else convert(a, acc)
    b_acc = a_acc if b is a else (b if b.dtype == acc else convert(b, acc))
    if a.dtype == dt.float32 and float32_compute() == "tf32":  # what TF32 tensor cores multiply
        a_acc, b_acc = round_to_tf32(a_acc), (round_to_tf32(b_acc) if b is not a else None)
        b_acc = a_acc if b_acc is None else b_acc
    if trans_a:
        a_acc = a_acc.swapaxes(-1, -2)
    if trans_b:
        b_acc = b_acc.swapaxes(-1, -2)
    result = np.matmul(a_acc, b_acc)
    return result if result.dtype == out else convert(result, out)


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
