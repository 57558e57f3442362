"""Reductions over dimensions (``dim``/``keepdim`` as in PyTorch).

sum, mean, var, std (FP32: accumulations), max/min/amax/amin (NEUTRAL: they
select an element, nothing is rounded) and argmax/argmin (int64, no gradient).
Low-precision inputs are accumulated in float32 and rounded once (DESIGN.md
section 5); FP32-tagged reductions see float32 inputs under autocast anyway.
"""

from __future__ import annotations

import builtins
import math
import warnings
from typing import Any, NamedTuple, Sequence

import numpy as np

from .. import dtypes as dt
from ..amp.policy import FP32, NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to
from .select import maximum, minimum, where


def normalize_dims(op: str, dim: "int | Sequence[int] | None", ndim: int) -> tuple[int, ...]:
    """``dim`` as a sorted tuple of non-negative axes; None means all."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    result = []
    # This module defines its own max(): use the builtin explicitly.
    bound = builtins.max(ndim, 1)
    for d in dims:
        if not -bound <= d < bound:
            raise IndexError(f"{op}: dimension {d} out of range for a tensor with {ndim} dimensions")
        if ndim:  # a 0-d tensor accepts dim 0 or -1 and has nothing to reduce
            if d % ndim in result:  # sum(x, (1, -1)) is a mistake, not one reduction (PyTorch refuses too)
                raise ValueError(f"{op}: dim {d % ndim} appears multiple times in the list of dims "
                                 f"{list(dims)}")
            result.append(d % ndim)
    return tuple(sorted(result))


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
    """y = mean(x, dims); dx = broadcast(gy) / n

    FP32 under autocast (DESIGN.md section 4); PyTorch's CUDA autocast leaves mean
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
        shape = self._input_meta[0][0]
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
    y_data = _keep(y, shape, dims, keepdim).data
    hits = x.data == y_data
    count = hits.sum(axis=dims, keepdims=True)
    weights = (hits / x.device.xp.maximum(count, 1)).astype(gy.dtype)
    return broadcast_to(_keep(gy, shape, dims, keepdim), shape) * Tensor._wrap(weights)


class Amax(Function):
    """y = max of x over dims; dx = gy shared evenly among the maxima (ties split)"""

    precision = NEUTRAL
    save_inputs = (0,)
    save_outputs = (0,)

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, self.dims)
        return xp.amax(x, axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        return _tie_split(gy, x, y, self.dims, self.keepdim)


class Amin(Function):
    """y = min of x over dims; dx = gy shared evenly among the minima (ties split)"""

    precision = NEUTRAL
    save_inputs = (0,)
    save_outputs = (0,)

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, self.dims)
        return xp.amin(x, axis=self.dims, keepdims=self.keepdim)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        return _tie_split(gy, x, y, self.dims, self.keepdim)


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
    shape = op._input_meta[0][0]
    if op.index is None:
        return gy
    axis = op.dims[0]
    xp = gy.device.xp
    positions = xp.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    mask = Tensor._wrap((positions == op.index).astype(gy.dtype))
    return broadcast_to(_keep(gy, shape, op.dims, op.keepdim), shape) * mask


class Max(Function):
    """values, indices = max of x along dim; dx = gy at the index of the maximum"""

    precision = NEUTRAL

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> tuple:
        return _select_along(self, xp, x, xp.argmax)

    def backward(self, gy: Tensor, g_indices: Tensor) -> Tensor:
        return _scatter_back(self, gy)


class Min(Function):
    """values, indices = min of x along dim; dx = gy at the index of the minimum"""

    precision = NEUTRAL

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> tuple:
        return _select_along(self, xp, x, xp.argmin)

    def backward(self, gy: Tensor, g_indices: Tensor) -> Tensor:
        return _scatter_back(self, gy)


class Argmax(Function):
    """i = index of the maximum (flattened when dim is None); int64, no gradient"""

    precision = NEUTRAL

    def __init__(self, dim: "int | None" = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, dims)
        axis = None if self.dim is None or x.ndim == 0 else dims[0]
        return xp.argmax(x, axis=axis, keepdims=self.keepdim).astype(xp.int64)


