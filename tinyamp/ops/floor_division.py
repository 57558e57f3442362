"""Floor division and remainder: ``a // b`` and ``a % b``, with Python's sign rule.

``floor_divide(a, b) = floor(a / b)`` and ``remainder(a, b) = a - floor(a / b) * b``,
so a remainder takes the divisor's sign (Python's ``%``, ``torch.remainder``).
The everyday use is on integers (``torch.arange(n) % k`` to make labels, bucket
indices), where neither op records a gradient. On floating tensors remainder is
differentiable (``da = gy``, ``db = -gy * floor(a / b)``, PyTorch's formula) and
floor division is not (PyTorch has no derivative for it either).
"""

from __future__ import annotations

from typing import Any

from ..precision import PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting, sum_to


class FloorDivide(Function):
    """y = floor(a / b); not differentiable (piecewise constant, as in PyTorch)"""

    precision = PROMOTE
    name = "floor_divide"

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("floor_divide", xp.floor_divide, a, b)

    def backward(self, gy: Tensor) -> tuple:
        raise RuntimeError("the derivative for 'floor_divide' is not implemented (it is zero almost "
                           "everywhere, as in PyTorch); detach() its inputs or use div() for a gradient")


class Remainder(Function):
    """y = a - floor(a / b) * b; da = gy, db = -gy * floor(a / b)"""

    precision = PROMOTE
    save_inputs = (0, 1)
    saved_input_needed_by = {0: (1,), 1: (1,)}  # da = gy needs neither operand

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("remainder", xp.remainder, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = self.input_shapes
        da = sum_to(gy, a_shape) if self.needs_input_grad[0] else None
        db = None
        if self.needs_input_grad[1]:
            a, b = self.saved_tensors
            quotient = FloorDivide()(a.detach(), b.detach())  # a constant: no gradient flows through it
            db = sum_to(-gy * quotient, b_shape)
        return da, db


def floor_divide(input: Any, other: Any) -> Tensor:  # noqa: A002 - torch names
    """``input // other`` rounded towards minus infinity (PyTorch's ``floor_divide``)."""
    return FloorDivide()(input, other)


def remainder(input: Any, other: Any) -> Tensor:  # noqa: A002
    """``input % other`` with the sign of ``other`` (Python's and PyTorch's rule)."""
    return Remainder()(input, other)


METHODS = {"floor_divide": floor_divide, "remainder": remainder}
