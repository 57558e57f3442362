"""Dropout: zero each element with probability p and scale the rest by 1 / (1 - p).

The mask comes from the device's seedable generator
(``tinyamp.random.default_generator``), so ``ta.manual_seed(s)`` reproduces a
run. Dropout is NEUTRAL: it moves no values between dtypes and does no
accumulation, so it runs in whatever dtype arrives (as in PyTorch, where it is
on no autocast list). Backward multiplies by the saved scaled mask, not by x.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..amp.policy import NEUTRAL
from ..autograd.function import Function
from ..backend import device_of
from ..random import default_generator
from ..tensor import Tensor


def scaled_mask(xp: Any, x: Any, p: float) -> Any:
    """1 / (1 - p) where an element is kept (probability 1 - p), 0 where it is dropped."""
    rng = default_generator(device_of(x)).rng
    keep = rng.random(x.shape, dtype=xp.float32) >= p
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return keep.astype(x.dtype) * xp.asarray(scale, dtype=x.dtype)


class Dropout(Function):
    """y = x * m / (1 - p), m ~ Bernoulli(1 - p); dx = gy * m / (1 - p)"""

    precision = NEUTRAL

    def __init__(self, p: float) -> None:
        self.p = p

    def forward(self, xp: Any, x: Any) -> Any:
        # The scaled mask in x's dtype: what backward multiplies by (x itself is not kept).
        self.mask = scaled_mask(xp, x, self.p)
        return x * self.mask

    def backward(self, gy: Tensor) -> Tensor:
        return gy * Tensor._wrap(self.mask)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Randomly zero elements with probability ``p`` while training; identity otherwise."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if not inplace:
        return Dropout(float(p))(input)
    # In place: multiply by the mask with Tensor.mul_, which records the write when needed.
    return input.mul_(Tensor._wrap(scaled_mask(backend.array_module(input.data), input.data, float(p))))


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
