"""Casts and device moves: ordinary differentiable nodes whose backward undoes them.

This file is tinyamp's AMP in miniature (after Chainer's ``cast.py``): autocast
inserts ``Cast`` nodes on the tape, and because a Cast's backward casts the
gradient back to the source dtype, float32 parameters receive float32 gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels import fp8
from ..kernels.convert import convert
from ..precision import NEUTRAL
from ..tensor import Tensor


class Cast(Function):
    """y = x as dtype; dx = gy as x's dtype"""

    precision = NEUTRAL

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.dtype
        if self.dtype in dt.FP8 or x.dtype in dt.FP8:
            return fp8.cast(x, self.dtype)  # into fp8: round to nearest even, saturating (TE's rule)
        return convert(x, self.dtype)  # astype, bit for bit, faster on the CPU

    def backward(self, gy: Tensor) -> Tensor:
        return gy if gy.dtype == self.source else Cast(self.source)(gy)


class CachedCast(Cast):
    """y = x as dtype, a conversion made earlier (the weight-cast cache's); dx = gy as x's dtype"""

    name = "cast"

    def __init__(self, dtype: np.dtype, array: Any) -> None:
        super().__init__(dtype)
        self.array = array

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.dtype
        return self.array


class ToDevice(Function):
    """y = x on another device; dx = gy moved back"""

    precision = NEUTRAL
    name = "to_device"

    def __init__(self, device: backend.Device) -> None:
        self.device = device

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = backend.device_of(x)
        return backend.to_device(x, self.device)

    def backward(self, gy: Tensor) -> Tensor:
        return to_device(gy, self.source)


class Clone(Function):
    """y = copy of x; dx = gy"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return x.copy()

    def backward(self, gy: Tensor) -> Tensor:
        return gy


def cast(x: Tensor, dtype: Any) -> Tensor:
    """``x`` in ``dtype`` (recorded: the gradient comes back in ``x``'s dtype)."""
    dtype = dt.as_dtype(dtype)
    if x.dtype == dtype:
        return x
    return Cast(dtype)(x)


def to_device(x: Tensor, device: Any) -> Tensor:
    device = backend.Device(device)
    if x.device == device:
        return x
    return ToDevice(device)(x)


def clone(x: Tensor) -> Tensor:
    return Clone()(x)
