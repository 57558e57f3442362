"""Explicit broadcasting: ``broadcast_to``/``expand`` and their adjoint ``sum_to``; the dims rule of reductions.

Binary ops broadcast their operands (PyTorch semantics); their backward calls
``sum_to`` to reduce each gradient back to its operand's shape, so the gradient
a leaf receives always has the leaf's shape.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor


def normalize_dims(op: str, dim: "int | Sequence[int] | None", ndim: int) -> tuple[int, ...]:
    """``dim`` as a sorted tuple of non-negative axes; None means all."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    result = []
    bound = max(ndim, 1)
    for d in dims:
        if not -bound <= d < bound:
            raise IndexError(f"{op}: dimension {d} out of range for a tensor with {ndim} dimensions")
        if ndim:  # a 0-d tensor accepts dim 0 or -1 and has nothing to reduce
            if d % ndim in result:  # sum(x, (1, -1)) is a mistake, not one reduction (PyTorch refuses too)
                raise ValueError(f"{op}: dim {d % ndim} appears multiple times in the list of dims "
                                 f"{list(dims)}")
            result.append(d % ndim)
    return tuple(sorted(result))


def broadcasting(op: str, ufunc: Any, *arrays: Any) -> Any:
    """``ufunc(*arrays)`` with NumPy/PyTorch broadcasting; a mismatch names the op, shapes and dtypes."""
    try:
        return ufunc(*arrays)
    except ValueError as exc:
        shapes = " and ".join(str(list(a.shape)) for a in arrays)
        dtypes = ", ".join(dt.dtype_name(a.dtype) for a in arrays)
        try:
            np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError:
            raise ValueError(f"{op}: operands with shapes {shapes} cannot be broadcast together "
                             f"(dtypes {dtypes})") from None
        # The shapes fit: the ufunc refused the values (int ** negative int, say).
        raise ValueError(f"{op}: {exc} (shapes {shapes}, dtypes {dtypes})") from None


def _broadcast_error(op: str, target: tuple, source: tuple) -> ValueError:
    return ValueError(f"{op}: cannot broadcast shape {list(source)} to {list(target)}")


class BroadcastTo(Function):
    """y = x broadcast to shape; dx = sum_to(gy, x.shape)"""

    precision = NEUTRAL
    name = "broadcast_to"

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.shape
        try:
            return xp.broadcast_to(x, self.shape)
        except ValueError:
            raise _broadcast_error("broadcast_to", self.shape, x.shape) from None

    def backward(self, gy: Tensor) -> Tensor:
        return sum_to(gy, self.source)


class SumTo(Function):
    """y = sum of x over broadcast dims down to shape; dx = broadcast_to(gy, x.shape)"""

    precision = NEUTRAL
    name = "sum_to"

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.shape
        lead = x.ndim - len(self.shape)
        if lead < 0 or any(s != 1 and s != x.shape[lead + i] for i, s in enumerate(self.shape)):
            raise ValueError(f"sum_to: cannot reduce shape {list(x.shape)} to {list(self.shape)}")
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(self.shape)
                                           if s == 1 and x.shape[lead + i] != 1)
        if not axes:
            return x.reshape(self.shape)
        if x.dtype.itemsize < 4:  # float16/bfloat16: accumulate in float32, round once
            return x.sum(axis=axes, keepdims=True, dtype=xp.float32).astype(x.dtype).reshape(self.shape)
        return x.sum(axis=axes, keepdims=True).reshape(self.shape)

    def backward(self, gy: Tensor) -> Tensor:
        return broadcast_to(gy, self.source)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    shape = tuple(shape)
    return x if x.shape == shape else BroadcastTo(shape)(x)


def expand(x: Tensor, *sizes: Any) -> Tensor:
    """PyTorch's expand: -1 keeps a dimension's size."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                         f"to the number of dimensions in the tensor ({x.ndim}), shape {list(x.shape)}")
    if any(s == -1 for s in sizes[:lead]):
        raise ValueError(f"expand: the expanded size -1 is not allowed in a leading, new dimension "
                         f"(sizes {list(sizes)} for shape {list(x.shape)})")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return broadcast_to(x, shape)


def sum_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    shape = tuple(shape)
    return x if x.shape == shape else SumTo(shape)(x)


METHODS = {"broadcast_to": broadcast_to, "expand": expand, "sum_to": sum_to,
           "expand_as": lambda x, other: broadcast_to(x, other.shape)}
