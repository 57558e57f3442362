"""fp8 casts on arrays: encode to codes, decode, amax, E8M0 block exponents (the reference and the dispatch).

An fp8 array here is its **codes**: a uint8 array (CuPy has no fp8 dtype; on the
CPU ``to_fp8`` views the same bytes as the ml_dtypes type). What every path
computes, bit for bit:

- :func:`encode` ``(x, dtype, scale=None, saturate=True)``: ``x * scale``
  rounded once in float32 (when a scale is given), then round-to-nearest-even
  into E4M3/E5M2. ``saturate=True`` is Transformer Engine's rule (clip to
  +-max before the cast, so overflow and inf give +-max); ``saturate=False`` is
  ml_dtypes' (E4M3: NaN, E5M2: inf). NaN stays NaN. It equals
  ``np.clip(x, -max, max).astype(fp8)`` (saturating) or ``x.astype(fp8)``.
- :func:`decode` ``(codes, dtype, scale_inv=None)``: the float32 value of
  each code (exact), times ``scale_inv`` in float32 when given.
- :func:`amax`: ``max |x|`` as a float32 0-d array on the array's device (no
  host read); NaN anywhere gives NaN.
- :func:`block_amax`, :func:`encode_tiles`, :func:`decode_tiles`: the same
  three on a 2-D array cut into ``rows x cols`` tiles (partial tiles at the
  ends), one scale per tile: what block and MX scaling run. ``encode_tiles``
  is :func:`encode` of the float32 product of each element and its tile's scale.
- :func:`e8m0_exponent`: the biased E8M0 code of an MX block scale from the
  block's amax, in integer arithmetic on the float32 bits: ``"floor"`` (the
  OCP MX rule: ``floor(log2 amax) - emax(element)``; the block maximum may
  saturate) or ``"rceil"`` (NVIDIA's and torchao's: ``ceil(log2(amax /
  max(element)))``, so the block maximum never saturates).

CPU: numba kernels (``cpu/fp8_cpu.py``) for float32 input; float16/bfloat16
are widened exactly first. Without numba, the reference below (clip +
ml_dtypes) runs. GPU: ``cuda/cuda_fp8.py`` (``cuda_fp8.h`` kernels over uint8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .. import backend
from .. import dtypes as dt
from .convert import convert
from .cpu import cpu_path, fp8_cpu
from .cuda import cuda_fp8

Array = Any


def _bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


@dataclass(frozen=True)
class Fp8Format:
    """The constants of one fp8 element format that the encoder needs."""

    name: str
    dtype: np.dtype
    mbits: int          # mantissa bits
    bias: int           # exponent bias
    max: float          # largest finite value
    max_code: int       # its code
    ovf_bits: int       # float32 bits above which a non-saturating cast overflows
    ovf_code: int       # what it gives then (E4M3: NaN, E5M2: inf)
    nan_code: int
    emax: int           # exponent of the largest binade (floor(log2(max)))

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mbits)


E4M3 = Fp8Format("e4m3", dt.float8_e4m3fn, 3, 7, 448.0, 0x7E, _bits(464.0), 0x7F, 0x7F, 8)
E5M2 = Fp8Format("e5m2", dt.float8_e5m2, 2, 15, 57344.0, 0x7B, _bits(61440.0), 0x7C, 0x7E, 15)
FORMATS = {dt.float8_e4m3fn: E4M3, dt.float8_e5m2: E5M2}


def fmt(dtype: Any) -> Fp8Format:
    """The :class:`Fp8Format` of an E4M3/E5M2 dtype (or of a format)."""
    if isinstance(dtype, Fp8Format):
        return dtype
    try:
        return FORMATS[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"fp8: expected float8_e4m3fn or float8_e5m2, got {dtype!r}") from None


# Every code's float32 value (exact), the decoder's table.
TABLES = {f.dtype: np.arange(256, dtype=np.uint8).view(f.dtype).astype(np.float32) for f in FORMATS.values()}


def _check_float(name: str, x: Array) -> None:
    if x.dtype not in (dt.float32, dt.float16, dt.bfloat16):
        raise TypeError(f"{name}: expected a float32, float16 or bfloat16 array, got {x.dtype}")


def _scalar(value: Any) -> np.float32:
    """A CPU scale (a Python number or a 0-d/1-element float32 array) as a float32 scalar."""
    return np.float32(np.asarray(value, dtype=np.float32).reshape(-1)[0])


def encode(x: Array, dtype: Any, scale: Any = None, *, saturate: bool = True) -> Array:
    """uint8 codes of ``x * scale`` (float32 product) in ``dtype`` (E4M3/E5M2), round to nearest even."""
    f = fmt(dtype)
    _check_float("fp8 encode", x)
    if backend.is_cupy_array(x):
        return cuda_fp8.encode(x, f, scale, saturate)
    x32 = np.ascontiguousarray(convert(x, dt.float32) if x.dtype != dt.float32 else x)
    out = np.empty(x32.shape, np.uint8)
    if cpu_path.resolve(None) == "numba":
        fp8_cpu.load()
        fp8_cpu.KERNELS["encode_f32"](x32.reshape(-1), out.reshape(-1), np.float32(1) if scale is None
                                      else _scalar(scale), scale is not None, *_encoder_constants(f, saturate))
        return out
    return encode_reference(x32, f, scale, saturate)


def _encoder_constants(f: Fp8Format, saturate: bool) -> tuple:
    u = np.uint32
    return (u(f.mbits), u(150 - f.bias + 1 - f.mbits), u((127 - f.bias) << f.mbits), u(_bits(f.min_normal)),
            u(_bits(f.max)), u(f.max_code), u(f.ovf_bits), u(f.ovf_code), u(f.nan_code), bool(saturate))


def encode_reference(x: np.ndarray, f: Fp8Format, scale: Any = None, saturate: bool = True) -> np.ndarray:
    """The definition :func:`encode` meets: (clip, when saturating) then ml_dtypes' RNE cast."""
    x32 = x.astype(np.float32)
    with np.errstate(all="ignore"):
        if scale is not None:
            x32 = x32 * _scalar(scale)
        if saturate:
            x32 = np.clip(x32, -f.max, f.max)
        return x32.astype(f.dtype).view(np.uint8)


