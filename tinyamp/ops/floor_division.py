"""Floor division and remainder: ``a // b`` and ``a % b``, with Python's sign rule.

``floor_divide(a, b) = floor(a / b)`` and ``remainder(a, b) = a - floor(a / b) * b``,
so a remainder takes the divisor's sign (Python's ``%``, ``torch.remainder``).
The everyday use is on integers (``torch.arange(n) % k`` to make labels, bucket
indices), where neither op records a gradient. On floating tensors remainder is
differentiable (``da = gy``, ``db = -gy * floor(a / b)``, PyTorch's formula) and
floor division is not (PyTorch has no derivative for it either).

An integer (or bool) divisor holding a zero raises ``IntegerDivisionByZero`` on
the CPU, as PyTorch's CPU kernels do (NumPy would return 0 with a warning).
Floating operands follow IEEE 754 (``x // 0`` is +-inf, ``x % 0`` NaN). On the
GPU nothing is checked: that would read the divisor back to the host on every
call, and PyTorch's CUDA kernels do not check either.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..precision import PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting, sum_to


class IntegerDivisionByZero(ZeroDivisionError, RuntimeError):
    """An integer ``//`` or ``%`` by zero: PyTorch raises RuntimeError("ZeroDivisionError"), Python
    ZeroDivisionError, so this is both and ``except`` clauses written for either catch it."""


def _refuse_integer_zero(op: str, xp: Any, a: Any, b: Any) -> None:
    """Raise when an integer division would divide by zero (checked on the CPU only, as PyTorch)."""
    if xp is np and b.dtype.kind in "biu" and a.dtype.kind in "biu" and not b.all():
        raise IntegerDivisionByZero(
            f"ZeroDivisionError: {op}: integer division by zero ({dt.dtype_name(a.dtype)} {list(a.shape)} "
            f"by {dt.dtype_name(b.dtype)} {list(b.shape)} holding a 0); divide floating tensors for inf/nan")


class FloorDivide(Function):
    """y = floor(a / b); not differentiable (piecewise constant, as in PyTorch)"""

    precision = PROMOTE
    name = "floor_divide"

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        _refuse_integer_zero("floor_divide", xp, a, b)
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
        _refuse_integer_zero("remainder", xp, a, b)
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
