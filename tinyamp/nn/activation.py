"""Activation modules: thin wrappers that call the matching op in ``forward``."""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from ..ops.activation import elu, gelu, leaky_relu, relu, sigmoid, silu, tanh
from ..ops.softmax import log_softmax, softmax


class ReLU(Module):
    """y = max(x, 0)"""

    def __init__(self, inplace: bool = False) -> None:
        # inplace is accepted for portability; tinyamp always returns a new tensor,
        # which is what autograd needs anyway.
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """y = x if x > 0 else negative_slope * x"""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class GELU(Module):
    """y = x * Phi(x); ``approximate="tanh"`` uses the tanh approximation"""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate='{self.approximate}'"


class SiLU(Module):
    """y = x * sigmoid(x)"""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace  # accepted for portability; a new tensor is returned

    def forward(self, x: Tensor) -> Tensor:
        return silu(x)


class ELU(Module):
    """y = x if x > 0 else alpha * (exp(x) - 1)"""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Tanh(Module):
    """y = tanh(x)"""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


class Sigmoid(Module):
    """y = 1 / (1 + exp(-x))"""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


class Softmax(Module):
    """y = exp(x) / sum(exp(x), dim)"""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """y = x - logsumexp(x, dim)"""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return log_softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
