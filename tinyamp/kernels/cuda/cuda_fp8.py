"""CUDA kernels of the fp8 casts over uint8 codes (CuPy has no fp8 dtype): encode with a device scale, decode.

Each is a ``RawKernel`` with a grid-stride scalar loop; the scale is a device
pointer (a delayed-scaling scale or a current scale computed on the device), so
no launch reads a value on the host and a CUDA graph can capture them. The
conversion is the CPU encoder's integer recipe written in CUDA C
(``cpu/fp8_cpu.py``: round to nearest even on the float32 bits, saturating or
ml_dtypes' overflow rule, NaN kept with its sign), so a GPU, the CUDA stand-in
(g++) and the CPU give the same codes; the decoder builds each code's float32
bits (NaN as the canonical quiet NaN with its sign, as ml_dtypes decodes it).
The scaled encode multiplies in float32 first, compiled with ``--fmad=false``
as every tinyamp kernel. ``amax`` is CuPy's ``abs`` and ``max`` on float32 (a
NaN gives NaN). 16-bit inputs are widened exactly first (``cuda_vector.convert``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ... import dtypes as dt
from . import cuda_launch as launch
from . import cuda_vector

BLOCK = 256
MAX_BLOCKS = 4096

_ENCODE = r"""
__device__ __forceinline__ unsigned int tinyamp_fp8_bits(float f) { return __float_as_uint(f); }
// float32 bits -> fp8 code, round to nearest even; MB mantissa bits, bias BIAS (as the CPU encoder)
__device__ __forceinline__ unsigned char tinyamp_fp8_{fmt}(unsigned int u, int sat) {
    const unsigned int sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    unsigned int c;
    if (a > 0x7f800000u) {
        c = {nan_code}u;
    } else if (sat && a > {max_bits}u) {
        c = {max_code}u;
    } else if (!sat && a > {ovf_bits}u) {
        c = {ovf_code}u;
    } else if (a >= {min_normal}u) {
        const unsigned int drop = 23u - {mbits}u;
        const unsigned int r = a + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u);
        c = (r >> drop) - {norm_off}u;
    } else {
        const unsigned int e = a >> 23;
        const unsigned int mant = (a & 0x7fffffu) | (e > 0u ? 0x800000u : 0u);
        const unsigned int shift = e > 0u ? {shift_bias}u - e : {shift_bias}u - 1u;
        if (shift > 31u) {
            c = 0u;
        } else {
            unsigned int q = mant >> shift;
            const unsigned int rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
            if (rem > half || (rem == half && (q & 1u) == 1u)) q += 1u;
            c = q;
        }
    }
    return (unsigned char)(c | sign);
}
extern "C" __global__ void {name}(const float* x, const float* scale, unsigned char* y, const long long n,
                                  const int scaled, const int sat) {
    const float s = scaled ? scale[0] : 1.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = scaled ? x[i] * s : x[i];
        y[i] = tinyamp_fp8_{fmt}(tinyamp_fp8_bits(v), sat);
    }
}
"""

_DECODE = r"""
// fp8 code -> float32 (exact); NaN -> sign | 0x7fc00000, inf -> sign | 0x7f800000
__device__ __forceinline__ float tinyamp_fp8_decode_{fmt}(unsigned int c) {
    const unsigned int sign = (c & 0x80u) << 24;
    const unsigned int e = (c >> {mbits}u) & {emask}u, m = c & {mmask}u;
    if ({nan_test}) return __uint_as_float(sign | 0x7fc00000u);
    if ({inf_test}) return __uint_as_float(sign | 0x7f800000u);
    if (e == 0u) {
        const float v = (float)m * {subnormal_unit}f;  // m * 2^(1 - bias - mbits): exact
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 127u - {bias}u) << 23) | (m << (23u - {mbits}u)));
}
extern "C" __global__ void {name}(const unsigned char* c, const float* scale_inv, float* y, const long long n,
                                  const int scaled) {
    const float s = scaled ? scale_inv[0] : 1.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = tinyamp_fp8_decode_{fmt}((unsigned int)c[i]);
        y[i] = scaled ? v * s : v;
    }
}
"""


def _bits(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def _fill(text: str, values: dict) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


@lru_cache(maxsize=None)
def encode_source(f: Any) -> "tuple[str, str]":
    """(name, source) of the encoder into format ``f`` (a ``kernels.fp8.Fp8Format``)."""
    name = f"tinyamp_fp8_encode_{f.name}"
    return name, _fill(_ENCODE, {
        "name": name, "fmt": f.name, "mbits": f.mbits, "nan_code": f.nan_code, "max_bits": _bits(f.max),
        "max_code": f.max_code, "ovf_bits": f.ovf_bits, "ovf_code": f.ovf_code, "min_normal": _bits(f.min_normal),
        "norm_off": (127 - f.bias) << f.mbits, "shift_bias": 150 - f.bias + 1 - f.mbits})


@lru_cache(maxsize=None)
def decode_source(f: Any) -> "tuple[str, str]":
    """(name, source) of the decoder of format ``f``."""
    name = f"tinyamp_fp8_decode_{f.name}"
    ebits = 7 - f.mbits
    emask, mmask = (1 << ebits) - 1, (1 << f.mbits) - 1
    if f.name == "e4m3":  # no inf; one NaN code per sign
        nan_test, inf_test = f"e == {emask}u && m == {mmask}u", "false"
    else:  # IEEE-like
        nan_test, inf_test = f"e == {emask}u && m != 0u", f"e == {emask}u && m == 0u"
    unit = np.float32(f.min_subnormal)
    return name, _fill(_DECODE, {"name": name, "fmt": f.name, "mbits": f.mbits, "emask": emask, "mmask": mmask,
                                 "nan_test": nan_test, "inf_test": inf_test, "bias": f.bias,
                                 "subnormal_unit": repr(float(unit))})


def sources(formats: Any) -> "list[tuple[str, str]]":
    """(name, source) of the encoder and decoder of each format (``kernels.fp8.E4M3``, ``E5M2``)."""
    return [encode_source(f) for f in formats] + [decode_source(f) for f in formats]


def _grid(n: int) -> tuple:
    return (max(1, min(MAX_BLOCKS, (n + BLOCK - 1) // BLOCK)),)


def _float32(x: Any) -> Any:
    x = x if x.flags.c_contiguous else launch._cp().ascontiguousarray(x)
    return x if x.dtype == dt.float32 else cuda_vector.convert(x, dt.float32)


def _scale_pointer(scale: Any, like: Any) -> "tuple[Any, int]":
    if scale is None:
        return launch.no_inf_found(launch._device(like)), 0  # a float32 placeholder, never read
    return scale.reshape(-1).astype(np.float32, copy=False), 1


def encode(x: Any, f: Any, scale: Any, saturate: bool) -> Any:
    """uint8 codes of ``x * scale`` (``scale``: a float32 device array of one element, or None)."""
    name, source = encode_source(f)
    with launch._device(x):
        x32 = _float32(x)
        y = launch._cp().empty(x.shape, dtype=np.uint8)
        s, scaled = _scale_pointer(scale, x)
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(x.size), (BLOCK,), (x32, s, y, np.int64(x.size), np.int32(scaled),
                                                                  np.int32(bool(saturate))))
    return y


def decode(codes: Any, f: Any, scale_inv: Any) -> Any:
    """float32 values of uint8 ``codes`` times ``scale_inv`` (a float32 device array of one element, or None)."""
    name, source = decode_source(f)
    with launch._device(codes):
        c = codes if codes.flags.c_contiguous else launch._cp().ascontiguousarray(codes)
        y = launch._cp().empty(codes.shape, dtype=np.float32)
        s, scaled = _scale_pointer(scale_inv, codes)
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(codes.size), (BLOCK,), (c, s, y, np.int64(codes.size),
                                                                      np.int32(scaled)))
    return y


def amax(x: Any) -> Any:
    """``max |x|`` as a 0-d float32 device array (no host read; NaN gives NaN; 0 for an empty array)."""
    cp = launch._cp()
    with launch._device(x):
        if x.size == 0:
            return cp.zeros((), dtype=np.float32)
        return cp.abs(_float32(x)).max().astype(np.float32)
