"""Op-spec rows for convolution, transposed convolution and pooling (tinyamp/ops/conv.py, conv_transpose.py).

The references are direct nested loops over output pixels, written from the
definitions (PyTorch's docs), sharing nothing with the im2col implementation.
"""

from __future__ import annotations

import math

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec


def _pairs(v: "int | tuple") -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_transpose2d_ref(x: np.ndarray, w: np.ndarray, b: "np.ndarray | None" = None, stride: "int | tuple" = 1,
                         padding: "int | tuple" = 0, output_padding: "int | tuple" = 0, groups: int = 1,
                         dilation: "int | tuple" = 1) -> np.ndarray:
    """Scatter: y[n, g*Og + o, i*s + p*d - pad, j*s + q*d - pad] += x[n, g*Cg + c, i, j] * w[g*Cg + c, o, p, q]."""
    (sh, sw), (ph, pw), (oh, ow), (dh, dw) = (_pairs(v) for v in (stride, padding, output_padding, dilation))
    n, c, h, wid = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oh + 1
    wo = (wid - 1) * sw - 2 * pw + dw * (kw - 1) + ow + 1
    full = np.zeros((n, og * groups, ho + 2 * ph + sh, wo + 2 * pw + sw))  # room for the padding on both sides
    for ni in range(n):
        for ci in range(c):
            g = ci // cg
            for i in range(h):
                for j in range(wid):
                    for p in range(kh):
                        for q in range(kw):
                            spread = x[ni, ci, i, j] * w[ci, :, p, q]
                            full[ni, g * og:(g + 1) * og, i * sh + p * dh, j * sw + q * dw] += spread
    y = full[:, :, ph:ph + ho, pw:pw + wo]
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def conv2d_ref(x: np.ndarray, w: np.ndarray, b: "np.ndarray | None" = None, stride: "int | tuple" = 1,
               padding: "int | tuple" = 0, dilation: "int | tuple" = 1, groups: int = 1,
               pad_hw: "tuple | None" = None) -> np.ndarray:
    """y[n, o, i, j] = b[o] + sum_{c, p, q} w[o, c, p, q] * xpad[n, g*Cg + c, i*s + p*d, j*s + q*d]."""
    (sh, sw), (dh, dw) = _pairs(stride), _pairs(dilation)
    if pad_hw is None:
        ph, pw = _pairs(padding)
        pad_hw = ((ph, ph), (pw, pw))
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad_hw))
    n, _, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, ho, wo))
    for ni in range(n):
        for oi in range(o):
            g = oi // og
            for i in range(ho):
                for j in range(wo):
                    total = 0.0
                    for c in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                total += w[oi, c, p, q] * xp[ni, g * cg + c, i * sh + p * dh, j * sw + q * dw]
                    y[ni, oi, i, j] = total + (0.0 if b is None else b[oi])
    return y


