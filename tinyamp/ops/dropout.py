"""Dropout: zero each element with probability p and scale the rest by 1 / (1 - p).

The mask comes from the device's seedable generator
(``tinyamp.random.default_generator``), so ``ta.manual_seed(s)`` reproduces a
run. Dropout is NEUTRAL: it moves no values between dtypes and does no
accumulation, so it runs in whatever dtype arrives (as in PyTorch, where it is
on no autocast list).

Backward reads only the boolean keep-mask (one byte an element, never x). For
float16/bfloat16 the scale is applied in float32 and the product rounded once,
as PyTorch's kernels do: rounding 1 / (1 - p) itself to bfloat16 first would bias
every kept activation (1 / 0.9 becomes 1.109, 0.15% low).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..random import default_generator
from ..tensor import Tensor
from .cast import cast


class Dropout(Function):
    """y = x * m / (1 - p), m ~ Bernoulli(1 - p); dx = gy * m / (1 - p)"""

    precision = NEUTRAL

    def __init__(self, p: float) -> None:
        self.p = p
        self.scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype not in dt.FLOATING:  # x / (1 - p) would be truncated (PyTorch refuses too)
            raise TypeError(f"dropout: expected a floating input, got {dt.dtype_name(x.dtype)} of shape "
                            f"{list(x.shape)}")
        rng = default_generator(backend.device_of(x)).rng
        self.keep = rng.random(x.shape, dtype=xp.float32) >= self.p
        return xp.where(self.keep, dt.opmath(x) * self.scale, 0).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        low = dt.is_low_precision(gy.dtype)
        xp = backend.array_module(gy.array)
        mask = Tensor._wrap(xp.where(self.keep, self.scale, 0).astype(dt.float32 if low else gy.dtype))
        return cast(cast(gy, dt.float32) * mask, gy.dtype) if low else gy * mask


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Randomly zero elements with probability ``p`` while training; identity otherwise."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    result = Dropout(float(p))(input)
    # In place: Tensor.copy_ writes the result into input and, when autograd
    # records the write, routes input's later gradients through this Dropout.
    return input.copy_(result) if inplace else result


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