def decode(codes: Array, dtype: Any, scale_inv: Any = None) -> Array:
    """float32 values of uint8 ``codes`` of ``dtype``, times ``scale_inv`` (float32) when given."""
    f = fmt(dtype)
    if codes.dtype != np.uint8:
        raise TypeError(f"fp8 decode: expected uint8 codes, got {codes.dtype}")
    if backend.is_cupy_array(codes):
        return cuda_fp8.decode(codes, f, scale_inv)
    c = np.ascontiguousarray(codes)
    out = np.empty(c.shape, np.float32)
    if cpu_path.resolve(None) == "numba":
        fp8_cpu.load()
        fp8_cpu.KERNELS["decode_u8"](c.reshape(-1), out.reshape(-1), TABLES[f.dtype],
                                     np.float32(1) if scale_inv is None else _scalar(scale_inv),
                                     scale_inv is not None)
        return out
    np.take(TABLES[f.dtype], c, out=out)
    if scale_inv is not None:
        out *= _scalar(scale_inv)
    return out


def amax(x: Array) -> Array:
    """``max |x|`` as a 0-d float32 array on ``x``'s device (NaN anywhere gives NaN; 0 for an empty array)."""
    _check_float("fp8 amax", x)
    if backend.is_cupy_array(x):
        return cuda_fp8.amax(x)
    x32 = np.ascontiguousarray(convert(x, dt.float32) if x.dtype != dt.float32 else x)
    if cpu_path.resolve(None) == "numba":
        fp8_cpu.load()
        bits = fp8_cpu.KERNELS["amax_f32"](x32.reshape(-1).view(np.uint32))
        return np.array(bits, np.uint32).view(np.float32).reshape(())
    if x32.size == 0:
        return np.zeros((), np.float32)
    return np.max(np.abs(x32)).astype(np.float32).reshape(())


