"""Linear and Identity: ``y = x W^T + b`` and ``y = x``."""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter
from ..factories import empty
from ..ops.linalg import linear


class Identity(Module):
    """Returns its input unchanged (a placeholder that keeps a model's structure)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # accepts and ignores arguments, as PyTorch's
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class WeightAndBias(Module):
    """A layer with a ``weight`` and an optional ``bias`` (Linear, Conv2d), PyTorch's default init."""

    def _make_parameters(self, weight_shape: tuple, bias: bool, device: Any, dtype: Any) -> None:
        self.weight = Parameter(empty(*weight_shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(weight_shape[0], dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_linear_init_(self.weight, self.bias)


class Linear(WeightAndBias):
    """``y = x @ weight.T + bias`` with weight of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self._make_parameters((self.out_features, self.in_features), bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"{self!r}: input of shape {list(x.shape)} ({dt.dtype_name(x.dtype)}) has "
                             f"{x.shape[-1] if x.ndim else 'no'} features in its last dimension, "
                             f"expected in_features={self.in_features}")
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
