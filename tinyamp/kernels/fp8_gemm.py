"""The fp8 GEMM: ``op(a) @ op(b)`` of two :class:`~tinyamp.kernels.fp8_quantize.Fp8Array` operands.

What it computes, on every device: the exact products of the fp8 values,
summed in float32, scaled by ``scale_inv(a) * scale_inv(b)`` after the sum
(per-tensor scales, as cuBLASLt's A/B scale pointers do) or with each block's
power-of-two scale applied to its operand first (exact), plus an optional
float32 bias, rounded once to the output dtype.

- CPU: the codes decoded to float32 (exact: a 256-entry table), float32 BLAS.
  The accumulator can instead follow a model of Hopper's fp8 tensor cores
  (``ta.backends.fp8.accumulate``, per-tensor operands): ``"hopper_fast"``
  (every k=32 step aligns its 32 products and the running sum to the largest
  exponent, truncates each to 13 fractional bits, adds them exactly and
  truncates the sum to 13 mantissa bits: cuBLASLt's FAST_ACCUM chain) or
  ``"promote_128"`` (the same, with the partial sum added into a float32
  accumulator every 128 elements and restarted: DeepSeek-V3's fix, TE's
  split accumulator). Block-scaled operands always sum in float32 here.
- GPU: cuBLASLt's fp8 GEMM where the device and the operands allow it
  (``cuda/cublaslt_fp8.py``: compute capability 8.9+, per-tensor scales, E4M3
  or E5M2 but not both E5M2, the TN layout (a transposed operand is copied
  once, kept with its Fp8Array), K and N multiples of 16; FAST_ACCUM for
  ``"hopper_fast"``, the split accumulator otherwise); anywhere else the
  operands are decoded exactly into bfloat16 (every E4M3/E5M2 value times a
  power of two is one) and multiplied by the 16-bit GEMM with float32
  accumulation.

Block scales must lie along the reduction dimension: an operand reduced over
its rows uses its column-wise copy (``fp8_quantize.transpose_rows``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from . import fp8
from . import fp8_quantize as fq
from .convert import convert
from .cuda import cublaslt_fp8
from .gemm import gemm

Array = Any
MODELS = ("fp32", "hopper_fast", "promote_128")
STEP = 32          # products per tensor-core step (k=32 of an fp8 WGMMA)
FRACTION_BITS = 13  # what Hopper's fp8 adder keeps of each aligned term, and of its result
PROMOTE_EVERY = 4  # steps per promotion into float32 (128 elements)


def _describe(a: fq.Fp8Array, b: fq.Fp8Array, trans_a: bool, trans_b: bool) -> str:
    return (f"a {list(a.shape)} {a.fmt.name} {a.layout}{', trans_a' if trans_a else ''}, "
            f"b {list(b.shape)} {b.fmt.name} {b.layout}{', trans_b' if trans_b else ''}")


def _reduced_last(q: fq.Fp8Array, reduce_last: bool) -> "tuple[fq.Fp8Array, bool]":
    """(the copy of ``q`` whose blocks lie along the reduction, whether that copy is used transposed).

    ``reduce_last``: the GEMM sums over ``q``'s last dimension (a not transposed, b transposed)."""
    if q.block is None or (q.block[0] == q.block[1] and not q.mx) or reduce_last:
        return q, False
    return fq.transpose_rows(q), True


def fp8_gemm(a: fq.Fp8Array, b: fq.Fp8Array, out_dtype: Any, *, trans_a: bool = False, trans_b: bool = False,
             bias: Array = None, accumulate: "str | None" = None) -> Array:
    """``op(a) @ op(b) (+ bias)`` of 2-D fp8 operands as ``out_dtype``; see the module docstring for the numerics."""
    if not isinstance(a, fq.Fp8Array) or not isinstance(b, fq.Fp8Array):
        raise TypeError(f"fp8_gemm: expected two Fp8Array operands, got {type(a).__name__} and {type(b).__name__}")
    a, b = a.rows(), b.rows()
    m, k = a.shape[::-1] if trans_a else a.shape
    k_b, n = b.shape[::-1] if trans_b else b.shape
    if k != k_b:
        raise ValueError(f"fp8_gemm: inner dimensions differ ({k} vs {k_b}): {_describe(a, b, trans_a, trans_b)}")
    if a.fmt is fp8.E5M2 and b.fmt is fp8.E5M2:
        raise ValueError(f"fp8_gemm: both operands E5M2 (no fp8 GEMM takes that; use E4M3 for one): "
                         f"{_describe(a, b, trans_a, trans_b)}")
    if backend.is_cupy_array(a.data) != backend.is_cupy_array(b.data):
        raise ValueError(f"fp8_gemm: operands on different devices: {_describe(a, b, trans_a, trans_b)}")
    out = np.dtype(out_dtype)
    model = precision.fp8_accumulate() if accumulate is None else accumulate
    if model not in MODELS:
        raise ValueError(f"fp8_gemm: accumulate must be one of {MODELS}, got {model!r}")
    a, flip = _reduced_last(a, not trans_a)
    trans_a ^= flip
    b, flip = _reduced_last(b, trans_b)
    trans_b ^= flip
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"fp8_gemm: bias must be ({n},), got {list(bias.shape)}: {_describe(a, b, trans_a, trans_b)}")
    if backend.is_cupy_array(a.data):
        if a.block is None and b.block is None and (bias is None or bias.dtype == out) \
                and cublaslt_fp8.takes(m, n, k, a.fmt, b.fmt, out):
            # cuBLASLt's TN layout: a as (M, K), b as (N, K); a transposed operand's codes are copied once
            # (and kept with the Fp8Array: a cached weight keeps its transposed copy for the region)
            y = cublaslt_fp8.matmul(fq.transpose_rows(a) if trans_a else a, b if trans_b else fq.transpose_rows(b),
                                    out, bias, model == "hopper_fast")
            if y is not None:
                return y
        return _dequantized_gemm(a, b, out, trans_a, trans_b, bias)
    tensorwise = a.block is None and b.block is None
    if tensorwise:
        av, bv = fp8.decode(a.data, a.fmt.dtype), fp8.decode(b.data, b.fmt.dtype)
    else:
        av, bv = fq.dequantize(a), fq.dequantize(b)
    av = av.T if trans_a else av
    bv = bv.T if trans_b else bv
    if model != "fp32" and tensorwise:
        acc = hopper_matmul(av, bv, promote=model == "promote_128")
    else:
        acc = np.matmul(av, bv)
    return _epilogue(acc, a, b, tensorwise, bias, out)


