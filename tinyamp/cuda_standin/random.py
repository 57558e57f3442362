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

from . import _capture
from ._array import ndarray, produce

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

    def _draw(self, kernel: str, draw: Any) -> ndarray:
        """One drawing kernel. CuPy keeps a generator's state on the device, so a capture does not advance
        it (its state comes back when the capture ends) and each replay draws the next numbers."""
        if _capture.active is not None:
            state = self._rng.bit_generator.state
            _capture.on_rollback(self, lambda: setattr(self._rng.bit_generator, "state", state))
        return produce(kernel, draw)

    def random(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        dtype = _float_dtype(dtype, "random")
        return self._draw("random", lambda: self._rng.random(size, dtype=dtype))

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = np.float64) -> ndarray:
        dtype = _float_dtype(dtype, "uniform")
        return self._draw("uniform", lambda: self._rng.uniform(low, high, size).astype(dtype))

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        dtype = _float_dtype(dtype, "standard_normal")
        return self._draw("standard_normal", lambda: self._rng.standard_normal(size, dtype=dtype))

    def integers(self, low: int, high: "int | None" = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> ndarray:
        return self._draw("integers", lambda: self._rng.integers(low, high, size, dtype=dtype, endpoint=endpoint))


def default_rng(seed: Any = None) -> Generator:
    return Generator(seed)
