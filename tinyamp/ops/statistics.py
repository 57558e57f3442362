"""Spread statistics: variance and standard deviation with Bessel's correction.

Both accumulate in float32 (or wider) and are FP32-tagged; their backward is
written in tinyamp ops, so second derivatives work.
"""

from __future__ import annotations

import builtins
import math
import warnings
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to
from .reduce import _keep, mean, normalize_dims
from .clamp_where import where


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
    z = dt.opmath(x)
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


METHODS = {"var": var, "std": std}
