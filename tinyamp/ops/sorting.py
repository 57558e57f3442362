"""Sorting: ``argsort``, ``sort`` and ``topk`` (top-k accuracy, ranking).

One op computes the order, :class:`Argsort` (int64, no gradient); values are
then gathered with ``getitem``, so their gradient is ``getitem``'s scatter: each
selected element receives its output's gradient, the others zero (PyTorch's).
The order is stable: equal elements keep their original order (PyTorch only
promises that with ``stable=True``).
"""

from __future__ import annotations

from typing import Any

from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor
from .indexing import getitem
from .reduce import ValuesIndices


def _axis(op: str, dim: int, shape: tuple) -> int:
    if not shape:
        raise IndexError(f"{op}: a 0-d tensor has no dimension to sort; reshape it to 1-D first")
    if not -len(shape) <= dim < len(shape):
        raise IndexError(f"{op}: dimension {dim} out of range for shape {list(shape)}")
    return dim % len(shape)


class Argsort(Function):
    """i = the indices that sort x along dim (stable; descending on request); int64, no gradient"""

    precision = NEUTRAL

    def __init__(self, dim: int, descending: bool) -> None:
        self.dim, self.descending = dim, descending

    def forward(self, xp: Any, x: Any) -> Any:
        axis = _axis("argsort", self.dim, x.shape)
        if self.descending:
            # Reversing an ascending stable sort would reverse ties too; sort the
            # negation instead (bools and unsigned ints widened first: no wrap-around).
            x = -(x.astype(xp.int64) if x.dtype.kind in "bu" else x)
        return xp.argsort(x, axis=axis, kind="stable").astype(xp.int64)


def _gather(x: Tensor, indices: Tensor, dim: int) -> Tensor:
    """``x`` taken at ``indices`` along ``dim`` (take_along_axis) through differentiable getitem."""
    xp = x.device.xp
    shape = indices.shape
    key = tuple(indices.array if i == dim else xp.arange(n).reshape((n,) + (1,) * (len(shape) - 1 - i))
                for i, n in enumerate(shape))
    return getitem(x, key)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:  # noqa: A002
    """Indices that sort ``input`` along ``dim`` (always stable in tinyamp)."""
    return Argsort(dim, descending)(input)


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:  # noqa: A002
    """(values, indices) of ``input`` sorted along ``dim``; values carry the gradient."""
    indices = Argsort(dim, descending)(input)
    return ValuesIndices(_gather(input, indices, _axis("sort", dim, input.shape)), indices)


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """(values, indices) of the ``k`` largest (or smallest) elements along ``dim``, best first."""
    axis = _axis("topk", dim, input.shape)
    if not 0 <= k <= input.shape[axis]:
        raise RuntimeError(f"topk: k ({k}) is out of range for dimension {dim} of size {input.shape[axis]} "
                           f"(shape {list(input.shape)})")
    order = Argsort(axis, largest)(input)
    indices = order[(slice(None),) * axis + (slice(0, k),)]
    return ValuesIndices(_gather(input, indices, axis), indices)


METHODS = {"argsort": argsort, "sort": sort, "topk": topk}