def _tiled_cpu(x: Array) -> "str | None":
    """The numba tile kernels' suffix for a 2-D array ("" C-contiguous, "_t" a transposed one), or None (no numba,
    a GPU array, other strides: the array expression below)."""
    if type(x) is not np.ndarray or cpu_path.resolve(None) != "numba":
        return None
    fp8_cpu.load()
    return "" if x.flags.c_contiguous else "_t" if x.T.flags.c_contiguous else None


def _tiles(shape: tuple, rows: int, cols: int) -> tuple:
    return -(-shape[0] // rows), -(-shape[1] // cols)


def block_amax(x2: Array, rows: int, cols: int) -> Array:
    """float32 ``max |x|`` of each ``rows x cols`` tile of a 2-D float32 array (any strides), NaN kept."""
    xp = backend.array_module(x2)
    kind = _tiled_cpu(x2)
    if kind is not None:
        out = np.empty(_tiles(x2.shape, rows, cols), np.uint32)
        fp8_cpu.KERNELS["block_amax_2d" + kind]((x2.T if kind else x2).view(np.uint32), out, rows, cols)
        return out.view(np.float32)
    # The maximum over the bits of |x| as int32 (the values' order, a NaN above inf): no NaN check per step.
    m, k = x2.shape
    pm, pk = -m % rows, -k % cols
    a = xp.abs(x2)
    if pm or pk:
        a = xp.pad(a, ((0, pm), (0, pk)))
    bits = a.view(xp.int32)
    peak = bits.reshape((m + pm) // rows, rows, (k + pk) // cols, cols).max(axis=(1, 3))
    return xp.ascontiguousarray(peak).view(xp.float32)


def _times_tiles(x2: Array, scales: Array, rows: int, cols: int) -> Array:
    """float32 ``x2 * scale of its tile`` for every element (a broadcast over the padded tiles)."""
    xp = backend.array_module(x2)
    m, k = x2.shape
    pm, pk = -m % rows, -k % cols
    padded = xp.pad(x2, ((0, pm), (0, pk))) if pm or pk else x2
    tiles = padded.reshape((m + pm) // rows, rows, (k + pk) // cols, cols)
    with np.errstate(all="ignore"):
        product = (tiles * scales[:, None, :, None]).astype(dt.float32).reshape(m + pm, k + pk)
    return product[:m, :k] if pm or pk else product


def encode_tiles(x2: Array, dtype: Any, scales: Array, rows: int, cols: int) -> Array:
    """uint8 codes (saturating) of ``x2 * scale of its tile`` (float32 product), tiles ``rows x cols``."""
    f = fmt(dtype)
    kind = _tiled_cpu(x2)
    if kind is not None:
        out = np.empty(x2.shape, np.uint8)
        fp8_cpu.KERNELS["encode_tiles" + kind](x2.T if kind else x2, out, np.ascontiguousarray(scales), rows, cols,
                                               *_encoder_constants(f, True))
        return out
    return encode(_times_tiles(x2, scales, rows, cols), f.dtype)


def decode_tiles(codes2: Array, dtype: Any, scale_inv: Array, rows: int, cols: int) -> Array:
    """float32 value of each code of a 2-D array times its ``rows x cols`` tile's factor ``scale_inv``."""
    f = fmt(dtype)
    if _tiled_cpu(codes2) == "":
        out = np.empty(codes2.shape, np.float32)
        fp8_cpu.KERNELS["decode_tiles"](codes2, out, TABLES[f.dtype], scale_inv, rows, cols)
        return out
    return _times_tiles(decode(codes2, f.dtype), scale_inv, rows, cols)


def to_fp8(x: Array, dtype: Any, *, saturate: bool = True) -> np.ndarray:
    """``x`` as an ml_dtypes fp8 array (CPU): :func:`encode`'s codes viewed as ``dtype``."""
    f = fmt(dtype)
    if backend.is_cupy_array(x):
        raise TypeError(f"fp8: CuPy has no {f.dtype} dtype; on a GPU fp8 tensors are uint8 codes with a scale "
                        f"(ta.amp.fp8_autocast quantises GEMM operands)")
    return encode(x, f.dtype, saturate=saturate).view(f.dtype)


def from_fp8(x: np.ndarray, dtype: Any) -> Array:
    """An ml_dtypes E4M3/E5M2 array as ``dtype`` (float32/float16/bfloat16): exact decode, then one rounding."""
    value = decode(np.ascontiguousarray(x).view(np.uint8), x.dtype)
    return value if np.dtype(dtype) == dt.float32 else convert(value, dtype)


def cast(x: np.ndarray, dtype: Any, *, saturate: bool = True) -> np.ndarray:
    """``x`` as ``dtype`` where one side is an fp8 dtype (CPU arrays): what ``Tensor.to(float8_*)`` runs.

    Into E4M3/E5M2: round to nearest even, saturating by default; from them:
    exact decode (then one rounding). E8M0 goes through ml_dtypes' own cast
    (ties round up; 0 and negatives become NaN): MX scales are made with
    :func:`e8m0_exponent`, not by casting.
    """
    target = np.dtype(dtype)
    if backend.is_cupy_array(x):
        raise TypeError(f"fp8: CuPy has no {target if target in dt.FP8 else x.dtype} dtype; on a GPU fp8 "
                        f"tensors are uint8 codes with a scale (ta.amp.fp8_autocast quantises GEMM operands)")
    if target in FORMATS and x.dtype in (dt.float32, dt.float16, dt.bfloat16):
        return to_fp8(x, target, saturate=saturate)
    if x.dtype in FORMATS and target in (dt.float32, dt.float16, dt.bfloat16):
        return from_fp8(x, target)
    with np.errstate(all="ignore"):
        return x.astype(target)


# --------------------------------------------------------------------------
# E8M0 block exponents (MX scales), by integer code
# --------------------------------------------------------------------------

E8M0_RULES = ("floor", "rceil")


def e8m0_exponent(block_amax: Array, element: Any, rule: str = "rceil") -> Array:
    """Biased E8M0 codes (uint8; scale = 2^(code - 127), 255 = NaN) of MX block scales from their amax.

    ``"floor"`` (OCP MX): ``floor(log2 amax) - emax``, the element format's
    largest exponent (8 for E4M3). ``"rceil"`` (NVIDIA, torchao):
    ``ceil(log2(amax / max))``, amax / max rounded once in float32. Both
    clamp to the codes 0..254; an amax of 0 gives code 0 (the block is
    zeros under any scale); NaN or inf gives 255.
    """
    f = fmt(element)
    if rule not in E8M0_RULES:
        raise ValueError(f"e8m0_exponent: rule must be one of {E8M0_RULES}, got {rule!r}")
    xp = backend.array_module(block_amax)
    a = xp.abs(xp.asarray(block_amax, dtype=xp.float32))
    if rule == "floor":
        bits = a.view(xp.uint32).astype(xp.int32)
        code = (bits >> 23) - f.emax  # the biased exponent of amax (0 for a subnormal) minus emax
    else:
        v = (a / xp.float32(f.max)).astype(xp.float32)
        bits = v.view(xp.uint32).astype(xp.int32)
        exponent, mantissa = bits >> 23, bits & 0x7FFFFF
        # A normal v rounds up unless it is a power of two; a subnormal v (exponent 0) needs 2^-126 or 2^-127.
        code = exponent + (mantissa != 0)
        code = xp.where(exponent == 0, xp.where(mantissa > 0x400000, 1, xp.where(mantissa > 0, 0, 0)), code)
    code = xp.clip(code, 0, 254)
    code = xp.where(xp.isfinite(a), code, 255)
    return code.astype(xp.uint8)


def e8m0_value(code: Array) -> Array:
    """float32 ``2^(code - 127)`` of E8M0 codes (code 0 is 2^-127, a float32 subnormal; 255 is NaN)."""
    xp = backend.array_module(code)
    c = code.astype(xp.int32)
    normal = (c << 23).view(xp.float32)  # codes 1..254: the float32 with that biased exponent
    value = xp.where(c == 0, xp.float32(2.0 ** -127), normal)
    return xp.where(c == 255, xp.float32(np.nan), value).astype(xp.float32)


__all__ = ["E4M3", "E5M2", "Fp8Format", "amax", "block_amax", "cast", "decode", "decode_tiles", "e8m0_exponent",
           "e8m0_value", "encode", "encode_reference", "encode_tiles", "fmt", "from_fp8", "to_fp8"]
