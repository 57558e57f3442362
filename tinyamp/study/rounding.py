"""What one rounding into another dtype lost: underflow, new subnormals, overflow, NaN, magnitudes.

A cast from float32 to float16 keeps 11 significant bits and the range
[2^-24, 65504]. For one array converted to another dtype, :func:`rounding_stats`
counts, element by element:

- ``underflow``: finite non-zero values that became 0 (``|x| <= 2^-25`` for
  float16: half the smallest subnormal rounds to even, i.e. to zero);
- ``subnormal``: values that are subnormal after the cast, non-zero but below
  the target's smallest normal (2^-14 for float16), so they keep fewer than
  its full significant bits;
- ``overflow``: finite values that became +-inf (``|x| >= 65520`` for float16:
  65504 plus half an ulp rounds up);
- ``nan``: values that were already NaN;

and the smallest non-zero and the largest finite magnitude of the source, which
say how far the values sat from the target's limits. The precision report
(:mod:`tinyamp.study.report`) calls it for every cast it sees, forward and
backward, and for roundings that ops make inside themselves (``record_cast``).
It runs only while a trace is open.

For an fp8 quantisation (an ``Fp8Cast`` node), :func:`fp8_stats` reports the
scale used, the values the saturating rule clipped, the values that became
zero, and the error of the dequantised values (MSE, SQNR): Transformer Engine's
``LogFp8TensorStats``, on every cast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..kernels import fp8, fp8_quantize


@dataclass
class RoundingStats:
    """What a conversion of ``elements`` values lost (counts) and the source's magnitude range."""

    elements: int
    underflow: int              # finite non-zero -> 0
    subnormal: int              # subnormal after the cast (fewer significant bits)
    overflow: int               # finite -> +-inf
    nan: int                    # NaN in the source
    min_abs: "float | None"     # smallest non-zero finite |source| (None: none)
    max_abs: "float | None"     # largest finite |source| (None: none)

    @property
    def lost(self) -> int:
        """Values whose magnitude information was lost outright (zeroed or made infinite)."""
        return self.underflow + self.overflow

    def add(self, other: "RoundingStats") -> "RoundingStats":
        """The two conversions' counts summed and magnitude ranges joined."""
        return RoundingStats(self.elements + other.elements, self.underflow + other.underflow,
                             self.subnormal + other.subnormal, self.overflow + other.overflow,
                             self.nan + other.nan, _join(min, self.min_abs, other.min_abs),
                             _join(max, self.max_abs, other.max_abs))


def empty_stats() -> RoundingStats:
    return RoundingStats(0, 0, 0, 0, 0, None, None)


def _join(pick: Any, a: "float | None", b: "float | None") -> "float | None":
    if a is None:
        return b
    return a if b is None else pick(a, b)


def rounding_stats(source: Any, result: Any) -> RoundingStats:
    """What converting ``source`` (any float array) into ``result`` (the same values in another dtype) lost.

    Both arrays are read on the host in float64, which holds every float16,
    bfloat16 and float32 value exactly.
    """
    if source.shape != result.shape:
        raise ValueError(f"rounding_stats: source {list(source.shape)} ({dt.dtype_name(source.dtype)}) and "
                         f"result {list(result.shape)} ({dt.dtype_name(result.dtype)}) must have one shape")
    if source.dtype not in dt.FLOATING or result.dtype not in dt.FLOATING:
        raise TypeError(f"rounding_stats: expected floating arrays, got {dt.dtype_name(source.dtype)} -> "
                        f"{dt.dtype_name(result.dtype)}")
    a = backend.to_host(source).astype(np.float64).ravel()
    r = backend.to_host(result).astype(np.float64).ravel()
    smallest_normal = float(dt.finfo(result.dtype).tiny)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(a)
        magnitude = np.abs(a)
        nonzero = finite & (magnitude > 0)
        r_abs = np.abs(r)
        underflow = int(np.count_nonzero(nonzero & (r == 0)))
        subnormal = int(np.count_nonzero((r_abs > 0) & (r_abs < smallest_normal)))
        overflow = int(np.count_nonzero(finite & np.isinf(r)))
        nan = int(np.count_nonzero(np.isnan(a)))
    min_abs = float(magnitude[nonzero].min()) if nonzero.any() else None
    max_abs = float(magnitude[finite].max()) if finite.any() else None
    return RoundingStats(int(a.size), underflow, subnormal, overflow, nan, min_abs, max_abs)


