"""``cupy.linalg`` of the stand-in: ``norm`` (one reduction)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import ndarray, produce, quiet_call


def norm(x: ndarray, ord: Any = None, axis: Any = None, keepdims: bool = False) -> ndarray:  # noqa: A002
    if type(x) is not ndarray:
        raise TypeError(f"cupy.linalg.norm: expected a cupy.ndarray, got {type(x)}")
    view = x._a
    return produce("norm", lambda: quiet_call(np.linalg.norm, view, ord=ord, axis=axis, keepdims=keepdims), x)
