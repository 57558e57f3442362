"""Elementwise arithmetic and math: one Function per op, derivatives beside forwards.

Binary ops broadcast with PyTorch's rules and reduce gradients back with
``sum_to``; operands that cannot broadcast are an error naming the op and shapes.
"""

from __future__ import annotations

from typing import Any

from ..amp.policy import FP32, NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import sum_to


def _binary(op: str, ufunc: Any, a: Any, b: Any) -> Any:
    try:
        return ufunc(a, b)
    except ValueError:
        raise ValueError(f"{op}: operands with shapes {list(a.shape)} and {list(b.shape)} cannot be "
                         f"broadcast together (dtypes {a.dtype}, {b.dtype})") from None


class Add(Function):
    """y = a + b; da = gy, db = gy"""

    precision = PROMOTE

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return _binary("add", xp.add, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = (m[0] for m in self._input_meta)
        return sum_to(gy, a_shape), sum_to(gy, b_shape)


class Sub(Function):
    """y = a - b; da = gy, db = -gy"""

    precision = PROMOTE

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return _binary("sub", xp.subtract, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = (m[0] for m in self._input_meta)
        return sum_to(gy, a_shape), sum_to(-gy, b_shape)


class Mul(Function):
    """y = a * b; da = gy * b, db = gy * a"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return _binary("mul", xp.multiply, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors
        da = sum_to(gy * b, a.shape) if self.needs_input_grad[0] else None
        db = sum_to(gy * a, b.shape) if self.needs_input_grad[1] else None
        return da, db


class Div(Function):
    """y = a / b; da = gy / b, db = -gy * a / b^2"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return _binary("div", xp.true_divide, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors
        da = sum_to(gy / b, a.shape) if self.needs_input_grad[0] else None
        db = sum_to(-gy * a / (b * b), b.shape) if self.needs_input_grad[1] else None
        return da, db


class Neg(Function):
    """y = -x; dx = -gy"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.negative(x)

    def backward(self, gy: Tensor) -> Tensor:
        return -gy


class Exp(Function):
    """y = exp(x); dx = gy * y"""

    precision = FP32
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.exp(x)

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy * y


class Log(Function):
    """y = log(x); dx = gy / x"""

    precision = FP32
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.log(x)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return gy / x


def add(a: Any, b: Any, alpha: float = 1) -> Tensor:
    return Add()(a, b if alpha == 1 else b * alpha)


def sub(a: Any, b: Any, alpha: float = 1) -> Tensor:
    return Sub()(a, b if alpha == 1 else b * alpha)


def mul(a: Any, b: Any) -> Tensor:
    return Mul()(a, b)


def div(a: Any, b: Any) -> Tensor:
    return Div()(a, b)


def neg(x: Tensor) -> Tensor:
    return Neg()(x)


def exp(x: Tensor) -> Tensor:
    return Exp()(x)


def log(x: Tensor) -> Tensor:
    return Log()(x)


METHODS = {"add": add, "sub": sub, "mul": mul, "div": div, "neg": neg, "exp": exp, "log": log}
