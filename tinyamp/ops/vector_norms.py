"""Vector norms: ``x.norm()``, ``torch.norm``, ``torch.linalg.vector_norm``/``norm``, ``F.normalize``.

The 2-norm (the default everywhere, and the one gradient penalties and
``normalize`` use) is one op, :class:`Norm`, whose backward ``gy * x / y`` is 0
where the norm is 0: PyTorch's subgradient, where the composite
``sqrt(sum(x * x))`` would give 0 * inf = nan. Other orders are compositions of
differentiable ops: 1 = sum |x|, inf = max |x|, -inf = min |x|, 0 = the number of
non-zeros (no gradient), p = (sum |x|^p)^(1/p).

FP32 under autocast (PyTorch's lists put norms there: a float16 sum of squares
overflows at a norm of about 256); outside autocast float16/bfloat16 inputs are
accumulated in float32 and rounded once to the input dtype.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to
from .elementwise import abs as _abs
from .elementwise import pow as _pow
from .reduce import _keep, amax, amin, normalize_dims
from .reduce import sum as _sum
from .clamp_where import clamp_min, where


class Norm(Function):
    """y = sqrt(sum(x^2, dims)); dx = gy * x / y (0 where y = 0, as PyTorch)"""

    precision = FP32
    save_inputs = (0,)
    save_outputs = (0,)

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype not in dt.FLOATING:
            raise TypeError(f"norm: expected a floating point input, got {dt.dtype_name(x.dtype)} "
                            f"(shape {list(x.shape)}); convert it with .float()")
        self.dims = normalize_dims("norm", self.dim, x.ndim)
        z = dt.opmath(x)
        return xp.sqrt((z * z).sum(axis=self.dims, keepdims=self.keepdim)).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        x, y = self.saved_tensors
        y = _keep(y, x.shape, self.dims, self.keepdim)
        gy = _keep(gy, x.shape, self.dims, self.keepdim)
        flat = y == 0  # then x is all zeros there: any finite divisor gives the 0 subgradient
        return broadcast_to(gy / where(flat, 1.0, y), x.shape) * x


def vector_norm(x: Tensor, ord: float = 2, dim: "int | Sequence[int] | None" = None,  # noqa: A002 - torch name
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all elements when None), as ``torch.linalg.vector_norm``."""
    if dtype is not None:
        x = x.to(dtype)
    if isinstance(ord, str) or isinstance(ord, bool):
        raise ValueError(f"vector_norm: ord must be a number (2, 1, inf, ...), got {ord!r}")
    ord = float(ord)
    if ord == 2:
        return Norm(dim, keepdim)(x)
    if ord == 0:  # counts non-zeros: piecewise constant, so a zero gradient (PyTorch's, not none)
        return _sum(where(x != 0, 1.0, x * 0.0), dim, keepdim)  # x * 0 is 0 wherever it is picked
    magnitude = _abs(x)
    if ord == math.inf:
        return amax(magnitude, () if dim is None else dim, keepdim)
    if ord == -math.inf:
        return amin(magnitude, () if dim is None else dim, keepdim)
    if ord == 1:
        return _sum(magnitude, dim, keepdim)
    return _pow(_sum(_pow(magnitude, ord), dim, keepdim), 1.0 / ord)


def norm(input: Tensor, p: "float | str | None" = "fro", dim: "int | Sequence[int] | None" = None,  # noqa: A002
         keepdim: bool = False, dtype: Any = None) -> Tensor:
    """``torch.norm`` / ``x.norm(p, dim, keepdim)``: a vector norm over ``dim``; 'fro' is the 2-norm."""
    if p is None or p == "fro":
        p = 2
    elif isinstance(p, str):
        raise ValueError(f"norm: p={p!r} (a matrix norm) is not supported; tinyamp has vector norms "
                         f"(p a number, or 'fro')")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


def linalg_norm(input: Tensor, ord: "float | str | None" = None,  # noqa: A002
                dim: "int | Sequence[int] | None" = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``torch.linalg.norm``: vector norms, and the Frobenius norm of matrices; other matrix norms raise."""
    over_matrix = (dim is None and input.ndim == 2) or (dim is not None and not isinstance(dim, int)
                                                        and len(tuple(dim)) == 2)
    if ord is None or ord == "fro" and over_matrix:
        return vector_norm(input, 2, dim, keepdim, dtype=dtype)
    if over_matrix or isinstance(ord, str):
        raise ValueError(f"linalg.norm: the matrix norm ord={ord!r} is not supported (input shape "
                         f"{list(input.shape)}); use ord=None or 'fro', or linalg.vector_norm for vector norms")
    if dim is None and input.ndim != 1:
        raise ValueError(f"linalg.norm: ord={ord!r} with dim=None needs a 1-D or 2-D input, got shape "
                         f"{list(input.shape)}; pass dim or use linalg.vector_norm")
    return vector_norm(input, ord, dim, keepdim, dtype=dtype)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """``input / max(norm(input, p, dim, keepdim=True), eps)`` (``torch.nn.functional.normalize``)."""
    return input / clamp_min(vector_norm(input, p, dim, keepdim=True), eps)


METHODS = {"norm": norm}
