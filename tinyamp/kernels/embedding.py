"""The index check of an embedding lookup: refused on the CPU, flagged on a GPU, never read out of bounds.

On the CPU (a host check is free) an index outside ``0..rows-1`` raises
``IndexError`` at once. On a GPU the check stays on the device (a host read per
step would cost a synchronisation): :func:`checked_indices` returns the indices
with each bad one replaced by 0 (so the gather reads inside the weight) and the
mask of bad positions, and records the first bad index in a persistent device
flag that the next host read turns into the same ``IndexError``
(``backend.defer_device_check``), as PyTorch's device-side assert surfaces at
its next synchronisation. The op makes the rows read that way NaN and sends
their gradient nowhere: no row of the weight's gradient, row 0 included, gets
anything from a bad index.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import backend
from .cuda import cuda_launch


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
