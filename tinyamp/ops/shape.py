"""Shape ops: views and rearrangements whose backward rearranges the gradient back.

All are NEUTRAL: they move values without arithmetic, so they run in whatever
dtype arrives and never trigger a cast.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..amp.policy import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor


def _shape_arg(shape: tuple) -> tuple:
    """Accept both ``reshape(2, 3)`` and ``reshape((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


class Reshape(Function):
    """y = x with a new shape; dx = gy with x's shape"""

    precision = NEUTRAL

    def __init__(self, shape: tuple) -> None:
        self.shape = shape

    def forward(self, xp: Any, x: Any) -> Any:
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: shape {list(self.shape)} is invalid for input of shape "
                             f"{list(x.shape)} ({x.size} elements)") from None

    def backward(self, gy: Tensor) -> Tensor:
        return reshape(gy, self._input_meta[0][0])


class Permute(Function):
    """y = x with dimensions reordered; dx = gy with the inverse order"""

    precision = NEUTRAL

    def __init__(self, dims: tuple) -> None:
        self.dims = dims

    def forward(self, xp: Any, x: Any) -> Any:
        if sorted(d % max(x.ndim, 1) for d in self.dims) != list(range(x.ndim)):
            raise ValueError(f"permute: dims {list(self.dims)} are not a permutation of the "
                             f"{x.ndim} dimensions of shape {list(x.shape)}")
        return x.transpose(self.dims)

    def backward(self, gy: Tensor) -> Tensor:
        n = len(self.dims)
        inverse = [0] * n
        for i, d in enumerate(self.dims):
            inverse[d % n] = i
        return permute(gy, tuple(inverse))


def reshape(x: Tensor, *shape: Any) -> Tensor:
    shape = _shape_arg(shape)
    return x if x.shape == shape else Reshape(shape)(x)


def view(x: Tensor, *shape: Any) -> Tensor:
    return reshape(x, *shape)


def permute(x: Tensor, *dims: Any) -> Tensor:
    return Permute(_shape_arg(dims))(x)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    dims = list(range(x.ndim))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return Permute(tuple(dims))(x)


METHODS = {"reshape": reshape, "view": view, "permute": permute, "transpose": transpose}
