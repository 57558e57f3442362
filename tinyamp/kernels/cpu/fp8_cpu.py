"""numba kernels of the fp8 casts on the CPU: an integer encoder and a 256-entry table decoder.

The encoder turns float32 bits into an E4M3 (``float8_e4m3fn``) or E5M2 code
with round-to-nearest-even, in integer arithmetic on the bit pattern (no
float operation touches the value, so DAZ/FTZ modes cannot change it):

- normal results: add ``half an ulp - 1`` plus the kept mantissa's last bit
  and shift (a carry moves into the exponent, as rounding should);
- subnormal results: shift the mantissa (with its implicit bit) down to the
  format's subnormal unit, rounding the dropped bits to nearest even (a carry
  to ``1 << mantissa_bits`` is the smallest normal code, as it should be);
- beyond the largest finite value: the largest finite code when saturating
  (Transformer Engine's rule: clip to +-max, then cast; inf saturates too),
  otherwise ml_dtypes' rule (E4M3: NaN; E5M2: inf); NaN stays NaN with its sign.

A scaled encode multiplies by the float32 ``scale`` first (one float32
rounding, as a GPU's ``x * scale`` before its ``cvt``). The decoder reads the
code's value from a 256-entry float32 table (exact: every fp8 value is a
float32) and multiplies by ``scale_inv`` when given. ``amax`` is the largest
``|x|``: an integer maximum of the bits with the sign cleared, so a NaN
anywhere makes it NaN.

Block-scaled operands (1x128 / 128x128 tiles, MX blocks) take 2-D kernels
over C-contiguous ``(rows, K)`` arrays: ``block_amax_2d`` (the bit maximum per
tile), ``encode_tiles`` (each element times its tile's float32 scale, one
float32 rounding, then the encoder: the bits of the flat encoder on the
product array) and ``decode_tiles`` (table value times the tile's factor).
The ``_t`` twins read the transpose of a C-contiguous array in place (a
column-wise copy without a transposed float32 copy first).

numba is imported by :func:`load` only (``kernels/fp8.py`` calls it on first use).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# name -> compiled function, filled by load()
KERNELS: dict[str, Any] = {}


def load() -> None:
    """Import numba and define the fp8 kernels into :data:`KERNELS` (compiled on first call)."""
    if KERNELS:
        return
    global _fbits, _encode_bits, encode_f32, decode_u8, amax_f32, block_amax_2d, block_amax_2d_t, encode_tiles
    global encode_tiles_t, decode_tiles

    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    jit = njit(cache=True, nogil=True, fastmath=False, boundscheck=False)

    @intrinsic
    def _fbits(typingctx, f):  # float32 -> its uint32 bits (numba cannot view a scalar)
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(32))
        return types.uint32(types.float32), codegen

    u32 = np.uint32

    @jit
    def _encode_bits(u, mbits, shift_bias, norm_off, min_normal, max_bits, max_code, ovf_bits, ovf_code,
                     nan_code, sat):
        sign = (u >> u32(24)) & u32(0x80)
        a = u & u32(0x7FFFFFFF)
        if a > u32(0x7F800000):
            c = nan_code
        elif sat and a > max_bits:
            c = max_code
        elif (not sat) and a > ovf_bits:
            c = ovf_code
        elif a >= min_normal:  # a normal fp8 result: round the mantissa to mbits bits
            drop = u32(23) - mbits
            r = a + ((u32(1) << (drop - u32(1))) - u32(1)) + ((a >> drop) & u32(1))
            c = (r >> drop) - norm_off
        else:  # a subnormal fp8 result (or zero): shift the full mantissa down to the subnormal unit
            e = a >> u32(23)
            mant = (a & u32(0x7FFFFF)) | (u32(0x800000) if e > u32(0) else u32(0))
            shift = shift_bias - e if e > u32(0) else shift_bias - u32(1)
            if shift > u32(31):
                c = u32(0)
            else:
                q = mant >> shift
                rem = mant & ((u32(1) << shift) - u32(1))
                half = u32(1) << (shift - u32(1))
                if rem > half or (rem == half and (q & u32(1)) == u32(1)):
                    q += u32(1)
                c = q
        return np.uint8(c | sign)

    @jit
    def encode_f32(src, dst, scale, scaled, mbits, shift_bias, norm_off, min_normal, max_bits, max_code,
                   ovf_bits, ovf_code, nan_code, sat):  # float32[::1] -> uint8[::1]
        for i in range(src.size):
            f = src[i] * scale if scaled else src[i]
            dst[i] = _encode_bits(_fbits(f), mbits, shift_bias, norm_off, min_normal, max_bits, max_code,
                                  ovf_bits, ovf_code, nan_code, sat)

    @jit
    def decode_u8(src, dst, table, scale_inv, scaled):  # uint8[::1] -> float32[::1]
        if scaled:
            for i in range(src.size):
                dst[i] = table[src[i]] * scale_inv
        else:
            for i in range(src.size):
                dst[i] = table[src[i]]

    @jit
    def amax_f32(src):  # float32[::1] viewed as uint32 -> the largest |x| bits (NaN beats inf)
        m = u32(0)
        for i in range(src.size):
            a = src[i] & u32(0x7FFFFFFF)
            if a > m:
                m = a
        return m

    @jit
    def block_amax_2d(src, out, rows, cols):  # uint32 (m, k) C-contiguous -> uint32 tiles (ceil m/rows, ceil k/cols)
        m, k = src.shape
        out[:, :] = 0
        for i in range(m):
            row, o = src[i], out[i // rows]
            for t in range(o.size):
                peak = o[t]
                for j in range(t * cols, min(t * cols + cols, k)):
                    peak = max(peak, row[j] & u32(0x7FFFFFFF))
                o[t] = peak

    @jit
    def block_amax_2d_t(src, out, rows, cols):  # the tiles of src.T (src (k, m) C-contiguous): out (ceil m/rows, ...)
        k, m = src.shape
        peak = np.zeros(m, np.uint32)
        for jb in range(0, k, cols):
            peak[:] = 0
            for j in range(jb, min(jb + cols, k)):
                row = src[j]
                for i in range(m):
                    peak[i] = max(peak[i], row[i] & u32(0x7FFFFFFF))
            t = jb // cols
            for i in range(m):
                out[i // rows, t] = max(out[i // rows, t], peak[i]) if i % rows else peak[i]

    @jit
    def encode_tiles(src, dst, scales, rows, cols, mbits, shift_bias, norm_off, min_normal, max_bits, max_code,
                     ovf_bits, ovf_code, nan_code, sat):  # float32 (m, k) C-contiguous x tile scales -> uint8 (m, k)
        m, k = src.shape
        full = k // cols * cols
        product = np.empty(k, np.float32)  # one row's products first: the encoding loop then vectorises
        for i in range(m):
            row, s_row = src[i], scales[i // rows]
            for j0 in range(0, full, cols):
                s = s_row[j0 // cols]
                for j in range(j0, j0 + cols):
                    product[j] = row[j] * s
            for j in range(full, k):
                product[j] = row[j] * s_row[full // cols]
            encode_f32(product, dst[i], np.float32(1), False, mbits, shift_bias, norm_off, min_normal, max_bits,
                       max_code, ovf_bits, ovf_code, nan_code, sat)

    @jit
    def encode_tiles_t(src, dst, scales, rows, cols, mbits, shift_bias, norm_off, min_normal, max_bits, max_code,
                       ovf_bits, ovf_code, nan_code, sat):  # the tiles of src.T (src (k, m) C-contiguous) -> dst (m, k)
        k, m = src.shape
        group = 16  # src rows encoded per pass: dst then takes 16 consecutive bytes per row
        product, column = np.empty(m, np.float32), np.empty(m, np.float32)
        codes = np.empty((group, m), np.uint8)
        t_now = -1
        for j0 in range(0, k, group):
            n = min(group, k - j0)
            for g in range(n):
                row, t = src[j0 + g], (j0 + g) // cols
                if t != t_now:  # the scales of this column of tiles, one per element of the row
                    t_now = t
                    for i in range(m):
                        column[i] = scales[i // rows, t]
                for i in range(m):
                    product[i] = row[i] * column[i]
                encode_f32(product, codes[g], np.float32(1), False, mbits, shift_bias, norm_off, min_normal,
                           max_bits, max_code, ovf_bits, ovf_code, nan_code, sat)
            for i in range(m):
                out = dst[i]
                for g in range(n):
                    out[j0 + g] = codes[g, i]

    @jit
    def decode_tiles(src, dst, table, scale_inv, rows, cols):  # uint8 (m, k) x tile factors -> float32 (m, k)
        m, k = src.shape
        for i in range(m):
            row, out, s_row = src[i], dst[i], scale_inv[i // rows]
            for t in range(s_row.size):
                s = s_row[t]
                for j in range(t * cols, min(t * cols + cols, k)):
                    out[j] = table[row[j]] * s

    KERNELS.update(encode_f32=encode_f32, decode_u8=decode_u8, amax_f32=amax_f32, block_amax_2d=block_amax_2d,
                   block_amax_2d_t=block_amax_2d_t, encode_tiles=encode_tiles, encode_tiles_t=encode_tiles_t,
                   decode_tiles=decode_tiles)