def _pool_out(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def max_pool_ref(x: np.ndarray, k: int, s: "int | None" = None, p: int = 0, d: int = 1,
                 ceil_mode: bool = False) -> np.ndarray:
    """Max over the in-bounds cells of each (dilated) window; padding never wins."""
    s = k if s is None else s
    n, c, h, w = x.shape
    ho, wo = _pool_out(h, k, s, p, d, ceil_mode), _pool_out(w, k, s, p, d, ceil_mode)
    y = np.full((n, c, ho, wo), -np.inf)
    for i in range(ho):
        for j in range(wo):
            for a in range(k):
                for b in range(k):
                    r, q = i * s - p + a * d, j * s - p + b * d
                    if 0 <= r < h and 0 <= q < w:
                        y[:, :, i, j] = np.maximum(y[:, :, i, j], x[:, :, r, q])
    return y


def avg_pool_ref(x: np.ndarray, k: int, s: "int | None" = None, p: int = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: "int | None" = None) -> np.ndarray:
    """Sum of the in-bounds cells / (window cells inside input+padding, or inside the input)."""
    s = k if s is None else s
    n, c, h, w = x.shape
    ho, wo = _pool_out(h, k, s, p, 1, ceil_mode), _pool_out(w, k, s, p, 1, ceil_mode)
    y = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            total, inside, padded = 0.0, 0, 0
            for a in range(k):
                for b in range(k):
                    r, q = i * s - p + a, j * s - p + b
                    if -p <= r < h + p and -p <= q < w + p:
                        padded += 1
                    if 0 <= r < h and 0 <= q < w:
                        total = total + x[:, :, r, q]
                        inside += 1
            divisor = divisor_override or (padded if count_include_pad else inside)
            y[:, :, i, j] = total / divisor
    return y


X = Arg((2, 3, 5, 5))

SPECS = [
    OpSpec("conv2d", ta.conv2d, conv2d_ref, [X, Arg((4, 3, 3, 3)), Arg((4,))]),
    OpSpec("conv_transpose2d", ta.conv_transpose2d, conv_transpose2d_ref,
           [Arg((2, 3, 3, 4)), Arg((3, 2, 3, 3)), Arg((2,))], id="conv_transpose2d"),
    OpSpec("conv_transpose2d",
           lambda x, w, b: ta.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=(1, 0)),
           lambda x, w, b: conv_transpose2d_ref(x, w, b, 2, 1, (1, 0)),
           [Arg((1, 2, 3, 3)), Arg((2, 2, 3, 2)), Arg((2,))], id="conv_transpose2d_stride_padding_output_padding"),
    OpSpec("conv_transpose2d",
           lambda x, w: ta.conv_transpose2d(x, w, groups=2, dilation=(2, 1), stride=(1, 2)),
           lambda x, w: conv_transpose2d_ref(x, w, None, (1, 2), 0, 0, 2, (2, 1)),
           [Arg((2, 4, 2, 3)), Arg((4, 3, 2, 2))], id="conv_transpose2d_groups_dilation"),
    OpSpec("conv2d", lambda x, w: ta.conv2d(x, w, stride=2, padding=1), lambda x, w: conv2d_ref(x, w, None, 2, 1),
           [X, Arg((2, 3, 3, 3))], id="conv2d_stride2_pad1"),
    OpSpec("conv2d", lambda x, w, b: ta.conv2d(x, w, b, dilation=2, padding=1),
           lambda x, w, b: conv2d_ref(x, w, b, 1, 1, 2), [X, Arg((2, 3, 3, 3)), Arg((2,))], id="conv2d_dilation2"),
    OpSpec("conv2d", lambda x, w, b: ta.conv2d(x, w, b, padding=1, groups=3),
           lambda x, w, b: conv2d_ref(x, w, b, 1, 1, 1, 3), [X, Arg((6, 1, 3, 3)), Arg((6,))], id="conv2d_groups3"),
    # Several channels per group on both sides, with stride and dilation: catches group-layout mix-ups.
    OpSpec("conv2d", lambda x, w, b: ta.conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
           lambda x, w, b: conv2d_ref(x, w, b, 2, 2, 2, 2), [Arg((1, 4, 5, 5)), Arg((4, 2, 2, 2)), Arg((4,))],
           id="conv2d_groups2_strided_dilated"),
    OpSpec("conv2d", lambda x, w: ta.conv2d(x, w, stride=(2, 1), padding=(0, 2), dilation=(1, 2)),
           lambda x, w: conv2d_ref(x, w, None, (2, 1), (0, 2), (1, 2)), [X, Arg((2, 3, 2, 3))], id="conv2d_pairs"),
    # An even kernel under 'same': the extra pixel of padding goes after (bottom/right).
    OpSpec("conv2d", lambda x, w: ta.conv2d(x, w, padding="same"),
           lambda x, w: conv2d_ref(x, w, pad_hw=((0, 1), (0, 1))), [Arg((1, 2, 4, 4)), Arg((2, 2, 2, 2))],
           id="conv2d_same_even"),
    OpSpec("conv2d", lambda x, w: ta.conv2d(x, w, padding="valid"), lambda x, w: conv2d_ref(x, w),
           [Arg((1, 2, 4, 4)), Arg((1, 2, 3, 3))], id="conv2d_valid"),
    OpSpec("conv2d", ta.conv2d, lambda x, w: conv2d_ref(x[None], w)[0], [Arg((2, 4, 4)), Arg((2, 2, 3, 3))],
           id="conv2d_unbatched"),
    OpSpec("max_pool2d", lambda x: ta.max_pool2d(x, 2), lambda x: max_pool_ref(x, 2), [X]),
    OpSpec("max_pool2d", lambda x: ta.max_pool2d(x, 2), lambda x: x.reshape(0, 2, 2, 2, 2, 2).max((3, 5)),
           [Arg((0, 2, 4, 4))], id="max_pool2d_empty_batch"),  # backward reshaped with -1 and failed
    # Overlapping windows: one maximum can win two windows and gets both gradients.
    OpSpec("max_pool2d", lambda x: ta.max_pool2d(x, 3, 2, 1), lambda x: max_pool_ref(x, 3, 2, 1), [X],
           id="max_pool2d_overlap_pad"),
    OpSpec("max_pool2d", lambda x: ta.max_pool2d(x, 2, 1, dilation=2), lambda x: max_pool_ref(x, 2, 1, 0, 2), [X],
           id="max_pool2d_dilation"),
    OpSpec("max_pool2d", lambda x: ta.max_pool2d(x, 2, ceil_mode=True), lambda x: max_pool_ref(x, 2, ceil_mode=True),
           [X], id="max_pool2d_ceil"),
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 2), lambda x: avg_pool_ref(x, 2), [X]),
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 3, 2, 1), lambda x: avg_pool_ref(x, 3, 2, 1), [X],
           id="avg_pool2d_pad"),
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
           lambda x: avg_pool_ref(x, 3, 2, 1, count_include_pad=False), [X], id="avg_pool2d_exclude_pad"),
    # ceil_mode adds a last window hanging over the bottom/right edge (4 outputs, not 3).
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
           lambda x: avg_pool_ref(x, 3, 2, 1, ceil_mode=True), [Arg((1, 2, 6, 6))], id="avg_pool2d_ceil"),
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False),
           lambda x: avg_pool_ref(x, 2, ceil_mode=True, count_include_pad=False), [X],
           id="avg_pool2d_ceil_exclude_pad"),
    OpSpec("avg_pool2d", lambda x: ta.avg_pool2d(x, 2, 1, divisor_override=3),
           lambda x: avg_pool_ref(x, 2, 1, divisor_override=3), [Arg((1, 2, 3, 3))], id="avg_pool2d_divisor"),
]
