"""``cupyx`` of the stand-in: ``scatter_add`` (NumPy's ``add.at``, one launch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import ndarray, operand
from ._counters import counters


def scatter_add(a: ndarray, slices: Any, value: Any) -> None:
    """``a[slices] += value`` with repeated indices accumulating (unbuffered)."""
    if type(a) is not ndarray:
        raise TypeError(f"cupyx.scatter_add: expected a cupy.ndarray, got {type(a)}")
    index = tuple(operand(s) if not isinstance(s, slice) else s for s in slices) if type(slices) is tuple \
        else (slices if isinstance(slices, slice) else operand(slices))
    with np.errstate(all="ignore"):
        np.add.at(a._a, index, operand(value))
    counters.launch("scatter_add")
