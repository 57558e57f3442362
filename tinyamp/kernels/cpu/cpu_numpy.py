"""NumPy bit recipes for float16/bfloat16/float32 conversion and 16-bit ReLU.

The ``"numpy-bits"`` path of :mod:`tinyamp.kernels.convert` and
:mod:`tinyamp.kernels.cpu.elementwise_cpu`, used when
numba is missing or unusable: whole-array integer/float NumPy passes on the
bit patterns, bit-identical to ``astype`` / ``np.maximum`` / ``np.where``.
float16 -> float32 is 4 passes (5x faster than ``astype``); float32 ->
float16 is a 13-pass integer/float recipe (1.9x); ml_dtypes' bfloat16 casts
are already vectorised and are kept. ReLU and its backward work on int16
views (25-45x faster than NumPy's float16 ufuncs).

Every function here takes 1-D contiguous views that its callers prepare
(:func:`flat`). The module also holds the integer-view dtypes and the bit
patterns of +inf that the CPU kernels share.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt

U16 = np.dtype(np.uint16)
U32 = np.dtype(np.uint32)
I16 = np.dtype(np.int16)
I32 = np.dtype(np.int32)

# Bits of +inf for the 16-bit formats; a 16-bit pattern p is NaN when
# (p & 0x7fff) > INF16[dtype].
INF16 = {dt.float16: 0x7C00, dt.bfloat16: 0x7F80}

_TWO112 = np.float32(2.0**112)
_SIGN_EM_MASK = np.int32(-0x70002000)  # 0x8fffe000: sign + 15 exponent/mantissa bits << 13
_DAZ_IN = np.array([1e-40], dtype=np.float32)  # a float32 subnormal
_DAZ_OUT = np.empty(1, dtype=np.float32)
_U = np.uint32


def flat(a: np.ndarray) -> np.ndarray:
    """1-D view of a C- or F-contiguous array in memory order."""
    return a.reshape(-1) if a.flags.c_contiguous else a.ravel(order="K")


# ---------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------


def _denormals_flushed():
    """True when the FPU runs with DAZ/FTZ (set by some -ffast-math libraries)."""
    np.multiply(_DAZ_IN, np.float32(1.0), out=_DAZ_OUT)
    return _DAZ_OUT[0] == 0


def f16_to_f32(src: np.ndarray, dst: np.ndarray) -> None:
    """float16 bits (1-D) -> float32 (1-D), NumPy's exact rule.

    int16 -> int32 sign-extends, so ``(h << 13) & 0x8fffe000`` is the sign plus
    the 15 exponent/mantissa bits in float32 position; multiplying by 2**112
    rebiases the exponent exactly (float16 subnormals become float32
    subnormals on the way, which is why DAZ/FTZ mode falls back to astype).
    """
    if _denormals_flushed():
        np.copyto(dst, src.view(dt.float16))
        return
    h = src.view(I16)
    t = h.astype(I32)
    np.left_shift(t, 13, out=t)
    np.bitwise_and(t, _SIGN_EM_MASK, out=t)
    np.multiply(t.view(dt.float32), _TWO112, out=dst)
    # inf/nan: positive ones are >= 0x7c00 as int16, negative ones >= 0xfc00
    # as uint16.
    if h.max() >= 0x7C00 or src.max() >= 0xFC00:
        idx = np.flatnonzero((src & 0x7C00) == 0x7C00)
        hv = src[idx].astype(U32)
        dst.view(U32)[idx] = ((hv & 0x8000) << 16) | 0x7F800000 | ((hv & 0x3FF) << 13)


def f32_to_f16(src: np.ndarray, dst: np.ndarray) -> None:
    """float32 (1-D) -> float16 bits (1-D), NumPy's exact rule.

    The same recipe as the numba integer kernel (``ir_f2h_int`` in
    cpu_numba): adding c = 2**13 float16 ulps above |x| makes the
    FPU round |x| to float16 precision (ties to even).
    """
    u = src.view(U32)
    a = np.bitwise_and(u, _U(0x7FFFFFFF))
    c = np.bitwise_and(a, _U(0x7F800000))
    np.clip(c, _U(113 << 23), _U(143 << 23), out=c)
    np.add(c, _U(13 << 23), out=c)
    s = np.empty_like(a)
    with np.errstate(all="ignore"):
        np.add(a.view(dt.float32), c.view(dt.float32), out=s.view(dt.float32))
    np.subtract(s, c, out=s)
    np.right_shift(c, _U(13), out=c)
    np.add(s, c, out=s)
    np.subtract(s, _U(126 << 10), out=s)
    np.clip(s, _U(0), _U(0x7C00), out=s)
    np.right_shift(u, _U(16), out=c)
    np.bitwise_and(c, _U(0x8000), out=c)
    np.bitwise_or(s, c, out=s)
    np.copyto(dst, s, casting="unsafe")
    if a.max() > 0x7F800000:  # NaNs: sign | 0x7c00 | max(payload >> 13, 1)
        idx = np.flatnonzero(a > 0x7F800000)
        av = u[idx]
        m = (av >> 13) & 0x3FF
        m[m == 0] = 1
        dst[idx] = ((av >> 16) & 0x8000) | 0x7C00 | m


def convert_into(src_dt: np.dtype, dst_dt: np.dtype, x: np.ndarray, y: np.ndarray) -> None:
    """NumPy path on 1-D contiguous x (src_dt) into y (dst_dt)."""
    if src_dt == dt.float16 and dst_dt == dt.float32:
        f16_to_f32(x.view(U16), y)
    elif src_dt == dt.float32 and dst_dt == dt.float16:
        f32_to_f16(x, y.view(U16))
    elif src_dt == dt.float16 and dst_dt == dt.bfloat16:
        # exact upcast, then ml_dtypes' vectorised float32 -> bfloat16
        t = np.empty(x.size, dt.float32)
        f16_to_f32(x.view(U16), t)
        with np.errstate(all="ignore"):
            np.copyto(y, t, casting="unsafe")
    else:  # bfloat16 pairs: ml_dtypes' casts are already fast
        with np.errstate(all="ignore"):
            np.copyto(y, x, casting="unsafe")


# ---------------------------------------------------------------------------
# ReLU forward / backward on 16-bit float bit patterns
# ---------------------------------------------------------------------------


def relu16(v: np.ndarray, out: np.ndarray, inf: int) -> None:
    """v, out: int16 views. out = v with every negative non-NaN set to +0."""
    # Negative NaNs are the uint16 patterns above the -inf pattern; the
    # shift trick below zeroes them, so note them first (out may be v) and put
    # them back afterwards (rare: one cheap reduction to check).
    u = v.view(U16)
    idx = None
    if u.max() > (0x8000 | inf):
        idx = np.flatnonzero(u > (0x8000 | inf))
        nans = v[idx]
    t = np.right_shift(v, 15)  # -1 where the sign bit is set
    np.invert(t, out=t)
    np.bitwise_and(v, t, out=out)
    if idx is not None:
        out[idx] = nans


def relu_mask16(x: np.ndarray, inf: int) -> np.ndarray:
    """int16 -1 where x > 0 (1 <= x <= inf as int16), 0 elsewhere (NaN, <= 0)."""
    s = np.subtract(x, np.int16(1))  # -0.0 (-32768) wraps to 32767: excluded
    t = np.subtract(s, np.int16(inf))  # < 0 exactly when s < inf
    np.invert(s, out=s)  # sign set exactly when s >= 0
    np.bitwise_and(t, s, out=t)
    np.right_shift(t, 15, out=t)  # -1: keep, 0: drop
    return t


def relu_bwd16(g: np.ndarray, x: np.ndarray, out: np.ndarray, inf: int) -> None:
    """out = where(x > 0, g, 0) on int16 views."""
    np.bitwise_and(g, relu_mask16(x, inf), out=out)
