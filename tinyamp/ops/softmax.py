"""The softmax family: softmax, log_softmax and logsumexp along a dimension.

All three subtract the maximum before exponentiating, so large logits never
overflow, and all are FP32-tagged (PyTorch's autocast runs them in float32:
an exponential followed by a sum is exactly where float16 overflows and loses
mass). Outside autocast, float16/bfloat16 inputs are computed in float32 and
rounded once to the input dtype, like the reductions in ops/reduce.py.

softmax and log_softmax are one kernel each way (``kernels/softmax.py``); their
gradients ``dx = y * (gy - sum(gy * y))`` and ``dx = gy - exp(y) * sum(gy)`` (on the
saved *output* ``y``) are the paired ``SoftmaxBackward`` / ``LogSoftmaxBackward`` ops,
whose own backwards are written in tinyamp ops (double backward).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .cast import cast
from .elementwise import exp
from .reduce import keepdim_shape, normalize_dims
from .reduce import sum as _sum
from ..kernels import softmax as softmax_kernels
from ..kernels.softmax import shifted


def _check_dim(op: str, dim: Any, ndim: int) -> Any:
    """The one axis of a softmax; ``()`` for a 0-d input (PyTorch accepts dim 0 or -1 there)."""
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    axes = normalize_dims(op, int(dim), ndim)
    return axes[0] if ndim else ()


def _floating(op: str, x: Any) -> None:
    if x.dtype not in dt.FLOATING:
        raise TypeError(f"{op}: expected a floating input, got {dt.dtype_name(x.dtype)} of shape "
                        f"{list(x.shape)} (pass dtype=ta.float32 or call .float() first)")


class Softmax(Function):
    """y = exp(x - max) / sum(exp(x - max)); dx = softmax_backward(gy, y)"""

    precision = FP32
    save_outputs = (0,)

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def forward(self, xp: Any, x: Any) -> Any:
        _floating("softmax", x)
        self.axis = _check_dim("softmax", self.dim, x.ndim)
        return softmax_kernels.softmax(x, self.axis)

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return SoftmaxBackward(self.axis)(gy, y)


class SoftmaxBackward(Function):
    """dx = y (gy - sum(gy y)); d(gy) = softmax_backward(a, y), d(y) = a (gy - sum(gy y)) - gy sum(a y)"""

    precision = FP32
    name = "softmax_backward"
    save_inputs = (0, 1)

    def __init__(self, axis: Any) -> None:
        self.axis = axis

    def forward(self, xp: Any, gy: Any, y: Any) -> Any:
        return softmax_kernels.softmax_backward(gy, y, self.axis)

    def backward(self, a: Tensor) -> tuple:
        gy, y = self.saved_tensors
        d_gy = SoftmaxBackward(self.axis)(a, y) if self.needs_input_grad[0] else None
        d_y = None
        if self.needs_input_grad[1]:
            d_y = a * (gy - _sum(gy * y, self.axis, keepdim=True)) - gy * _sum(a * y, self.axis, keepdim=True)
        return d_gy, d_y


class LogSoftmax(Function):
    """y = x - max - log(sum(exp(x - max))); dx = log_softmax_backward(gy, y)"""

    precision = FP32
    name = "log_softmax"
    save_outputs = (0,)

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def forward(self, xp: Any, x: Any) -> Any:
        _floating("log_softmax", x)
        self.axis = _check_dim("log_softmax", self.dim, x.ndim)
        return softmax_kernels.log_softmax(x, self.axis)

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return LogSoftmaxBackward(self.axis)(gy, y)


class LogSoftmaxBackward(Function):
    """dx = gy - exp(y) sum(gy); d(gy) = a - sum(a exp(y)), d(y) = -a exp(y) sum(gy)"""

    precision = FP32
    name = "log_softmax_backward"
    save_inputs = (0, 1)

    def __init__(self, axis: Any) -> None:
        self.axis = axis

    def forward(self, xp: Any, gy: Any, y: Any) -> Any:
        return softmax_kernels.log_softmax_backward(gy, y, self.axis)

    def backward(self, a: Tensor) -> tuple:
        gy, y = self.saved_tensors
        e = exp(y)
        d_gy = a - _sum(a * e, self.axis, keepdim=True) if self.needs_input_grad[0] else None
        d_y = a * e * _sum(gy, self.axis, keepdim=True) * -1.0 if self.needs_input_grad[1] else None
        return d_gy, d_y


class LogSumExp(Function):
    """y = max + log(sum(exp(x - max))); dx = gy * exp(x - y)"""

    precision = FP32
    save_inputs = (0,)
    save_outputs = (0,)

    def __init__(self, dim: "int | Sequence[int]", keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.axes = normalize_dims("logsumexp", self.dim, x.ndim)
        out_dtype = x.dtype if x.dtype in dt.FLOATING else dt.float32  # integers: float32, as PyTorch
        z, m = shifted(xp, x.astype(out_dtype, copy=False), self.axes, inf_max_to_zero=True)
        with np.errstate(divide="ignore"):  # all -inf (or empty) along the axes: log(0) = -inf, as PyTorch
            y = xp.log(xp.exp(z).sum(axis=self.axes, keepdims=True)) + m
        if not self.keepdim:
            y = y.reshape(tuple(s for i, s in enumerate(y.shape) if i not in self.axes))
        return y.astype(out_dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        if not self.keepdim:
            kept = keepdim_shape(x.shape, self.axes)
            gy, y = gy.reshape(kept), y.reshape(kept)
        return gy * exp(x - y)


def softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002 - torch name
    """Softmax along ``dim`` (required: PyTorch's implicit choice is deprecated).

    ``dtype`` casts the input first (recorded), as PyTorch's argument does.
    """
    if dtype is not None:
        input = cast(input, dtype)
    return Softmax(dim)(input)


def log_softmax(input: Tensor, dim: int, dtype: Any = None) -> Tensor:  # noqa: A002
    """log(softmax(input, dim)) computed stably in one pass."""
    if dtype is not None:
        input = cast(input, dtype)
    return LogSoftmax(dim)(input)


def logsumexp(input: Tensor, dim: "int | Sequence[int]", keepdim: bool = False) -> Tensor:  # noqa: A002
    """log(sum(exp(input))) over ``dim`` without overflow."""
    return LogSumExp(dim, keepdim)(input)


METHODS = {"softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp}
