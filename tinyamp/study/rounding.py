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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt


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
