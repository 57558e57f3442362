"""Reductions over dimensions (``dim``/``keepdim`` as in PyTorch).

Low-precision inputs are accumulated in float32 and rounded once (DESIGN.md
section 5); FP32-tagged reductions see float32 inputs under autocast anyway.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as dt
from ..amp.policy import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to


def normalize_dims(op: str, dim: "int | Sequence[int] | None", ndim: int) -> tuple[int, ...]:
    """``dim`` as a sorted tuple of non-negative axes; None means all."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    result = []
    for d in dims:
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"{op}: dimension {d} out of range for a tensor with {ndim} dimensions")
        result.append(d % ndim if ndim else 0)
    return tuple(sorted(set(result)))


def keepdim_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


class Sum(Function):
    """y = sum(x, dims); dx = broadcast(gy)"""

    precision = FP32

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims("sum", self.dim, x.ndim)
        if dt.is_low_precision(x.dtype):
            return x.sum(axis=self.dims, keepdims=self.keepdim, dtype=xp.float32).astype(x.dtype)
        return x.sum(axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        shape = self._input_meta[0][0]
        if not self.keepdim:
            gy = gy.reshape(keepdim_shape(shape, self.dims))
        return broadcast_to(gy, shape)


class Mean(Function):
    """y = mean(x, dims); dx = broadcast(gy) / n"""

    precision = FP32

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims("mean", self.dim, x.ndim)
        self.count = 1
        for d in self.dims:
            self.count *= x.shape[d]
        if x.dtype not in dt.FLOATING:
            raise TypeError(f"mean: input dtype should be floating point, got {x.dtype} "
                            f"(shape {list(x.shape)})")
        if dt.is_low_precision(x.dtype):
            return x.mean(axis=self.dims, keepdims=self.keepdim, dtype=xp.float32).astype(x.dtype)
        return x.mean(axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        shape = self._input_meta[0][0]
        if not self.keepdim:
            gy = gy.reshape(keepdim_shape(shape, self.dims))
        return broadcast_to(gy / self.count, shape)


def sum(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch name
    return Sum(dim, keepdim)(x)


def mean(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return Mean(dim, keepdim)(x)


METHODS = {"sum": sum, "mean": mean}
