"""Quantised fp8 operands: codes and their scales together (:class:`Fp8Array`), and the scaling rules.

An :class:`Fp8Array` stands for a float array of its nominal ``dtype``: uint8
``data`` (E4M3/E5M2 codes, the array's shape) and ``scale_inv``, the factor
that dequantises them, kept together so they never drift apart (Transformer
Engine's lesson, PR #820). Layouts, by ``block``:

- ``None``, per tensor: ``scale_inv`` is a float32 ``()`` array; value =
  ``decode(data) * scale_inv``, the scale applied after a GEMM's accumulation;
- ``(1, b)``: per row, ``b`` consecutive elements of the last dimension share a
  scale (``scale_inv``: float32 ``(rows, ceil(K / b))``); ``(b, b)``: 2-D tiles of
  the array viewed as ``(rows, K)``; block scales are powers of two by default,
  so dequantising is exact;
- MX (``mx=True``, ``(1, 32)``): ``scale_inv`` holds E8M0 codes (uint8), the
  block's scale is ``2^(code - 127)``.

A last block may be partial (emulation; a GPU kernel needs ``K % b == 0``).
``columnwise`` is the same values quantised along the other dimension (blocks
down the rows of the ``(rows, K)`` view, stored transposed as ``(K, rows)``): a
weight-gradient GEMM reduces over the rows, and block scales must lie along the
reduction (2-D tiles need no second copy; a per-tensor array keeps its
transposed codes there once a TN GEMM asked for them).

The rules, on device arrays (no host read, so a CUDA graph can capture them):

- :func:`current_scale`: ``max / amax`` in float32 (Transformer Engine's
  ``compute_scale_from_amax``): an amax of 0, inf or NaN gives 1, an infinite
  quotient float32's max; ``pow2`` keeps only sign and exponent bits;
- :func:`delayed_scale`: ``(max / amax) / 2^margin``, the previous scale kept
  where amax is not a positive finite number, an infinite scale float32's max
  (Transformer Engine's ``_default_sf_compute``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from . import fp8
from .fp8 import Fp8Format

Array = Any
F32_MAX = np.float32(np.finfo(np.float32).max)


@dataclass
class Fp8Array:
    """fp8 codes and the scales that dequantise them, standing for a float array of ``dtype``."""

    data: Array
    scale_inv: Array
    fmt: Fp8Format
    dtype: np.dtype                      # the nominal dtype: what the values stand in for
    block: "tuple[int, int] | None" = None
    mx: bool = False
    columnwise: "Fp8Array | None" = field(default=None, repr=False)
    scale: Array = field(default=None, repr=False)  # per tensor: the multiplier the codes were made with

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def nbytes(self) -> int:
        more = self.columnwise.nbytes if self.columnwise is not None else 0
        return int(self.data.nbytes + self.scale_inv.nbytes + more)

    def scales(self) -> Array:
        """float32 multiplier(s) the codes were made with: per tensor ``()``, per block ``scale_inv``'s shape."""
        if self.scale is not None:
            return self.scale
        return reciprocal(block_scale_inv(self))

    @property
    def layout(self) -> str:
        if self.block is None:
            return "tensor"
        return f"mx{self.block[1]}" if self.mx else f"{self.block[0]}x{self.block[1]}"

    @property
    def fp8_codes(self) -> Array:
        """The codes array (``backend.device_of`` reads it: an Fp8Array lives where its codes do)."""
        return self.data

    def rows(self) -> "Fp8Array":
        """The ``(rows, K)`` view of an N-D array (block scales are kept per row already)."""
        if self.ndim == 2:
            return self
        data = self.data.reshape(-1, self.shape[-1])
        return Fp8Array(data, self.scale_inv, self.fmt, self.dtype, self.block, self.mx, self.columnwise, self.scale)

    def reshape(self, *shape: Any) -> "Fp8Array":
        """The same codes under another shape (per-tensor scales only: block scales follow the rows)."""
        if self.block is not None:
            raise ValueError(f"fp8: a {self.layout} block-scaled array cannot be reshaped")
        return Fp8Array(self.data.reshape(*shape), self.scale_inv, self.fmt, self.dtype, scale=self.scale)

    def __repr__(self) -> str:
        return (f"Fp8Array({self.fmt.name}, shape={list(self.shape)}, layout={self.layout}, "
                f"dtype={dt.dtype_name(self.dtype)})")


def _xp(x: Array) -> Any:
    return backend.array_module(x)


def _float32(x: Array) -> Array:
    return x if x.dtype == dt.float32 else x.astype(dt.float32)


def current_scale(amax: Array, fmt: Fp8Format, *, pow2: bool = False, epsilon: float = 0.0) -> Array:
    """float32 ``max / amax`` (elementwise): 1 where amax is 0, inf or NaN; float32 max where it overflows."""
    xp = _xp(amax)
    a = xp.maximum(_float32(amax), xp.float32(epsilon)) if epsilon > 0 else _float32(amax)
    with np.errstate(all="ignore"):
        scale = (xp.float32(fmt.max) / a).astype(xp.float32)
    scale = xp.where(xp.isinf(scale), F32_MAX, scale)
    scale = xp.where((a == 0) | ~xp.isfinite(a), xp.float32(1), scale)
    if pow2:
        scale = (scale.view(xp.uint32) & xp.uint32(0xFF800000)).view(xp.float32)
    return scale.astype(xp.float32)


