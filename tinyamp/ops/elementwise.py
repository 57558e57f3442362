"""Elementwise arithmetic and math: one Function per op, derivatives beside forwards.

Here: add, sub, mul, div, neg, exp, log, pow, log1p, sqrt, rsqrt, reciprocal,
abs, sign (and square, built on pow). Ops that select rather than compute
(maximum, minimum, clamp, where) live in ``clamp_where.py``.

Binary ops broadcast with PyTorch's rules and reduce gradients back with
``sum_to``; operands that cannot broadcast are an error naming the op and shapes.
Integer inputs of the float-valued math ops (sqrt, reciprocal...) give float32,
as in PyTorch; float16/bfloat16 inputs are computed in float32 and rounded once
where NumPy would otherwise round after every step (rsqrt).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..backend import array_module
from ..precision import FP32, NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting, sum_to
from .cast import cast
from .clamp_where import where


class Add(Function):
    """y = a + b; da = gy, db = gy"""

    precision = PROMOTE

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("add", xp.add, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = self.input_shapes
        return sum_to(gy, a_shape), sum_to(gy, b_shape)


class Sub(Function):
    """y = a - b; da = gy, db = -gy"""

    precision = PROMOTE

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("sub", xp.subtract, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = self.input_shapes
        return sum_to(gy, a_shape), sum_to(-gy, b_shape)


class Mul(Function):
    """y = a * b; da = gy * b, db = gy * a"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("mul", xp.multiply, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors
        da = sum_to(gy * b, a.shape) if self.needs_input_grad[0] else None
        db = sum_to(gy * a, b.shape) if self.needs_input_grad[1] else None
        return da, db


class ScaleBy(Function):
    """y = x * s for a 0-d array s of x's dtype and device, held by the op; dx = gy * s

    ``GradScaler.scale`` multiplies a loss by its scale with this op: the same
    product as ``mul`` (one multiply in the loss's dtype), recorded with one
    input instead of two.
    ``s`` is read when the op runs, forward and backward, as ``mul`` reads its
    saved operand (``GradScaler.update`` rewrites the scale in place). The
    scaler takes ``mul`` for anything else (a float16 output: float32 scale).
    """

    precision = NEUTRAL
    name = "scale_by"

    def __init__(self, scale: Any) -> None:
        self.scale = scale

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype != self.scale.dtype or self.scale.ndim != 0:
            raise ValueError(f"scale_by: expects a 0-d scale of the input's dtype, got input "
                             f"{dt.dtype_name(x.dtype)} {list(x.shape)} and scale "
                             f"{dt.dtype_name(self.scale.dtype)} {list(self.scale.shape)}")
        return xp.multiply(x, self.scale)

    def backward(self, gy: Tensor) -> Tensor:
        return ScaleBy(self.scale)(gy)


