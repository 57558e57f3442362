"""Casts and device moves: ordinary differentiable nodes whose backward undoes them.

This file is tinyamp's AMP in miniature (after Chainer's ``cast.py``): autocast
inserts ``Cast`` nodes on the tape, and because a Cast's backward casts the
gradient back to the source dtype, float32 parameters receive float32 gradients.

``Fp8Cast`` is the same node below 16 bits: it quantises its input with the
quantiser it carries (the recipe's rule and state: scale, amax history or block
scales; ``amp/recipe.py``) into an fp8 array that stands for the input's values
in a nominal dtype (``kernels/fp8_quantize.py``: codes and scales together); its
backward hands the gradient back in the input's dtype. Only the fp8 GEMMs
(``ops/fp8_linalg.py``) read its output; the gradient *they* receive is
quantised by another Fp8Cast, in the backward format (E5M2 under HYBRID).
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
        return gy if gy.array.dtype == self.source else Cast(self.source)(gy)


class CachedCast(Cast):
    """y = x as dtype, a conversion made earlier (the weight-cast cache's); dx = gy as x's dtype"""

    name = "cast"

    def __init__(self, dtype: np.dtype, array: Any) -> None:
        super().__init__(dtype)
        self.array = array

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.dtype
        return self.array


class Fp8Cast(Function):
    """y = quantize(x) (fp8 codes + scales standing for x in the nominal dtype); dx = gy as x's dtype"""

    precision = NEUTRAL
    name = "fp8_cast"

    def __init__(self, quantizer: Any, nominal: np.dtype, region: Any = None, cached: Any = None) -> None:
        self.quantizer, self.nominal, self.region, self.cached = quantizer, nominal, region, cached

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.dtype
        if self.cached is not None:  # the fp8 weight cache's entry: codes and scale made together earlier
            return self.cached
        return self.quantizer.quantize(x, self.nominal, self.region)

    def backward(self, gy: Tensor) -> Tensor:
        return cast(gy, self.source)


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


def fp8_cast(x: Tensor, quantizer: Any, nominal: Any = None, region: Any = None) -> Tensor:
    """``x`` quantised by ``quantizer`` (an ``amp.recipe.Quantizer``), standing for ``nominal`` (default x's dtype)."""
    return Fp8Cast(quantizer, dt.as_dtype(x.dtype if nominal is None else nominal), region)(x)


def to_device(x: Tensor, device: Any) -> Tensor:
    device = backend.Device(device)
    if x.device == device:
        return x
    return ToDevice(device)(x)


def clone(x: Tensor) -> Tensor:
    return Clone()(x)
