"""Embedding lookup and its weight gradient (a scatter-add): the dispatch, the reference numerics, the index check.

- :func:`forward` ``(idx, weight, check) -> (y, idx_read, poison)``: ``y = weight[idx]``. With ``check``, an
  index outside ``0..rows-1`` raises ``IndexError`` at once on the CPU (a host check is free there); on a
  GPU the check stays on the device (:func:`checked_indices`: a host read per step would cost a
  synchronisation): the first bad index goes to a persistent device flag that the next host read turns
  into the same ``IndexError`` (``backend.defer_device_check``), as PyTorch's device-side assert surfaces
  at its next synchronisation, and the rows read that way are NaN.
- :func:`backward` ``(gy, idx, rows, padding_idx, poison) -> dweight``: ``dweight[idx[i]] += gy[i]``,
  repeated indices accumulated in float32 (float64 for float64) and rounded once to gy's dtype; the
  ``padding_idx`` row is zero; a bad index's gradient reaches no row.
- CuPy arrays of float16/bfloat16/float32 with int64/int32 indices: one CUDA launch each way
  (``cuda/cuda_embedding.py``: the gather gives NaN rows for out-of-range indices without a poison
  array; the scatter-add is deterministic, numpy.add.at's order, and skips bad indices), after the
  device check's few small launches; other arrays: ``cupyx.scatter_add`` (through tinyamp.backend) or
  ``numpy.add.at`` and the xp expressions below.
- CPU (NumPy arrays): the backward is one numba pass over the indices (``cpu/embedding_cpu.py``), then
  one rounding pass for a 16-bit gradient.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import backend
from .. import dtypes as dt
from .cuda import cuda_embedding, cuda_launch
from .convert import convert
from .cpu import cpu_path, embedding_cpu

__all__ = ["out_of_range", "checked_indices", "forward", "backward"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_embedding.py); False sends every array to the xp
# expressions below (a test shows what the launch budget loses without them).
FUSED_ON_GPU = True


def out_of_range(value: int, weight_shape: tuple, index_shape: tuple) -> IndexError:
    return IndexError(f"embedding: index {value} is out of range for a weight of shape {list(weight_shape)} (valid "
                      f"indices 0..{weight_shape[0] - 1}); indices shape {list(index_shape)}")


def checked_indices(xp: Any, idx: Any, weight_shape: tuple) -> "tuple[Any, Any]":
    """(indices safe to gather with, the mask of out-of-range positions or None) for ``idx`` into ``weight_shape``."""
    rows = weight_shape[0]
    bad = (idx < 0) | (idx >= rows)
    if not cuda_launch.on_gpu(idx):
        if bad.any():
            raise out_of_range(int(idx[bad].reshape(-1)[0]), weight_shape, idx.shape)
        return idx, None
    dev = cuda_launch._device(idx)
    flag = cuda_launch.device_zeros(dev, "embedding_index_error", 2, np.int64)  # (found, first bad index)
    flat = bad.reshape(-1)
    first = xp.argmax(flat)
    found = flat[first]
    xp.copyto(flag[1], idx.reshape(-1)[first], casting="unsafe", where=found & (flag[0] == 0))  # the first
    xp.copyto(flag[0], found, casting="unsafe", where=found)  # since the last host read
    backend.defer_device_check(("embedding", dev.id), _error_check(flag, weight_shape, idx.shape))
    return xp.where(bad, 0, idx), bad


def _error_check(flag: Any, weight_shape: tuple, index_shape: tuple) -> Callable[[], "IndexError | None"]:
    """What the next host read runs (it waited for the device already: ``blocking=False``); resets the flag."""
    def check() -> "IndexError | None":
        found, value = (int(v) for v in flag.get(blocking=False))
        if not found:
            return None
        flag.fill(0)
        return out_of_range(value, weight_shape, index_shape)
    return check


def forward(idx: Any, weight: Any, check: bool = True) -> tuple:
    """(weight[idx], the indices read, poison): poison marks out-of-range positions on a GPU, else None."""
    xp = backend.array_module(weight)
    if FUSED_ON_GPU and weight.ndim == 2 and cuda_embedding.takes(idx, weight):
        if check and idx.size:
            checked_indices(xp, idx, weight.shape)  # the device flag only: the kernels handle bad indices
        # One launch; an out-of-range index gives a NaN row (check or not), and the backward's kernel, reading
        # the same indices, sends its gradient nowhere: no poison array is needed.
        return cuda_embedding.gather(weight, idx), idx, None
    poison = None
    if check and idx.size:
        idx, poison = checked_indices(xp, idx, weight.shape)
    out = weight[idx]
    if poison is not None and weight.dtype in dt.FLOATING:
        out = xp.where(poison[..., None], weight.dtype.type(np.nan), out)  # a scalar: no upload
    return out, idx, poison


def backward(gy: Any, idx: Any, rows: int, padding_idx: "int | None", poison: Any = None) -> Any:
    """The (rows, dim) weight gradient of ``weight[idx]`` in gy's dtype."""
    if not backend.is_cupy_array(gy) and cpu_path.numba_takes(gy, idx):
        acc = embedding_cpu.backward(gy, idx, rows, padding_idx)
        return acc if acc.dtype == gy.dtype else convert(acc, gy.dtype)
    dim = gy.shape[-1]
    xp = backend.array_module(gy)
    if FUSED_ON_GPU and poison is None and cuda_launch.on_gpu(gy):
        dense = xp.ascontiguousarray(gy.reshape(-1, dim))  # a sum's gradient is a broadcast view: made dense
        if cuda_embedding.takes(idx, dense):
            return cuda_embedding.scatter_add(dense, idx, rows, padding_idx)  # deterministic, one launch
    acc = dt.opmath_dtype(gy.dtype)
    out = xp.zeros((rows, dim), dtype=acc)
    values = gy.reshape(-1, dim).astype(acc, copy=False)
    if poison is not None:  # out-of-range indices on a GPU (see forward): their gradient goes to no row
        values = xp.where(poison.reshape(-1, 1), np.dtype(acc).type(0), values)
    if backend.is_cupy_array(out):
        backend.cuda_lib("cupyx").scatter_add(out, idx.reshape(-1), values)
    else:
        np.add.at(out, idx.reshape(-1), values)
    if padding_idx is not None:
        out[padding_idx] = 0
    return out.astype(gy.dtype, copy=False)
