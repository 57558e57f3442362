"""``cupy.linalg`` of the stand-in: ``norm`` (one reduction)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import adopt, ndarray


def norm(x: ndarray, ord: Any = None, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A002
    if type(x) is not ndarray:
        raise TypeError(f"cupy.linalg.norm: expected a cupy.ndarray, got {type(x)}")
    with np.errstate(all="ignore"):
        return adopt(np.linalg.norm(x._a, ord=ord, axis=axis, keepdims=keepdims), "norm")