def _epilogue(acc: Array, a: fq.Fp8Array, b: fq.Fp8Array, tensorwise: bool, bias: Array, out: np.dtype) -> Array:
    """float32 ``acc * (scale_inv(a) * scale_inv(b)) (+ bias)``, rounded once to ``out``."""
    xp = backend.array_module(acc)
    with np.errstate(all="ignore"):
        if tensorwise:
            acc = acc * (a.scale_inv * b.scale_inv).astype(xp.float32)
        if bias is not None:
            acc = acc + (bias if bias.dtype == dt.float32 else convert(bias, dt.float32))
    acc = acc.astype(xp.float32, copy=False)
    return acc if out == dt.float32 else convert(acc, out)


def _dequantized_gemm(a: fq.Fp8Array, b: fq.Fp8Array, out: np.dtype, trans_a: bool, trans_b: bool,
                      bias: Array) -> Array:
    """A GPU without fp8 GEMMs (or operands cuBLASLt refuses): exact bfloat16 values, the 16-bit GEMM."""
    tensorwise = a.block is None and b.block is None
    if tensorwise:
        av, bv = fp8.decode(a.data, a.fmt.dtype), fp8.decode(b.data, b.fmt.dtype)
    else:
        av, bv = fq.dequantize(a), fq.dequantize(b)
    acc = gemm(convert(av, dt.bfloat16), convert(bv, dt.bfloat16), dt.float32, trans_a=trans_a, trans_b=trans_b)
    return _epilogue(acc, a, b, tensorwise, bias, out)


# --------------------------------------------------------------------------
# A model of Hopper's fp8 tensor-core accumulator
# --------------------------------------------------------------------------

def _truncate(values: Array, exponent: Array, bits: int) -> Array:
    """``values`` truncated toward zero to multiples of 2^(exponent - bits) (float64, exact)."""
    xp = backend.array_module(values)
    unit = xp.ldexp(xp.ones_like(values), (exponent - bits).astype(xp.int32))
    return xp.trunc(values / unit) * unit


def _exponent(values: Array) -> Array:
    """floor(log2 |v|) of nonzero values; a very small number for zeros (they never set a maximum)."""
    xp = backend.array_module(values)
    _, e = xp.frexp(values)
    return xp.where(values == 0, -10_000, e.astype(xp.int64) - 1)


def hopper_step(acc: Array, products: Array) -> Array:
    """One k=32 step: ``acc`` (M, N) and ``products`` (M, STEP, N), exact float64 values -> the e8m13 sum.

    All terms are aligned to the largest exponent among them and truncated to
    ``FRACTION_BITS`` fractional bits, added exactly, and the sum is truncated
    to ``FRACTION_BITS`` mantissa bits (round toward zero)."""
    xp = backend.array_module(acc)
    terms = xp.concatenate([acc[:, None, :], products], axis=1)
    top = _exponent(terms).max(axis=1, keepdims=True)
    total = _truncate(terms, top, FRACTION_BITS).sum(axis=1)
    return xp.where(total == 0, 0.0, _truncate(total, _exponent(total), FRACTION_BITS))


def hopper_matmul(a: Array, b: Array, *, promote: bool = False) -> Array:
    """``a @ b`` (float32 fp8 values, (M, K) and (K, N)) through :func:`hopper_step`, K in steps of 32.

    ``promote``: every ``PROMOTE_EVERY`` steps the partial sum is added into a
    float32 accumulator (one float32 rounding) and restarts from zero."""
    xp = backend.array_module(a)
    m, k = a.shape
    n = b.shape[1]
    a64, b64 = a.astype(xp.float64), b.astype(xp.float64)
    partial = xp.zeros((m, n), dtype=xp.float64)
    promoted = xp.zeros((m, n), dtype=xp.float32)
    for step, start in enumerate(range(0, k, STEP)):
        products = a64[:, start:start + STEP, None] * b64[None, start:start + STEP, :]
        partial = hopper_step(partial, products)
        if promote and (step + 1) % PROMOTE_EVERY == 0:
            promoted = (promoted + partial.astype(xp.float32)).astype(xp.float32)
            partial = xp.zeros_like(partial)
    if promote:
        return (promoted + partial.astype(xp.float32)).astype(xp.float32)
    return partial.astype(xp.float32)