class Argmin(Function):
    """i = index of the minimum (flattened when dim is None); int64, no gradient"""

    precision = NEUTRAL

    def __init__(self, dim: "int | None" = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        dims = normalize_dims(self.name, self.dim, x.ndim)
        _check_nonempty(self.name, x, dims)
        axis = None if self.dim is None or x.ndim == 0 else dims[0]
        return xp.argmin(x, axis=axis, keepdims=self.keepdim).astype(xp.int64)


def _sum_of_squares(op: Function, xp: Any, x: Any) -> Any:
    """sum((x - mean)^2) over ``op.dims`` in float32 or wider; sets ``op.dof``.

    ``dof = N - correction``; at or below zero the result is inf/nan with a
    warning, as in PyTorch (a batch of one has no sample variance).
    """
    if x.dtype not in dt.FLOATING:
        raise TypeError(f"{op.name}: std and var only support floating point dtypes, got "
                        f"{dt.dtype_name(x.dtype)} (shape {list(x.shape)})")
    op.dims = normalize_dims(op.name, op.dim, x.ndim)
    count = 1
    for d in op.dims:
        count *= x.shape[d]
    op.dof = count - op.correction
    if op.dof <= 0:
        warnings.warn(f"{op.name}(): degrees of freedom is <= 0 (correction {op.correction} for "
                      f"{count} elements of shape {list(x.shape)}); the result is inf or nan",
                      RuntimeWarning, stacklevel=4)
    z = x.astype(xp.float32) if dt.is_low_precision(x.dtype) else x
    centred = z - z.mean(axis=op.dims, keepdims=True)
    squares = (centred * centred).sum(axis=op.dims, keepdims=op.keepdim)
    with np.errstate(divide="ignore", invalid="ignore"):  # dof <= 0: inf/nan, already warned
        return squares / builtins.max(op.dof, 0)


def _centred_gradient(op: Function, g: Tensor, x: Tensor) -> Tensor:
    """broadcast(g) * (x - mean(x)) / dof, in tinyamp ops (differentiable again)."""
    scale = 1 / op.dof if op.dof > 0 else math.inf
    g = broadcast_to(_keep(g, x.shape, op.dims, op.keepdim), x.shape)
    return g * (x - mean(x, op.dims, keepdim=True)) * scale


class Var(Function):
    """y = sum((x - mean)^2) / (N - correction); dx = gy * 2 (x - mean) / (N - correction)

    FP32 under autocast, like std (PyTorch's CUDA autocast leaves var/std in the
    incoming dtype): a float16 variance underflows and loses the small spreads.
    """

    precision = FP32
    save_inputs = (0,)

    def __init__(self, dim: Any, correction: float, keepdim: bool) -> None:
        self.dim, self.correction, self.keepdim = dim, correction, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        return _sum_of_squares(self, xp, x).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        return _centred_gradient(self, gy * 2, x)


class Std(Function):
    """y = sqrt(var(x)); dx = gy / y * (x - mean) / (N - correction), 0 where y = 0 (as PyTorch)

    FP32 under autocast, as var (PyTorch's CUDA autocast keeps the incoming dtype).
    """

    precision = FP32
    save_inputs = (0,)
    save_outputs = (0,)

    def __init__(self, dim: Any, correction: float, keepdim: bool) -> None:
        self.dim, self.correction, self.keepdim = dim, correction, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.sqrt(_sum_of_squares(self, xp, x)).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        flat = y == 0  # a constant slice: std has no derivative there; PyTorch gives 0
        g = where(flat, 0.0, gy / where(flat, 1.0, y))
        return _centred_gradient(self, g, x)


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


def _correction(op: str, dim: Any, unbiased: "bool | None", correction: "float | None") -> tuple:
    """PyTorch's spellings: var(x, dim, correction=c), var(x, dim, unbiased), var(x, unbiased)."""
    if isinstance(dim, bool):  # var(x, False): the old positional unbiased
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ValueError(f"{op}: pass either unbiased or correction, not both")
    if correction is None:
        correction = 1 if unbiased is None else int(unbiased)
    return dim, correction


def var(input: Tensor, dim: Any = None, unbiased: "bool | None" = None, keepdim: bool = False, *,  # noqa: A002
        correction: "float | None" = None) -> Tensor:
    """Variance over ``dim`` with Bessel's ``correction`` (default 1)."""
    dim, correction = _correction("var", dim, unbiased, correction)
    return Var(dim, correction, keepdim)(input)


def std(input: Tensor, dim: Any = None, unbiased: "bool | None" = None, keepdim: bool = False, *,  # noqa: A002
        correction: "float | None" = None) -> Tensor:
    """Standard deviation over ``dim`` with Bessel's ``correction`` (default 1)."""
    dim, correction = _correction("std", dim, unbiased, correction)
    return Std(dim, correction, keepdim)(input)


METHODS = {"sum": sum, "mean": mean, "max": max, "min": min, "amax": amax, "amin": amin,
           "argmax": argmax, "argmin": argmin, "var": var, "std": std}