def delayed_scale(amax: Array, scale: Array, fmt: Fp8Format, margin: float) -> Array:
    """float32 ``(max / amax) / 2^margin``; the previous ``scale`` where amax is 0, negative, inf or NaN."""
    xp = _xp(amax)
    a = _float32(amax)
    with np.errstate(all="ignore"):
        sf = ((xp.float32(fmt.max) / a) / xp.float32(2.0 ** margin)).astype(xp.float32)
    sf = xp.where(a > 0, sf, scale)
    sf = xp.where(xp.isfinite(a), sf, scale)
    return xp.where(xp.isinf(sf), F32_MAX, sf).astype(xp.float32)


def reciprocal(scale: Array) -> Array:
    """float32 ``1 / scale`` (the dequantisation factor)."""
    xp = _xp(scale)
    with np.errstate(all="ignore"):
        return (xp.float32(1) / _float32(scale)).astype(xp.float32)


# --------------------------------------------------------------------------
# Quantising
# --------------------------------------------------------------------------

def quantize_tensorwise(x: Array, fmt: Fp8Format, scale: Array, nominal: Any = None) -> Fp8Array:
    """Per-tensor: codes of ``x * scale`` (saturating), ``scale_inv = 1 / scale``."""
    xp = _xp(x)
    scale = xp.asarray(scale, dtype=xp.float32).reshape(())
    return Fp8Array(fp8.encode(x, fmt.dtype, scale), reciprocal(scale), fmt,
                    np.dtype(x.dtype if nominal is None else nominal), scale=scale.copy())


def quantize_current(x: Array, fmt: Fp8Format, nominal: Any = None, *, pow2: bool = False,
                     epsilon: float = 0.0) -> "tuple[Fp8Array, Array]":
    """Per-tensor current scaling: (the quantised ``x``, its amax). Two reads of ``x``: amax, then the cast."""
    amax = fp8.amax(x)
    return quantize_tensorwise(x, fmt, current_scale(amax, fmt, pow2=pow2, epsilon=epsilon), nominal), amax


def _rows(x: Array) -> Array:
    return x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x


def quantize_blocks(x: Array, fmt: Fp8Format, block: "tuple[int, int]", nominal: Any = None, *,
                    pow2: bool = True, columnwise: bool = False, epsilon: float = 0.0) -> Fp8Array:
    """Block scaling (DeepSeek-V3 / Float8BlockScaling): each ``block`` tile of the ``(rows, K)`` view has its own
    current scale (a power of two by default); ``columnwise`` adds the copy quantised down the rows."""
    x2 = _float32(_rows(x))
    rows, cols = block
    scale = current_scale(fp8.block_amax(x2, rows, cols), fmt, pow2=pow2, epsilon=epsilon)
    data = fp8.encode_tiles(x2, fmt.dtype, scale, rows, cols).reshape(x.shape)
    result = Fp8Array(data, reciprocal(scale), fmt, np.dtype(x.dtype if nominal is None else nominal), block)
    if columnwise and rows != cols:
        result.columnwise = quantize_blocks(x2.T, fmt, block, nominal, pow2=pow2, epsilon=epsilon)
    return result


def quantize_mx(x: Array, fmt: Fp8Format, nominal: Any = None, *, rule: str = "rceil", block: int = 32,
                columnwise: bool = False) -> Fp8Array:
    """MX scaling: ``block`` consecutive elements of the last dimension share an E8M0 scale 2^(code - 127)."""
    xp = _xp(x)
    x2 = _float32(_rows(x))
    code = fp8.e8m0_exponent(fp8.block_amax(x2, 1, block), fmt.dtype, rule)
    # 1 / 2^(code - 127) = 2^(127 - code): the E8M0 code 254 - code (255, a NaN scale, stays NaN)
    inverse = fp8.e8m0_value(xp.where(code == 255, 255, 254 - code.astype(xp.int32)).astype(xp.uint8))
    data = fp8.encode_tiles(x2, fmt.dtype, inverse, 1, block).reshape(x.shape)
    result = Fp8Array(data, code, fmt, np.dtype(x.dtype if nominal is None else nominal), (1, block), mx=True)
    if columnwise:
        result.columnwise = quantize_mx(x2.T, fmt, nominal, rule=rule, block=block)
    return result


def block_scale_inv(q: Fp8Array) -> Array:
    """The float32 dequantisation factor of every block of ``q`` (E8M0 codes turned into powers of two)."""
    return fp8.e8m0_value(q.scale_inv) if q.mx else q.scale_inv


def dequantize(q: Fp8Array) -> Array:
    """float32 values of ``q``: ``decode(data) * scale_inv`` per tensor or per block (exact for powers of two)."""
    if q.block is None:
        return fp8.decode(q.data, q.fmt.dtype, q.scale_inv)
    rows, cols = q.block
    return fp8.decode_tiles(_rows(q.data), q.fmt.dtype, block_scale_inv(q), rows, cols).reshape(q.shape)


def transpose_rows(q: Fp8Array) -> Fp8Array:
    """``q`` as the ``(K, rows)`` transpose of its ``(rows, K)`` view: a per-tensor or 2-D-tile array's codes
    transposed; a 1-D-block array's ``columnwise`` copy (quantised down the rows)."""
    xp = _xp(q.data)
    if q.block is None:  # the transposed codes, made once and kept with the array
        if q.columnwise is None:
            q.columnwise = Fp8Array(xp.ascontiguousarray(_rows(q.data).T), q.scale_inv, q.fmt, q.dtype,
                                    scale=q.scale)
        return q.columnwise
    if q.block[0] == q.block[1] and not q.mx:
        return Fp8Array(xp.ascontiguousarray(_rows(q.data).T), xp.ascontiguousarray(q.scale_inv.T), q.fmt,
                        q.dtype, q.block)
    if q.columnwise is None:
        raise ValueError(f"fp8: a {q.layout} array was quantised along its rows only; its transpose needs the "
                         f"columnwise copy (quantize with columnwise=True)")
    return q.columnwise
