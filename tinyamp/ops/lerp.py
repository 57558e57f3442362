"""Linear interpolation: ``lerp(start, end, weight)`` (``Tensor.lerp`` and, in place, ``Tensor.lerp_``).

``weight`` is a Python number or a tensor; start, end and a tensor weight
broadcast together. The formula switches at ``|w| = 0.5`` as PyTorch's kernel
does, so ``w = 1`` gives ``end`` exactly and ``w = 0`` gives ``start``
exactly. float16/bfloat16 are computed in float32 and rounded once.

Tag: PROMOTE. PyTorch's autocast lists do not name lerp, and its kernel
refuses operands of different dtypes; tinyamp promotes them to the widest
float, as it does for every arithmetic op (an exponential moving average of
float16 weights into float32 ones works instead of raising).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..precision import PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting, sum_to


class Lerp(Function):
    """y = a + w (b - a) (|w| < 0.5), b - (b - a)(1 - w) otherwise; da = gy (1 - w), db = gy w, dw = gy (b - a)"""

    precision = PROMOTE

    def __init__(self, weight: "float | None") -> None:
        # A number weight is a constant of the op; None: the weight is the third input.
        self.weight = weight
        self.save_inputs = () if weight is not None else (0, 1, 2)

    def forward(self, xp: Any, start: Any, end: Any, weight: Any = None) -> Any:
        operands = (start, end) if weight is None else (start, end, weight)
        if start.dtype not in dt.FLOATING:
            described = ", ".join(f"{list(a.shape)} {dt.dtype_name(a.dtype)}" for a in operands)
            raise TypeError(f"lerp: expected floating point tensors, got {described}")
        compute = dt.float32 if dt.is_low_precision(start.dtype) else start.dtype

        def interpolate(a: Any, b: Any, w: Any = self.weight) -> Any:
            a, b = a.astype(compute, copy=False), b.astype(compute, copy=False)
            diff = b - a
            if isinstance(w, (int, float)):
                return a + w * diff if abs(w) < 0.5 else b - diff * (1 - w)
            w = w.astype(compute, copy=False)
            return xp.where(xp.abs(w) < 0.5, a + w * diff, b - diff * (1 - w))

        return broadcasting("lerp", interpolate, *operands).astype(start.dtype, copy=False)

    def backward(self, gy: Tensor) -> tuple:
        shapes = list(self.input_shapes)
        if self.weight is not None:
            w = self.weight
            return (sum_to(gy * (1 - w), shapes[0]) if self.needs_input_grad[0] else None,
                    sum_to(gy * w, shapes[1]) if self.needs_input_grad[1] else None)
        a, b, w = self.saved_tensors
        needs = self.needs_input_grad
        return (sum_to(gy * (1 - w), shapes[0]) if needs[0] else None,
                sum_to(gy * w, shapes[1]) if needs[1] else None,
                sum_to(gy * (b - a), shapes[2]) if needs[2] else None)


def lerp(input: Tensor, end: Tensor, weight: "float | Tensor") -> Tensor:  # noqa: A002 - torch name
    """input + weight * (end - input), elementwise with broadcasting."""
    if isinstance(weight, Tensor):
        return Lerp(None)(input, end, weight)
    if isinstance(weight, (bool, np.bool_)) or not isinstance(weight, (int, float, np.number)):
        raise TypeError(f"lerp: weight must be a number or a Tensor, got {type(weight).__name__}")
    return Lerp(float(weight))(input, end)


METHODS = {"lerp": lerp}
