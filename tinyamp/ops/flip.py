"""Reversal: ``flip`` (``torch.flip``, ``Tensor.flip``, ``fliplr``, ``flipud``); its gradient is the same flip.

NEUTRAL: values move, nothing is computed. The result is a copy, as PyTorch's.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor


class Flip(Function):
    """y = x reversed along dims; dx = gy reversed along dims"""

    precision = NEUTRAL

    def __init__(self, dims: tuple) -> None:
        self.dims = dims

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.flip(x, axis=self.dims).copy() if self.dims else x.copy()

    def backward(self, gy: Tensor) -> Tensor:
        return Flip(self.dims)(gy)


def _axes(op: str, x: Tensor, dims: Sequence[int]) -> tuple:
    n = max(x.ndim, 1)
    axes = []
    for d in dims:
        if not isinstance(d, int) or not -n <= d < n:
            raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
                             f"{d}) for a tensor of shape {list(x.shape)} ({dt.dtype_name(x.dtype)})")
        axes.append(d % n)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"{op}: dim {axes[0]} appears multiple times in the list of dims")
    return tuple(axes) if x.ndim else ()


def flip(input: Tensor, *dims: Any) -> Tensor:  # noqa: A002 - torch name
    """``torch.flip(input, dims)``: reverse the order along each of ``dims`` (``x.flip(0, 1)`` too)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return Flip(_axes("flip", input, dims))(input)


def fliplr(input: Tensor) -> Tensor:  # noqa: A002
    """Reverse the columns (dim 1) of a tensor of at least 2 dims."""
    if input.ndim < 2:
        raise RuntimeError(f"Input must be >= 2-d, got a tensor of shape {list(input.shape)}")
    return flip(input, 1)


def flipud(input: Tensor) -> Tensor:  # noqa: A002
    """Reverse the rows (dim 0) of a tensor of at least 1 dim."""
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, 0)


METHODS = {"flip": flip, "fliplr": fliplr, "flipud": flipud}
