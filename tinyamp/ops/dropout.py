"""Dropout: zero each element (or each channel) with probability p and scale the rest by 1 / (1 - p).

``dropout1d``/``dropout2d`` zero whole channels: the keep-mask has shape
(N, C, 1) or (N, C, 1, 1) and broadcasts over the channel's values.

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
    """y = x * m / (1 - p), m ~ Bernoulli(1 - p) per element or per channel; dx = gy * m / (1 - p)"""

    precision = NEUTRAL

    def __init__(self, p: float, mask_shape: "tuple | None" = None) -> None:
        self.p, self.mask_shape = p, mask_shape
        self.scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype not in dt.FLOATING:  # x / (1 - p) would be truncated (PyTorch refuses too)
            raise TypeError(f"dropout: expected a floating input, got {dt.dtype_name(x.dtype)} of shape "
                            f"{list(x.shape)}")
        rng = default_generator(backend.device_of(x)).rng
        shape = x.shape if self.mask_shape is None else self.mask_shape
        self.keep = rng.random(shape, dtype=xp.float32) >= self.p
        return xp.where(self.keep, dt.opmath(x) * self.scale, 0).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        low = dt.is_low_precision(gy.dtype)
        xp = backend.array_module(gy.array)
        mask = Tensor._wrap(xp.where(self.keep, self.scale, 0).astype(dt.float32 if low else gy.dtype))
        if mask.shape != gy.shape:  # a channel mask: spread over each channel's values
            mask = Tensor._wrap(xp.broadcast_to(mask.array, gy.shape))
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


def _channel_dropout(op: str, input: Tensor, p: float, training: bool, inplace: bool,  # noqa: A002
                     batched_ndim: int) -> Tensor:
    """Zero whole channels (dim -batched_ndim + 1 of a batched input, dim 0 of an unbatched one)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (batched_ndim - 1, batched_ndim):
        raise RuntimeError(f"{op}: Expected {batched_ndim - 1}D or {batched_ndim}D input, but received a "
                           f"{input.ndim}D input of shape {list(input.shape)}")
    if not training or p == 0.0:
        return input
    channels = 1 if input.ndim == batched_ndim else 0  # the dim that holds channels
    mask_shape = input.shape[:channels + 1] + (1,) * (input.ndim - channels - 1)
    result = Dropout(float(p), mask_shape)(input)
    return input.copy_(result) if inplace else result


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of (N, C, L) or (C, L) input with probability ``p`` while training."""
    return _channel_dropout("dropout1d", input, p, training, inplace, 3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of (N, C, H, W) or (C, H, W) input with probability ``p`` while training.

    PyTorch treats a 3-D input as (N, C, L) with a warning (channel-wise 1-D
    dropout); tinyamp does the same without the warning."""
    if input.ndim == 3:
        return _channel_dropout("dropout2d", input, p, training, inplace, 3)
    return _channel_dropout("dropout2d", input, p, training, inplace, 4)


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
