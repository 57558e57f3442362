"""erf and GELU (exact and tanh) on NumPy arrays: one numba pass each way (the loops: ``nn_numba.py``).

Every element is widened exactly, computed in float64 with ``nn_numba``'s erf and tanh, and rounded
once to the output's format. The functions take NumPy arrays of one floating dtype (a
non-contiguous input is copied once) and return new arrays; ``cpu_numba.load`` must have run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes as dt
from .nn_numba import KERNELS


def bits(a: Any) -> Any:
    """A C-contiguous 1-D view numba reads: float16 as uint16, bfloat16 as int16 (the formats' bits)."""
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype == dt.float16:
        return a.view(np.uint16)
    if a.dtype == dt.bfloat16:
        return a.view(np.int16)
    return a


def erf(x: Any, out_dtype: Any) -> Any:
    """erf(x) in ``out_dtype`` (x floating)."""
    out = np.empty(x.shape, out_dtype)
    KERNELS["erf"](bits(x), bits(out))
    return out


def gelu(x: Any, approximate: str) -> Any:
    """gelu(x) in x's dtype."""
    out = np.empty(x.shape, x.dtype)
    KERNELS["gelu_tanh" if approximate == "tanh" else "gelu"](bits(x), bits(out))
    return out


def gelu_backward(gy: Any, x: Any, approximate: str) -> Any:
    """gy * gelu'(x) in gy's dtype (gy and x of one shape)."""
    out = np.empty(gy.shape, gy.dtype)
    KERNELS["gelu_tanh_backward" if approximate == "tanh" else "gelu_backward"](bits(gy), bits(x), bits(out))
    return out
