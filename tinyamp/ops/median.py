"""The median: ``median(x)`` (lower middle value of all elements) and ``median(x, dim)`` (values, indices).

As PyTorch: for an even count the lower of the two middle values, not their
mean; a NaN in a slice makes its median NaN (at the first NaN). The gradient of
``median(x)`` is shared evenly among the elements equal to it; that of
``median(x, dim)`` goes to the selected index. NEUTRAL: selection is exact.
"""

from __future__ import annotations

from typing import Any


from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor
from .reduce import ValuesIndices, _scatter_back, _select_along, _tie_split


def _median_index(xp: Any) -> Any:
    """``pick(x, axis, keepdims)`` giving the index of the lower median (the first NaN where there is one)."""
    def pick(x: Any, axis: int, keepdims: bool) -> Any:
        n = x.shape[axis]
        order = xp.argsort(x, axis=axis, kind="stable")  # NaN sorts last
        k = (n - 1) // 2
        middle = order[(slice(None),) * axis + (slice(k, k + 1),)]
        if x.dtype.kind == "f":
            nan = xp.isnan(x)
            middle = xp.where(nan.any(axis=axis, keepdims=True), xp.argmax(nan, axis=axis, keepdims=True), middle)
        return middle if keepdims else middle.squeeze(axis)
    return pick


class MedianDim(Function):
    """values, indices = lower median of x along dim; dx = gy at the selected index"""

    precision = NEUTRAL
    name = "median"

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> tuple:
        return _select_along(self, xp, x, _median_index(xp))

    def backward(self, gy: Tensor, g_indices: Tensor) -> Tensor:
        return _scatter_back(self, gy)


class Median(Function):
    """y = lower median of all elements of x; dx = gy shared evenly among the elements equal to y"""

    precision = NEUTRAL
    save_inputs = (0,)
    save_outputs = (0,)

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = tuple(range(x.ndim))
        if x.size == 0:  # PyTorch: NaN (an integer tensor has no NaN to give)
            if x.dtype.kind != "f":
                raise IndexError(f"median: cannot take the median of an empty {x.dtype} tensor")
            return xp.full((), xp.nan, dtype=x.dtype)
        flat = x.reshape(-1)
        return xp.take(flat, _median_index(xp)(flat, 0, False))

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        return _tie_split(gy, x, y, self.dims, False)


def median(input: Tensor, dim: "int | None" = None, keepdim: bool = False) -> Any:  # noqa: A002 - torch name
    """``torch.median``: the lower median of all elements, or ``(values, indices)`` along ``dim``."""
    if dim is None:
        return Median()(input)
    return ValuesIndices(*MedianDim(dim, keepdim)(input))


METHODS = {"median": median}

