"""Activation functions (relu, leaky_relu, gelu, tanh, sigmoid, softplus, silu, elu) and erf.

Precision tags follow PyTorch's CUDA autocast: activations are on none of its
lists, so they run in the dtype that arrives (NEUTRAL), except softplus, which is
on its float32 list. A float16 input is still *computed* in float32 and rounded
once where the formula has several steps (gelu, sigmoid, softplus, silu, elu,
erf), as PyTorch's half kernels do internally; only the stored result is float16.

Memory: relu, tanh and sigmoid save their output, not their input. The output
is usually saved by the next layer anyway, so under AMP the pre-activation can
be freed as soon as the activation has run.
"""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels import elementwise as kernel
from ..kernels import gelu as gelu_kernels
from ..precision import FP32, NEUTRAL
from ..tensor import Tensor
from .elementwise import exp
from .clamp_where import clamp_max, where

_SQRT_PI = math.sqrt(math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TANH_K = math.sqrt(2 / math.pi)  # gelu's tanh approximation: tanh(k (x + c x^3))
_TANH_C = 0.044715


def _opmath(x: Any) -> Any:
    """x in the dtype to compute in: float32 for float16/bfloat16 (``dt.opmath``) and for integers."""
    return dt.opmath(x) if x.dtype in dt.FLOATING else x.astype(dt.float32)


def _out_dtype(x: Any) -> Any:
    """The result dtype: the input's, or float32 for integer inputs (as in PyTorch)."""
    return x.dtype if x.dtype in dt.FLOATING else dt.float32


def _sigmoid(xp: Any, z: Any) -> Any:
    """1 / (1 + exp(-z)) on arrays, in the form that never overflows exp."""
    e = xp.exp(-xp.abs(z))  # <= 1: no overflow for large |z|
    return xp.where(z >= 0, 1 / (1 + e), e / (1 + e))


def _gelu_curvature(x: Tensor, approximate: str) -> Tensor:
    """d^2 gelu / dx^2 in tinyamp ops (differentiable again)."""
    if approximate == "tanh":
        t = tanh((x + x * x * x * _TANH_C) * _TANH_K)
        du = (x * x * (3 * _TANH_C) + 1) * _TANH_K
        return (1 - t * t) * (du - x * t * du * du + x * (3 * _TANH_K * _TANH_C) * x)
    return exp(x * x * -0.5) * _INV_SQRT_2PI * (2 - x * x)


class Erf(Function):
    """y = erf(x); dx = gy * 2/sqrt(pi) * exp(-x^2)

    NEUTRAL, as in PyTorch's autocast (only erfinv is on its float32 list); one kernel
    (``kernels/gelu.py``: tinyamp's one erf), rounded once for float16/bfloat16 inputs.
    """

    precision = NEUTRAL
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return gelu_kernels.erf(x)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return gy * (exp(x * x * -1.0) * (2 / _SQRT_PI))


class Relu(Function):
    """y = max(x, 0); dx = gy where y > 0

    Saves only the output: y > 0 exactly where x > 0, so the pre-activation
    need not be kept (for AMP memory this is the point).
    """

    precision = NEUTRAL
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype == dt.bool_:  # NumPy would return int64 (PyTorch refuses too)
            raise TypeError(f"relu: boolean inputs are not supported (shape {list(x.shape)})")
        return kernel.relu(x)

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return ReluBackward()(gy, y)


class ReluBackward(Function):
    """dx = gy * (y > 0); d(gy) = relu_backward(g, y), nothing to y (a step function of y)

    A multiply by the mask, not a where: NumPy's where on a random mask is much
    slower, and relu's backward is on every MLP step. The one difference from PyTorch's
    where: an inf/nan in gy at a unit whose output is 0 gives nan, not 0, so a
    GradScaler skips that step (the safe side).
    """

    precision = NEUTRAL
    name = "relu_backward"
    save_inputs = (1,)

    def forward(self, xp: Any, gy: Any, y: Any) -> Any:
        return kernel.relu_backward(gy, y)

    def backward(self, g: Tensor) -> tuple:
        (y,) = self.saved_tensors
        return (ReluBackward()(g, y) if self.needs_input_grad[0] else None), None


class LeakyRelu(Function):
    """y = x if x > 0 else s x; dx = gy if x > 0 else s gy

    With a positive slope the output has the input's sign, so only the output
    is saved (as for relu); a zero or negative slope saves the input instead.
    """

    precision = NEUTRAL
    name = "leaky_relu"

    def __init__(self, negative_slope: float) -> None:
        self.negative_slope = negative_slope
        if negative_slope > 0:
            self.save_inputs, self.save_outputs = (), (0,)
        else:
            self.save_inputs, self.save_outputs = (0,), ()

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype not in dt.FLOATING:  # the slope would be truncated to an integer (PyTorch refuses too)
            raise TypeError(f"leaky_relu: expected a floating input, got {dt.dtype_name(x.dtype)} of shape "
                            f"{list(x.shape)}")
        # The slope as a scalar of x's dtype (NumPy turns bfloat16 * float into float32); a scalar is a
        # kernel argument on a GPU, where an array would be copied from the host on every call.
        return xp.where(x > 0, x, x * x.dtype.type(self.negative_slope))

    def backward(self, gy: Tensor) -> Tensor:
        (saved,) = self.saved_tensors
        return where(saved > 0, gy, gy * self.negative_slope)


class Gelu(Function):
    """y = x * Phi(x) (or its tanh approximation); dx = gelu_backward(gy, x)

    NEUTRAL as in PyTorch's autocast; one kernel (``kernels/gelu.py``), computed in float32 or better
    and rounded once for float16/bfloat16 inputs.
    """

    precision = NEUTRAL
    save_inputs = (0,)

    def __init__(self, approximate: str) -> None:
        self.approximate = approximate

    def forward(self, xp: Any, x: Any) -> Any:
        return gelu_kernels.gelu(x, self.approximate)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return GeluBackward(self.approximate)(gy, x)


class GeluBackward(Function):
    """dx = gy * gelu'(x); d(gy) = gelu_backward(g, x), d(x) = g * gy * gelu''(x)

    Gelu's gradient as one kernel (the paired XxxGrad op: ``kernels/gelu.py``), itself differentiable.
    """

    precision = NEUTRAL
    name = "gelu_backward"
    save_inputs = (0, 1)

    def __init__(self, approximate: str) -> None:
        self.approximate = approximate

    def forward(self, xp: Any, gy: Any, x: Any) -> Any:
        return gelu_kernels.gelu_backward(gy, x, self.approximate)

    def backward(self, g: Tensor) -> tuple:
        gy, x = self.saved_tensors
        d_gy = GeluBackward(self.approximate)(g, x) if self.needs_input_grad[0] else None
        d_x = g * gy * _gelu_curvature(x, self.approximate) if self.needs_input_grad[1] else None
        return d_gy, d_x


class Tanh(Function):
    """y = tanh(x); dx = gy * (1 - y^2)

    NEUTRAL as in PyTorch's autocast: tanh is bounded, float16 holds it well.
    """

    precision = NEUTRAL
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.tanh(x if x.dtype in dt.FLOATING else x.astype(xp.float32))  # int: float32, as PyTorch

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy * (1 - y * y)


class Sigmoid(Function):
    """y = 1 / (1 + exp(-x)); dx = gy * y * (1 - y)

    NEUTRAL as in PyTorch's autocast (bounded output); computed in float32 for
    float16 inputs, in the form that never overflows exp.
    """

    precision = NEUTRAL
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        return _sigmoid(xp, _opmath(x)).astype(_out_dtype(x), copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (y,) = self.saved_tensors
        return gy * (y * (1 - y))


class Softplus(Function):
    """y = log(1 + exp(b x)) / b, or x where b x > threshold; dx = gy * sigmoid(b x), or gy

    FP32 as in PyTorch's autocast lists: exp(b x) leaves float16's range at b x ~ 11.
    """

    precision = FP32
    save_inputs = (0,)

    def __init__(self, beta: float, threshold: float) -> None:
        self.beta, self.threshold = beta, threshold

    def forward(self, xp: Any, x: Any) -> Any:
        z = _opmath(x) * self.beta
        # max(z, 0) + log1p(exp(-|z|)) is log(1 + exp(z)) without overflow.
        soft = (xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))) / self.beta
        return xp.where(z > self.threshold, _opmath(x), soft).astype(_out_dtype(x), copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        linear = Tensor._wrap(x.array * self.beta > self.threshold)
        return where(linear, gy, gy * sigmoid(x * self.beta))


class Silu(Function):
    """y = x sigmoid(x); dx = gy s (1 + x (1 - s)), s = sigmoid(x)

    NEUTRAL (on none of PyTorch's autocast lists); float16/bfloat16 computed in
    float32 and rounded once (x * sigmoid(x) in float16 rounds twice: 9 ulp off).
    """

    precision = NEUTRAL
    save_inputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        z = _opmath(x)
        return (z * _sigmoid(xp, z)).astype(_out_dtype(x), copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        s = sigmoid(x)
        return gy * (s * (1 + x * (1 - s)))


class Elu(Function):
    """y = x if x > 0 else alpha (exp(x) - 1); dx = gy if x > 0 else gy alpha exp(x)

    NEUTRAL (on none of PyTorch's autocast lists); expm1 in float32 for
    float16/bfloat16, rounded once (exp(x) - 1 in float16 cancels: 3072 ulp off near 0).
    """

    precision = NEUTRAL
    save_inputs = (0,)

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def forward(self, xp: Any, x: Any) -> Any:
        z = _opmath(x)
        # expm1 of min(z, 0): the branch where() drops stays finite.
        y = xp.where(z > 0, z, self.alpha * xp.expm1(xp.minimum(z, 0)))
        return y.astype(_out_dtype(x), copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        # exp of min(x, 0): exp(30) is inf in float16, and 0 * inf in the dropped branch would be nan.
        return where(x > 0, gy, gy * (exp(clamp_max(x, 0.0)) * self.alpha))


def erf(x: Tensor) -> Tensor:
    return Erf()(x)


# ``inplace`` is accepted so F.relu(x, inplace=True) ports; as in nn.ReLU, tinyamp
# always returns a new tensor and leaves the input as it was.
def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 - torch names
    return Relu()(input)


def relu_(input: Tensor) -> Tensor:  # noqa: A002 - torch names
    """``F.relu_`` / ``Tensor.relu_``: relu written into ``input`` (recorded when it needs grad, as PyTorch)."""
    return input._inplace_binary("relu_", lambda x, _: relu(x), None)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    return LeakyRelu(negative_slope)(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return Gelu(approximate)(input)


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return Tanh()(input)


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return Sigmoid()(input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    return Softplus(beta, threshold)(input)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """y = x * sigmoid(x) (also called swish)."""
    return Silu()(input)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """y = x if x > 0 else alpha * (exp(x) - 1)."""
    return Elu(float(alpha))(input)


METHODS = {"relu": relu, "relu_": relu_, "tanh": tanh, "sigmoid": sigmoid, "erf": erf}
