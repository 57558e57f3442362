"""Layer normalisation over the trailing dims, forward and backward: the dispatch and the reference numerics.

x is read as rows of ``n`` values (n = the product of the last ``ndim`` dims); every row is
normalised with its own mean and rstd = 1 / sqrt(var + eps) (biased variance), computed in the
compute dtype (float32 for float16/bfloat16 and float32 inputs, float64 for float64), and saved in
it. weight and bias (shape: the normalised dims; any floating dtype, float32 beside a 16-bit input
as O2 keeps them) are applied in the compute dtype; the output is rounded once to x's dtype::

    xhat = (x - mean) rstd,   y = xhat w + b
    dx = rstd (g - mean(g) - xhat mean(g xhat)),  g = gy w,   dw = sum_rows gy xhat,   db = sum_rows gy

- :func:`forward` ``(x, ndim, weight, bias, eps) -> (y, mean, rstd)``; mean and rstd keep x's
  leading dims and have size 1 in the normalised ones.
- :func:`backward` ``(gy, x, mean, rstd, weight, ndim, bias_dtype) -> (dx, dw, db)``: dx in x's
  dtype, dw in weight's and db in ``bias_dtype`` (None without weight / bias), reduced over the rows.
- CPU (NumPy arrays): one numba pass over the rows each way (``cpu/layer_norm_cpu.py``).
- CuPy arrays of float16/bfloat16/float32: one CUDA launch each way (``cuda/cuda_layer_norm.py``;
  dw and db reduced in the backward's launch); other arrays: the xp expressions below.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .. import dtypes as dt
from .cuda import cuda_layer_norm
from .cpu import cpu_path, layer_norm_cpu

__all__ = ["forward", "backward", "normalize"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_layer_norm.py); False sends every array to the xp expressions below (a
# test shows what the launch budget loses without them).
FUSED_ON_GPU = True


def _axes(x: Any, ndim: int) -> tuple:
    return tuple(range(x.ndim - ndim, x.ndim))


def normalize(x: Any, mean: Any, rstd: Any, weight: Any, bias: Any, pshape: tuple) -> Any:
    """(x - mean) * rstd * weight + bias in the statistics' dtype, returned in x's dtype (an xp expression)."""
    y = (x.astype(mean.dtype, copy=False) - mean) * rstd
    if weight is not None:
        y = y * weight.astype(y.dtype, copy=False).reshape(pshape)
    if bias is not None:
        y = y + bias.astype(y.dtype, copy=False).reshape(pshape)
    return y.astype(x.dtype, copy=False)


def forward(x: Any, ndim: int, weight: Any, bias: Any, eps: float) -> tuple:
    """(y, mean, rstd) of layer norm over the last ``ndim`` dims of x."""
    if (FUSED_ON_GPU and x.size and cuda_layer_norm.takes(x, weight, bias)
            and (weight is None or bias is None or weight.dtype == bias.dtype)):
        # One launch: float32 statistics (block trees, not NumPy's pairwise sums), one rounding.
        y, mean, rstd = cuda_layer_norm.forward(x, weight, bias, eps, ndim, x.dtype)
        kept = tuple(x.shape[:x.ndim - ndim]) + (1,) * ndim
        return y, mean.reshape(kept), rstd.reshape(kept)
    if cpu_path.numba_takes(x, weight, bias):
        return layer_norm_cpu.forward(x, ndim, weight, bias, eps)
    xp = backend.array_module(x)
    axes = _axes(x, ndim)
    pshape = (1,) * (x.ndim - ndim) + tuple(x.shape[x.ndim - ndim:])
    xf = x.astype(dt.opmath_dtype(x.dtype), copy=False)
    mean = xf.mean(axis=axes, keepdims=True)
    rstd = 1 / xp.sqrt(xf.var(axis=axes, keepdims=True) + eps)
    return normalize(x, mean, rstd, weight, bias, pshape), mean, rstd


def backward(gy: Any, x: Any, mean: Any, rstd: Any, weight: Any, ndim: int, bias_dtype: Any) -> tuple:
    """(dx, dw, db) of layer norm from the forward's saved mean and rstd."""
    if (FUSED_ON_GPU and x.size and gy.shape == x.shape and mean.dtype == dt.float32
            and cuda_layer_norm.takes(x, gy, weight, mean, rstd)
            and (weight is None or bias_dtype is None or weight.dtype == bias_dtype)):
        # One launch: dx per row, dw and db from per-chunk partial sums added in chunk order.
        w_dtype = weight.dtype if weight is not None else bias_dtype if bias_dtype is not None else x.dtype
        return cuda_layer_norm.backward(gy, x, weight, mean.reshape(-1), rstd.reshape(-1), ndim, w_dtype,
                                        need_dw=weight is not None, need_db=bias_dtype is not None)
    if cpu_path.numba_takes(gy, x, mean, rstd, weight) and gy.shape == x.shape:
        return layer_norm_cpu.backward(gy, x, mean, rstd, weight, ndim, bias_dtype)
    axes = _axes(x, ndim)
    rows = tuple(range(x.ndim - ndim))
    cdt = mean.dtype
    gyc = gy.astype(cdt, copy=False)
    xhat = (x.astype(cdt, copy=False) - mean) * rstd
    g = gyc if weight is None else gyc * weight.astype(cdt, copy=False).reshape(x.shape[x.ndim - ndim:])
    if x.size:
        dx = rstd * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    else:
        dx = g * rstd
    dw = None if weight is None else (gyc * xhat).sum(axis=rows).reshape(weight.shape).astype(weight.dtype)
    db = None if bias_dtype is None else gyc.sum(axis=rows).astype(bias_dtype)
    return dx.astype(x.dtype, copy=False), dw, db
