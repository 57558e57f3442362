"""``cupy.random`` of the stand-in: ``default_rng(seed)`` and the Generator methods tinyamp draws with.

Numbers come from NumPy's PCG64 seeded the same way, so a stand-in run is
reproducible (CuPy's own streams differ from NumPy's, and tinyamp promises
reproducibility per device, not across devices). Each draw is generated "on
the device": one launch and one allocation, no host-to-device copy. CuPy's
Generator has no ``permutation`` or ``normal``; neither has this one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import adopt, ndarray

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _float_dtype(dtype: Any, method: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"cupy.random.Generator.{method}: dtype must be float32 or float64, got {dtype}")
    return dtype


class Generator:
    """``cupy.random.Generator``: ``random``, ``uniform``, ``standard_normal``, ``integers``."""

    def __init__(self, seed: Any = None) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        return adopt(self._rng.random(size, dtype=_float_dtype(dtype, "random")), "random")

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = np.float64) -> ndarray:
        return adopt(self._rng.uniform(low, high, size).astype(_float_dtype(dtype, "uniform")), "uniform")

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        return adopt(self._rng.standard_normal(size, dtype=_float_dtype(dtype, "standard_normal")),
                     "standard_normal")

    def integers(self, low: int, high: "int | None" = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> ndarray:
        return adopt(self._rng.integers(low, high, size, dtype=dtype, endpoint=endpoint), "integers")


def default_rng(seed: Any = None) -> Generator:
    return Generator(seed)
