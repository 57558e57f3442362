"""Embedding lookup and its weight gradient (a scatter-add): the dispatch and the reference numerics.

- :func:`forward` ``(idx, weight, check) -> (y, idx_read, poison)``: ``y = weight[idx]``. With ``check``, an
  index outside [0, rows) is refused on the host (:class:`IndexOutOfRange`, a host check is free
  there); on a GPU it reads row 0 and its output row is NaN (``poison`` marks those positions, and the
  backward makes their gradient NaN too, so GradScaler skips the step), without a host sync.
- :func:`backward` ``(gy, idx, rows, padding_idx, poison) -> dweight``: ``dweight[idx[i]] += gy[i]``,
  repeated indices accumulated in float32 (float64 for float64) and rounded once to gy's dtype; the
  ``padding_idx`` row is zero.
- CPU (NumPy arrays): one numba pass over the indices (``cpu/embedding_cpu.py``).
- CuPy arrays of float16/bfloat16/float32 with int64/int32 indices: one CUDA launch each way
  (``cuda/cuda_embedding.py``: the gather gives NaN rows for out-of-range indices without a poison
  array; the scatter-add is deterministic, numpy.add.at's order); other arrays: ``cupyx.scatter_add``
  (through tinyamp.backend) and the xp expressions below.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .cuda import cuda_embedding

__all__ = ["IndexOutOfRange", "forward", "backward"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_embedding.py); False sends every array to the xp expressions below (a
# test shows what the launch budget loses without them).
FUSED_ON_GPU = True


class IndexOutOfRange(Exception):
    """An index outside [0, rows) (the host path's check); ``value`` is the first one."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def forward(idx: Any, weight: Any, check: bool = True) -> tuple:
    """(weight[idx], the indices read, poison): poison marks out-of-range positions on a GPU, else None."""
    if FUSED_ON_GPU and weight.ndim == 2 and cuda_embedding.takes(idx, weight):
        # One launch; an out-of-range index gives a NaN row (check or not), and the backward's kernel,
        # reading the same indices, sends NaN into row 0: no poison array is needed.
        return cuda_embedding.gather(weight, idx), idx, None
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
    dim = gy.shape[-1]
    if FUSED_ON_GPU and poison is None and cuda_embedding.takes(idx, gy.reshape(-1, dim)):
        return cuda_embedding.scatter_add(gy.reshape(-1, dim), idx, rows, padding_idx)  # deterministic, one launch
    xp = backend.array_module(gy)
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
