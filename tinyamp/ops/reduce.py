"""Reductions over dimensions (``dim``/``keepdim`` as in PyTorch).

sum, mean (FP32: accumulations; var and std live in statistics.py), max/min/amax/amin (NEUTRAL: they
select an element, nothing is rounded) and argmax/argmin (int64, no gradient).
Low-precision inputs are accumulated in float32 and rounded once; FP32-tagged
reductions see float32 inputs under autocast anyway.
"""

from __future__ import annotations

import builtins
from typing import Any, NamedTuple

import numpy as np

from .. import dtypes as dt
from ..precision import FP32, NEUTRAL
from ..autograd.function import Function
from ..kernels.elementwise import column_sum
from ..tensor import Tensor
from .broadcast import broadcast_to
from .broadcast import normalize_dims
from .clamp_where import maximum, minimum


def keepdim_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


class Sum(Function):
    """y = sum(x, dims); dx = broadcast(gy)"""

    precision = FP32

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims("sum", self.dim, x.ndim)
        if self.dims == (0,) and x.ndim == 2 and not self.keepdim:
            return column_sum(x)  # a matrix's column sum (linear's bias gradient): one kernel on every device
        if dt.is_low_precision(x.dtype):
            return x.sum(axis=self.dims, keepdims=self.keepdim, dtype=xp.float32).astype(x.dtype)
        return x.sum(axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        shape = self.input_shapes[0]
        if not self.keepdim:
            gy = gy.reshape(keepdim_shape(shape, self.dims))
        return broadcast_to(gy, shape)


class Mean(Function):
    """y = mean(x, dims); dx = broadcast(gy) / n

    FP32 under autocast (the tags: tinyamp/precision.py); PyTorch's CUDA autocast leaves mean
    in the incoming dtype (float16 in, float16 out), tinyamp returns float32.
    """

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
        shape = self.input_shapes[0]
        if not self.keepdim:
            gy = gy.reshape(keepdim_shape(shape, self.dims))
        return broadcast_to(gy / self.count, shape)


class ValuesIndices(NamedTuple):
    """What ``max(x, dim)`` / ``min(x, dim)`` return, as torch.return_types.max does."""

    values: Tensor
    indices: Tensor


def _keep(t: Tensor, shape: tuple, dims: tuple, keepdim: bool) -> Tensor:
    """A reduced tensor with its reduced dimensions kept as size 1."""
    return t if keepdim else t.reshape(keepdim_shape(shape, dims))


def _check_nonempty(op: str, x: Any, dims: tuple) -> None:
    if x.size == 0 and (not dims or builtins.any(x.shape[d] == 0 for d in dims)):
        raise IndexError(f"{op}: cannot reduce an empty tensor (shape {list(x.shape)}, dims "
                         f"{list(dims)}): the operation has no identity")


def _tie_split(gy: Tensor, x: Tensor, y: Tensor, dims: tuple, keepdim: bool) -> Tensor:
    """dx for amax/amin: gy shared evenly among the elements equal to the result."""
    shape = x.shape
    y_data = _keep(y, shape, dims, keepdim).array
    hits = x.array == y_data
    count = hits.sum(axis=dims, keepdims=True)
    weights = (hits / x.device.xp.maximum(count, 1)).astype(gy.dtype)
    return broadcast_to(_keep(gy, shape, dims, keepdim), shape) * Tensor._wrap(weights)


class _Extremum(Function):
    """Shared by amax/amin: the extreme over dims, its gradient split evenly among ties."""

    precision = NEUTRAL
    save_inputs = (0,)
    save_outputs = (0,)
    reducer: str  # "amax" or "amin", the xp function

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, self.dims)
        return getattr(xp, self.reducer)(x, axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        return _tie_split(gy, x, y, self.dims, self.keepdim)


class Amax(_Extremum):
    """y = max of x over dims; dx = gy shared evenly among the maxima (ties split)"""

    precision = NEUTRAL
    reducer = "amax"


class Amin(_Extremum):
    """y = min of x over dims; dx = gy shared evenly among the minima (ties split)"""

    precision = NEUTRAL
    reducer = "amin"


def _select_along(op: Function, xp: Any, x: Any, pick: Any) -> tuple:
    """values, int64 indices of ``pick`` (argmax/argmin) along ``op.dim``; keeps the index."""
    if not isinstance(op.dim, (int, np.integer)):
        raise TypeError(f"{op.name}: dim must be an int, got {op.dim!r} (use amax/amin for several dims)")
    op.dims = normalize_dims(op.name, op.dim, x.ndim)
    if x.ndim == 0:  # PyTorch allows dim 0 on a 0-d tensor: the element, index 0
        op.index = None
        return x.copy(), xp.zeros((), dtype=xp.int64)
    axis = op.dims[0]
    _check_nonempty(op.name, x, op.dims)
    op.index = pick(x, axis=axis, keepdims=True).astype(xp.int64)  # first occurrence on ties
    values = xp.take_along_axis(x, op.index, axis=axis)
    indices = op.index.copy()  # the caller may write into the returned tensor
    if not op.keepdim:
        values, indices = values.squeeze(axis), indices.squeeze(axis)
    return values, indices


def _scatter_back(op: Function, gy: Tensor) -> Tensor:
    """dx for max/min along a dim: gy at the selected index, 0 elsewhere."""
    shape = op.input_shapes[0]
    if op.index is None:
        return gy
    axis = op.dims[0]
    xp = gy.device.xp
    positions = xp.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    mask = Tensor._wrap((positions == op.index).astype(gy.dtype))
    return broadcast_to(_keep(gy, shape, op.dims, op.keepdim), shape) * mask


class _ValuesAlongDim(Function):
    """Shared by max/min along a dim: (values, indices); the gradient goes to the index."""

    precision = NEUTRAL
    pick: str  # "argmax" or "argmin", the xp function choosing the index

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> tuple:
        return _select_along(self, xp, x, getattr(xp, self.pick))

    def backward(self, gy: Tensor, g_indices: Tensor) -> Tensor:
        return _scatter_back(self, gy)


class Max(_ValuesAlongDim):
    """values, indices = max of x along dim; dx = gy at the index of the maximum"""

    precision = NEUTRAL
    pick = "argmax"


class Min(_ValuesAlongDim):
    """values, indices = min of x along dim; dx = gy at the index of the minimum"""

    precision = NEUTRAL
    pick = "argmin"


class _ArgExtremum(Function):
    """Shared by argmax/argmin: int64 indices (flattened when dim is None), no gradient."""

    precision = NEUTRAL
    pick: str

    def __init__(self, dim: "int | None" = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, dims)
        axis = None if self.dim is None or x.ndim == 0 else dims[0]
        return getattr(xp, self.pick)(x, axis=axis, keepdims=self.keepdim).astype(xp.int64)


class Argmax(_ArgExtremum):
    """i = index of the maximum (flattened when dim is None); int64, no gradient"""

    precision = NEUTRAL
    pick = "argmax"


class Argmin(_ArgExtremum):
    """i = index of the minimum (flattened when dim is None); int64, no gradient"""

    precision = NEUTRAL
    pick = "argmin"


# dtype=: the input is cast first (a recorded cast), as PyTorch's x.sum(dtype=torch.float32).
def sum(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A001
    return Sum(dim, keepdim)(x if dtype is None else x.to(dtype))


def mean(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return Mean(dim, keepdim)(x if dtype is None else x.to(dtype))


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002 - torch names
    """Maximum over ``dim`` (an int or tuple; ``()`` or None: all dims)."""
    return Amax(None if dim == () else dim, keepdim)(input)


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002
    """Minimum over ``dim`` (an int or tuple; ``()`` or None: all dims)."""
    return Amin(None if dim == () else dim, keepdim)(input)


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001,A002
    """``max(x)``: the largest element; ``max(x, dim)``: (values, indices); ``max(x, other)``: maximum."""
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    if dim is None:
        return Amax(None, False)(input)  # PyTorch splits a tie's gradient evenly here too
    return ValuesIndices(*Max(dim, keepdim)(input))


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001,A002
    """``min(x)``: the smallest element; ``min(x, dim)``: (values, indices); ``min(x, other)``: minimum."""
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    if dim is None:
        return Amin(None, False)(input)
    return ValuesIndices(*Min(dim, keepdim)(input))


def argmax(input: Tensor, dim: "int | None" = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return Argmax(dim, keepdim)(input)


def argmin(input: Tensor, dim: "int | None" = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    return Argmin(dim, keepdim)(input)


METHODS = {"sum": sum, "mean": mean, "max": max, "min": min, "amax": amax, "amin": amin,
           "argmax": argmax, "argmin": argmin}
