"""softmax and log_softmax on NumPy arrays: one numba pass per row each way (the loops: ``nn_numba.py``).

The softmax axis is made the last, contiguous one (a copy when it is not already; the result is
moved back), and each row is read in the compute dtype (float32, float64 for float64 input): its
maximum, then its exponentials (into a scratch row) and their float64 sum, then the output, rounded
once. ``cpu_numba.load`` must have run.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ... import dtypes as dt
from .gelu_cpu import bits
from .nn_numba import KERNELS


def _rows(run: Callable, axis: int, out_dtype: Any, *arrays: Any) -> Any:
    """Run a row kernel over ``axis`` of the arrays (one shape); returns the result in their layout."""
    last = arrays[0].ndim - 1
    if axis != last:
        arrays = tuple(np.moveaxis(a, axis, -1) for a in arrays)
    shape = arrays[0].shape
    n = shape[-1] if shape else 1
    rows = arrays[0].size // n if n else 0
    out = np.empty(shape, out_dtype)
    run(*(bits(a) for a in arrays), rows, n, bits(out))
    return out if axis == last else np.ascontiguousarray(np.moveaxis(out, -1, axis))


def softmax(x: Any, axis: int) -> Any:
    scratch = np.empty(max(x.shape[axis], 1) if x.ndim else 1, dt.opmath_dtype(x.dtype))
    return _rows(lambda xb, rows, n, ob: KERNELS["softmax"](xb, rows, n, scratch, ob), axis, x.dtype, x)


def log_softmax(x: Any, axis: int) -> Any:
    scratch = np.empty(max(x.shape[axis], 1) if x.ndim else 1, dt.opmath_dtype(x.dtype))
    return _rows(lambda xb, rows, n, ob: KERNELS["log_softmax"](xb, rows, n, scratch, ob), axis, x.dtype, x)


def softmax_backward(gy: Any, y: Any, axis: int) -> Any:
    return _rows(KERNELS["softmax_backward"], axis, gy.dtype, gy, y)


def log_softmax_backward(gy: Any, y: Any, axis: int) -> Any:
    return _rows(KERNELS["log_softmax_backward"], axis, gy.dtype, gy, y)
