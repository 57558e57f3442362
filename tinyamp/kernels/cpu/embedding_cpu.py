"""Embedding's weight gradient on NumPy arrays: one numba pass over the indices (the loop: ``nn_numba.py``).

Each position's gradient row is added into the row its index read, in the compute dtype (float32,
float64 for float64), so repeated indices accumulate in order; the sum is rounded once to the
gradient's dtype by the caller. The indices were checked by the forward (they are in range).
``cpu_numba.load`` must have run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes as dt
from .gelu_cpu import bits
from .nn_numba import KERNELS


def backward(gy: Any, idx: Any, rows: int, padding_idx: "int | None") -> Any:
    """The (rows, dim) weight gradient of ``weight[idx]``, in gy's compute dtype (float32 or float64)."""
    dim = gy.shape[-1] if gy.ndim else 1
    acc = np.zeros((rows, dim), dt.opmath_dtype(gy.dtype))
    KERNELS["embedding_backward"](bits(gy), np.ascontiguousarray(idx).reshape(-1).astype(np.int64, copy=False),
                                  dim, acc)
    if padding_idx is not None:
        acc[padding_idx] = 0
    return acc
