"""The product: ``prod(x)`` and ``prod(x, dim, keepdim)`` (``torch.prod``, ``Tensor.prod``).

FP32 under autocast (PyTorch's CUDA autocast runs prod in float32); outside it a
16-bit input is multiplied in float32 and rounded once. The gradient of each
element is the product of the others, written so that zeros are exact (no
division by a zero): with no zero in a slice ``y / x``, with one zero the
product of the non-zeros at the zero and 0 elsewhere, with two or more 0.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to
from .clamp_where import where
from .reduce import keepdim_shape, normalize_dims
from .reduce import sum as _sum


class Prod(Function):
    """y = prod of x over dims; dx_i = gy * prod_(j != i) x_j (exact at zeros)"""

    precision = FP32
    save_inputs = (0,)

    def __init__(self, dim: "int | None" = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        self.dims = normalize_dims("prod", self.dim, x.ndim)
        cdt = dt.opmath_dtype(x.dtype)
        y = xp.prod(x.astype(cdt, copy=False), axis=self.dims, keepdims=self.keepdim)
        return xp.asarray(y).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        shape = x.shape
        zero = x == 0
        nonzero = where(zero, 1.0, x)
        others = Prod(self.dims, True)(nonzero)                   # the product of the non-zeros of each slice
        zeros = _sum(zero.to(x.dtype), self.dims, keepdim=True)  # how many zeros each slice has
        gk = gy if self.keepdim else gy.reshape(keepdim_shape(shape, self.dims))
        grad = where(zeros == 0, others / nonzero, where((zeros == 1) & zero, others, 0.0))
        return broadcast_to(gk, shape) * grad


def prod(input: Tensor, dim: "int | None" = None, keepdim: bool = False, *,  # noqa: A002 - torch name
         dtype: Any = None) -> Tensor:
    """The product of all elements, or along ``dim`` (an int, as PyTorch)."""
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    x = input if dtype is None else input.to(dtype)
    if x.dtype == dt.bool_ or (x.dtype.kind in "iu" and x.dtype != dt.int64):
        x = x.to(dt.int64)  # PyTorch: integer and bool products are int64
    return Prod(dim, keepdim)(x)


METHODS = {"prod": prod}
