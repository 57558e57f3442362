"""Embedding lookup and its weight gradient (a scatter-add): the dispatch and the reference numerics.

- :func:`forward` ``(idx, weight, check) -> (y, idx_read, poison)``: ``y = weight[idx]``. With ``check``, an
  index outside [0, rows) is refused on the host (:class:`IndexOutOfRange`, a host check is free
  there); on a GPU it reads row 0 and its output row is NaN (``poison`` marks those positions, and the
  backward makes their gradient NaN too, so GradScaler skips the step), without a host sync.
- :func:`backward` ``(gy, idx, rows, padding_idx, poison) -> dweight``: ``dweight[idx[i]] += gy[i]``,
  repeated indices accumulated in float32 (float64 for float64) and rounded once to gy's dtype; the
  ``padding_idx`` row is zero.
- CPU (NumPy arrays): one numba pass over the indices (``cpu/embedding_cpu.py``).
- Other arrays (CuPy, until a CUDA kernel is added here): ``cupyx.scatter_add`` (through
  tinyamp.backend) and the xp expressions below.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt

__all__ = ["IndexOutOfRange", "forward", "backward"]


class IndexOutOfRange(Exception):
    """An index outside [0, rows) (the host path's check); ``value`` is the first one."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def forward(idx: Any, weight: Any, check: bool = True) -> tuple:
    """(weight[idx], the indices read, poison): poison marks out-of-range positions on a GPU, else None."""
    xp = backend.array_module(weight)
    rows = weight.shape[0]
    poison = None
    if check and idx.size:
        bad = (idx < 0) | (idx >= rows)
        if backend.is_cupy_array(bad):
            idx, poison = xp.where(bad, 0, idx), bad  # no host read: NaN rows instead of an error
        elif bad.any():
            raise IndexOutOfRange(int(idx[bad].reshape(-1)[0]))
    out = weight[idx]
    if poison is not None and weight.dtype in dt.FLOATING:
        out = xp.where(poison[..., None], weight.dtype.type(np.nan), out)  # a scalar: no upload
    return out, idx, poison


def backward(gy: Any, idx: Any, rows: int, padding_idx: "int | None", poison: Any = None) -> Any:
    """The (rows, dim) weight gradient of ``weight[idx]`` in gy's dtype."""
    xp = backend.array_module(gy)
    dim = gy.shape[-1]
    acc = dt.opmath_dtype(gy.dtype)
    out = xp.zeros((rows, dim), dtype=acc)
    values = gy.reshape(-1, dim).astype(acc, copy=False)
    if poison is not None:  # out-of-range indices on a GPU (see forward)
        values = xp.where(poison.reshape(-1, 1), np.dtype(acc).type(np.nan), values)
    if backend.is_cupy_array(out):
        backend.cuda_lib("cupyx").scatter_add(out, idx.reshape(-1), values)
    else:
        np.add.at(out, idx.reshape(-1), values)
    if padding_idx is not None:
        out[padding_idx] = 0
    return out.astype(gy.dtype, copy=False)