@dataclass
class Fp8Stats:
    """What one fp8 quantisation lost (``Fp8Cast``): the scale used, saturation, underflow, error.

    ``saturated``: finite values whose scaled magnitude lies beyond what rounds
    to the format's largest value (the non-saturating rule would give NaN or
    inf; the saturating one clips them): real clipping, not the amax element
    that ``x * (max / amax)`` rounds a hair above ``max``. ``underflow``: finite
    non-zero values whose code is zero. ``mse``: mean squared error of the
    dequantised values against the source over its finite elements, and
    ``sqnr_db`` the signal-to-quantisation-noise ratio ``10 log10(mean x^2 / mse)``.
    """

    format: str                 # "e4m3" / "e5m2"
    layout: str                 # "tensor", "1x128", "128x128", "mx32"
    elements: int
    scale_min: float            # the scale(s) the values were multiplied by before the cast
    scale_max: float
    amax: "float | None"        # largest finite |source|
    saturated: int
    underflow: int
    nan: int
    mse: float
    sqnr_db: float

    @property
    def saturated_pct(self) -> float:
        return 100.0 * self.saturated / max(self.elements, 1)

    @property
    def underflow_pct(self) -> float:
        return 100.0 * self.underflow / max(self.elements, 1)


def fp8_stats(source: Any, q: Any) -> Fp8Stats:
    """:class:`Fp8Stats` of ``source`` (a float array) quantised into ``q`` (a ``kernels.fp8_quantize.Fp8Array``)."""
    from_host = backend.to_host
    a = from_host(source).astype(np.float32)
    deq = from_host(fp8_quantize.dequantize(q)).astype(np.float64).reshape(a.shape)
    scale32 = from_host(q.scales())
    scale = scale32.astype(np.float64)
    codes = from_host(q.data).reshape(-1)
    with np.errstate(all="ignore"):
        finite = np.isfinite(a).reshape(-1)
        flat = a.reshape(-1)
        scaled = (flat * _scale_per_element(q, scale32, a.shape)).astype(np.float32)
        beyond = fp8.encode(scaled, q.fmt.dtype, saturate=False)
        values = fp8.decode(beyond, q.fmt.dtype)
        saturated = int(np.count_nonzero(finite & ~np.isfinite(values)))
        zero_code = (codes & 0x7F) == 0
        underflow = int(np.count_nonzero(finite & (flat != 0) & zero_code))
        src = flat.astype(np.float64)[finite]
        err = deq.reshape(-1)[finite] - src
        mse = float(np.mean(err * err)) if src.size else 0.0
        power = float(np.mean(src * src)) if src.size else 0.0
    sqnr = float("inf") if mse == 0 else (10 * np.log10(power / mse) if power > 0 else float("-inf"))
    finite_scale = scale[np.isfinite(scale)]
    return Fp8Stats(q.fmt.name, q.layout, int(flat.size), float(finite_scale.min()) if finite_scale.size else np.nan,
                    float(finite_scale.max()) if finite_scale.size else np.nan,
                    float(np.abs(src).max()) if src.size else None, saturated, underflow,
                    int(np.count_nonzero(np.isnan(flat))), mse, float(sqnr))


def _scale_per_element(q: Any, scale: np.ndarray, shape: tuple) -> np.ndarray:
    """The scale each element was multiplied by (per tensor: one; blocks: repeated over each block)."""
    if q.block is None:
        return np.float32(scale.reshape(-1)[0])
    rows, cols = q.block
    k = shape[-1]
    m = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    full = np.repeat(np.repeat(scale.astype(np.float32), rows, axis=0), cols, axis=1)[:m, :k]
    return full.reshape(-1)
