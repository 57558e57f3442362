"""``cupy.lib`` of the stand-in: ``stride_tricks.as_strided`` (a view, checked against its allocation)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from ._array import ndarray
from ._memory import resolve


def as_strided(x: ndarray, shape: Any = None, strides: Any = None) -> ndarray:
    """A view of ``x``'s memory with the given shape and strides (no copy)."""
    if type(x) is not ndarray:
        raise TypeError(f"cupy.lib.stride_tricks.as_strided: expected a cupy.ndarray, got {type(x)}")
    view = np.lib.stride_tricks.as_strided(x._a, shape, strides)
    if view.size and x._data.mem.buffer is not None:
        low = sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s < 0)
        high = sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s > 0) + view.itemsize
        start = view.__array_interface__["data"][0] + low
        resolve(start, high - low, "as_strided")  # a GPU would read outside the allocation
    return x._view(view)


stride_tricks = types.SimpleNamespace(as_strided=as_strided)
