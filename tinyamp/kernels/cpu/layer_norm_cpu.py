"""Layer norm on NumPy arrays: one numba pass over the rows each way (the loops: ``nn_numba.py``).

x is read as ``rows`` rows of ``n`` contiguous values (a non-contiguous input is copied once). Each
row's mean and variance are summed in float64 and stored in the compute dtype (float32, or float64
for float64 input); the output is ``(x - mean) rstd w + b`` in the compute dtype, rounded once. The
backward reads each row twice (its two sums, then dx) and adds into float64 column sums for dw and
db, rounded once at the end. ``cpu_numba.load`` must have run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import dtypes as dt
from .gelu_cpu import bits
from .nn_numba import KERNELS

_NONE = np.zeros(1, np.float32)      # stands for an absent weight or bias (never read)
_NONE.flags.writeable = False
_NO_SUM = np.zeros(0, np.float64)    # an absent dw or db: the kernel skips its column sums


def _rows(x: Any, ndim: int) -> tuple:
    n = math.prod(x.shape[x.ndim - ndim:])
    return math.prod(x.shape[:x.ndim - ndim]), n, x.shape[:x.ndim - ndim] + (1,) * ndim


def forward(x: Any, ndim: int, weight: Any, bias: Any, eps: float) -> tuple:
    """(y, mean, rstd) over the last ``ndim`` dims; mean and rstd keep x's leading dims."""
    rows, n, stat_shape = _rows(x, ndim)
    cdt = dt.opmath_dtype(x.dtype)
    y = np.empty(x.shape, x.dtype)
    mean = np.empty(rows, cdt)
    rstd = np.empty(rows, cdt)
    KERNELS["layer_norm"](bits(x), _NONE if weight is None else bits(weight), _NONE if bias is None else bits(bias),
                          weight is not None, bias is not None, rows, n, float(eps), bits(y), mean, rstd)
    return y, mean.reshape(stat_shape), rstd.reshape(stat_shape)


def backward(gy: Any, x: Any, mean: Any, rstd: Any, weight: Any, ndim: int, bias_dtype: Any) -> tuple:
    """(dx, dw, db); dw and db None without weight / bias."""
    rows, n, _ = _rows(x, ndim)
    dx = np.empty(x.shape, x.dtype)
    dw = np.zeros(n, np.float64) if weight is not None else _NO_SUM
    db = np.zeros(n, np.float64) if bias_dtype is not None else _NO_SUM
    KERNELS["layer_norm_backward"](bits(gy), bits(x), mean.reshape(-1), rstd.reshape(-1),
                                   _NONE if weight is None else bits(weight), weight is not None, rows, n,
                                   bits(dx), True, dw, db)
    shape = x.shape[x.ndim - ndim:]
    return (dx, None if weight is None else dw.astype(weight.dtype).reshape(weight.shape),
            None if bias_dtype is None else db.astype(bias_dtype).reshape(shape))