class Div(Function):
    """y = a / b; da = gy / b, db = -gy * a / b^2"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        # int / int is float32, as in PyTorch (NumPy's true_divide gives float64);
        # PROMOTE has already given mixed operands one dtype.
        return broadcasting("div", xp.true_divide, _float_input(a), _float_input(b))

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
        return xp.exp(_float_input(x))

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy * y


class Log(Function):
    """y = log(x); dx = gy / x"""

    precision = FP32
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.log(_float_input(x))

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return gy / x


def _float_input(x: Any) -> Any:
    """Integer inputs of float-valued math become float32 (PyTorch's result type)."""
    return x if x.dtype in dt.FLOATING else x.astype("float32")


def _zeros(like: Tensor, shape: tuple, dtype: Any) -> Tensor:
    """A constant zero gradient of an input's shape and dtype, on ``like``'s device."""
    return Tensor._wrap(like.device.xp.zeros(shape, dtype=dtype))


class Pow(Function):
    """y = a ** b (tensor exponent); da = gy * b * a^(b-1), db = gy * y * log(a)

    FP32 as in PyTorch's autocast lists: a power amplifies float16 rounding and
    overflows its range quickly. ``2 ** x`` (rpow) is this op with a constant base.
    """

    precision = FP32
    name = "pow"
    save_inputs = (0, 1)
    save_outputs = (0,)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("pow", xp.power, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b, y = self.saved_tensors
        da = db = None
        if self.needs_input_grad[0]:
            # x ** 0 is constant: PyTorch gives 0 there, where b * a^(b-1) is 0 * inf = nan
            # at a = 0. The base is swapped for 1 under the mask so no inf enters the graph.
            constant = Tensor._wrap(b.array == 0)
            safe_a = where(constant, 1.0, a)
            da = sum_to(where(constant, 0.0, gy * b * pow(safe_a, b - 1)), a.shape)
        if self.needs_input_grad[1]:
            # log(0) = -inf, but 0 ** b is flat in b for b >= 0: PyTorch masks those to 0.
            flat = Tensor._wrap((a.array == 0) & (b.array >= 0))
            safe_a = where(flat, 1.0, a)
            db = sum_to(where(flat, 0.0, gy * y * log(safe_a)), b.shape)
        return da, db


class PowScalar(Function):
    """y = x ** e (Python-number exponent); dx = gy * e * x^(e-1)

    The exponent is an argument, not an input, so ``x ** 2`` saves only ``x``
    and never takes a logarithm. Same autocast name and tag as Pow.
    """

    precision = FP32
    name = "pow"
    save_inputs = (0,)

    def __init__(self, exponent: float) -> None:
        self.exponent = exponent

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype.kind in "iu" and isinstance(self.exponent, int) and self.exponent < 0:
            raise ValueError(f"pow: integers to negative integer powers are not allowed "
                             f"({x.dtype} tensor of shape {list(x.shape)} ** {self.exponent})")
        if dt.is_low_precision(x.dtype):
            # float32 and one rounding, as PyTorch's half kernels (NumPy would also
            # promote bfloat16 ** float to float32 and leave it there).
            return xp.power(dt.opmath(x), self.exponent).astype(x.dtype)
        return xp.power(x, self.exponent)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        if self.exponent == 0:
            return _zeros(gy, self.input_shapes[0], self.input_dtypes[0])  # x ** 0 is constant (and 0 * inf would be nan)
        return gy * (pow(x, self.exponent - 1) * self.exponent)


class Log1p(Function):
    """y = log(1 + x); dx = gy / (1 + x)"""

    precision = FP32
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.log1p(_float_input(x))

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return gy / (x + 1)


class Sqrt(Function):
    """y = sqrt(x); dx = gy / (2 y)

    FP32 (PyTorch leaves sqrt in the incoming dtype): the gradient 1 / (2 sqrt(x))
    leaves float16's range for x below ~1e-9, e.g. on variance-like inputs.
    """

    precision = FP32
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.sqrt(_float_input(x))

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy / (y * 2)


class Rsqrt(Function):
    """y = 1 / sqrt(x); dx = -gy * y^3 / 2"""

    precision = FP32
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        x = _float_input(x)
        if dt.is_low_precision(x.dtype):  # round once, not after sqrt and again after 1/.
            return xp.reciprocal(xp.sqrt(dt.opmath(x))).astype(x.dtype)
        return xp.reciprocal(xp.sqrt(x))

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy * (y * y * y * -0.5)


class Reciprocal(Function):
    """y = 1 / x; dx = -gy * y^2"""

    precision = FP32
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.reciprocal(_float_input(x))

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return -gy * (y * y)


class Abs(Function):
    """y = |x|; dx = gy * sign(x) (0 at x = 0, as in PyTorch)"""

    precision = NEUTRAL
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.abs(x)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return gy * sign(x)


class Sign(Function):
    """y = sign(x); dx = 0 (piecewise constant)

    sign(nan) is nan (NumPy's rule; PyTorch gives 0), so a NaN is never hidden.
    """

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return x.copy() if x.dtype == dt.bool_ else xp.sign(x)  # bool: itself, as in PyTorch

    def backward(self, gy: Tensor) -> Tensor:
        return _zeros(gy, self.input_shapes[0], self.input_dtypes[0])


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


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number)  # Python and NumPy scalars


def pow(input: Any, exponent: Any) -> Tensor:  # noqa: A001 - torch name
    """``input ** exponent``: tensor ** number, tensor ** tensor, number ** tensor."""
    if isinstance(input, Tensor) and _is_number(exponent):
        exponent = exponent.item() if hasattr(exponent, "item") else exponent  # NumPy scalar -> Python
        if input.dtype not in dt.FLOATING and isinstance(exponent, float):
            input = cast(input, dt.float32)  # int_tensor ** 0.5 is float32, as in PyTorch
        return PowScalar(exponent)(input)
    if not isinstance(exponent, Tensor):
        raise TypeError(f"pow: expected a Tensor base or exponent, got {type(input).__name__} ** "
                        f"{type(exponent).__name__}")
    if isinstance(input, Tensor) and input.dtype != exponent.dtype:
        # Explicit, recorded casts to the common dtype (NumPy would pick float64 for int64 ** float32).
        floats = [d for d in (input.dtype, exponent.dtype) if d in dt.FLOATING]
        common = dt.widest_float(floats) if floats else dt.int64
        input, exponent = cast(input, common), cast(exponent, common)
    elif isinstance(input, float) and exponent.dtype not in dt.FLOATING:
        exponent = cast(exponent, dt.float32)
    return Pow()(input, exponent)


def square(x: Tensor) -> Tensor:
    return pow(x, 2)


def log1p(x: Tensor) -> Tensor:
    return Log1p()(x)


def sqrt(x: Tensor) -> Tensor:
    return Sqrt()(x)


def rsqrt(x: Tensor) -> Tensor:
    return Rsqrt()(x)


def reciprocal(x: Tensor) -> Tensor:
    return Reciprocal()(x)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch name
    return Abs()(x)


def sign(x: Tensor) -> Tensor:
    return Sign()(x)


METHODS = {"add": add, "sub": sub, "mul": mul, "div": div, "neg": neg, "exp": exp, "log": log,
           "pow": pow, "square": square, "log1p": log1p, "sqrt": sqrt, "rsqrt": rsqrt,
           "reciprocal": reciprocal, "abs": abs, "sign": sign}
