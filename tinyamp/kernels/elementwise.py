"""Elementwise and reduction kernels an op calls once, on any device: which path runs is chosen here.

- :func:`relu`: ``maximum(x, 0)``;
- :func:`relu_backward`: ``gy * (y > 0)``, ReLU's gradient;
- :func:`column_sum`: the sum over the rows of a matrix (linear's bias gradient).

16-bit CPU arrays take the numba kernels of ``cpu/elementwise_cpu.py``
(NumPy's float16 loops are scalar), CUDA arrays the kernels of ``cuda/``;
everything else is the NumPy/CuPy expression the kernels reproduce.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..backend import array_module
from .convert import convert
from .cpu import elementwise_cpu
from .cuda import cuda_epilogue, cuda_launch, cuda_vector

__all__ = ["column_sum", "relu", "relu_backward"]


def relu(x: Any) -> Any:
    """``maximum(x, 0)``; a 16-bit array gives +0.0 for -0.0 (NumPy's float16 loop keeps -0.0), NaN kept."""
    if type(x) is np.ndarray:
        if x.dtype in dt.LOW_PRECISION:
            return elementwise_cpu.relu_lowp(x)  # on the bit patterns
        return np.maximum(x, 0)
    if cuda_vector.takes(x):
        return cuda_vector.relu(x)  # the CPU path's bits, 16 bytes a load
    return array_module(x).maximum(x, 0)


def relu_backward(gy: Any, y: Any) -> Any:
    """``gy * (y > 0)`` in ``gy``'s dtype (``y``: ReLU's output or input; one device).

    A 16-bit CPU pair of one dtype is ``where(y > 0, gy, 0)`` on the bit patterns
    (an inf/nan in ``gy`` at a dead unit gives 0, as in PyTorch); elsewhere the
    multiply gives nan there, which a GradScaler sees.
    """
    if type(gy) is np.ndarray:
        if gy.dtype in dt.LOW_PRECISION and gy.dtype == y.dtype:
            return elementwise_cpu.relu_backward_lowp(gy, y)
        return np.multiply(gy, y > 0, dtype=gy.dtype)
    if cuda_launch.on_gpu(gy) and gy.shape == y.shape:
        if cuda_vector.takes(gy, y):  # one dtype, contiguous: 16-byte loads and stores
            return cuda_vector.relu_backward(gy, y)
        if cuda_launch.fusable(gy, y):
            return cuda_epilogue.relu_backward(gy, y)  # one launch for the compare and the multiply
    return array_module(gy).multiply(gy, y > 0, dtype=gy.dtype)


def column_sum(x: Any) -> Any:
    """``x.sum(axis=0)`` of a 2-D array; 16-bit input accumulated in float32 and rounded once."""
    if x.shape[0] > 0 and x.shape[1] > 1:
        if type(x) is np.ndarray:
            if x.dtype in dt.LOW_PRECISION:
                # NumPy adds row by row into each column, so summing the exact widening gives the
                # same bits as sum(dtype=float32), without its per-element casting loop.
                return convert(np.add.reduce(convert(x, dt.float32), axis=0), x.dtype)
        elif cuda_vector.takes(x):
            return cuda_vector.column_sum(x, x.dtype)  # one launch
    if x.dtype in dt.LOW_PRECISION:
        return x.sum(axis=0, dtype=dt.float32).astype(x.dtype)
    return x.sum(axis=0)
