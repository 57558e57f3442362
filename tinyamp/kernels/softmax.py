"""softmax and log_softmax along one axis, forward and backward: the dispatch and the reference numerics.

Computed in float32 (float64 for float64 input) and rounded once to the input's dtype; the
maximum is subtracted first, so large inputs never overflow::

    softmax:     y = exp(x - max) / sum(exp(x - max)),    dx = y (gy - sum(gy y))
    log_softmax: y = x - max - log(sum(exp(x - max))),    dx = gy - exp(y) sum(gy)

A row of -inf is shifted by 0 (softmax: 0/0 = nan, log_softmax: -inf, as in PyTorch); a row
holding +inf gives nan.

- :func:`softmax`, :func:`log_softmax` ``(x, axis)``; :func:`softmax_backward`,
  :func:`log_softmax_backward` ``(gy, y, axis)`` (in gy's dtype).
- CPU (NumPy arrays): one numba pass per row (``cpu/softmax_cpu.py``).
- CuPy arrays along their last axis: one CUDA launch each way (``cuda/cuda_softmax.py``); other
  arrays and axes: the xp expressions below.
- :func:`shifted` is the max-subtraction the softmax family, the losses and attention share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .cuda import cuda_softmax
from .cpu import cpu_path, softmax_cpu

__all__ = ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "shifted"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_softmax.py); False sends every array to the xp expressions below (a
# test shows what the launch budget loses without them).
FUSED_ON_GPU = True


def _fused(axis: Any, *arrays: Any) -> bool:
    """Whether the CUDA kernels take these arrays along ``axis``: the last one (a row a block)."""
    first = arrays[0]
    return (FUSED_ON_GPU and isinstance(axis, (int, np.integer)) and first.ndim >= 1
            and axis in (-1, first.ndim - 1) and cuda_softmax.takes(*arrays))


def shifted(xp: Any, x: Any, axes: Any, inf_max_to_zero: bool = False) -> tuple[Any, Any]:
    """``(x - max, max)`` along ``axes`` (keepdims), computed in at least float32.

    A row whose maximum is ``-inf`` (all ``-inf``) is shifted by 0 rather than by
    the infinity, which would turn it into NaN; a ``+inf`` maximum is kept (the
    softmax of a row holding ``+inf`` is NaN, as in PyTorch) unless
    ``inf_max_to_zero`` (logsumexp: PyTorch gives ``+inf`` there). Empty axes
    shift by 0 (integer inputs are refused by the callers).
    """
    x = dt.opmath(x)
    reduced = axes if isinstance(axes, tuple) else (axes,)
    if any(x.shape[a] == 0 for a in reduced):  # max of nothing: no identity, nothing to shift
        return x, xp.zeros(tuple(1 if i in reduced else n for i, n in enumerate(x.shape)), dtype=x.dtype)
    m = x.max(axis=axes, keepdims=True)
    keep = xp.isfinite(m) if inf_max_to_zero else m != -np.inf
    m = xp.where(keep, m, xp.zeros((), dtype=m.dtype))
    with np.errstate(invalid="ignore"):  # +inf - +inf = nan: the documented result
        return x - m, m


def _on_rows(run: Any, axis: Any, *arrays: Any) -> Any:
    """The numba kernel ``run`` on these NumPy arrays (a 0-d input as one row of one), else None."""
    if not cpu_path.numba_takes(*arrays) or any(a.shape != arrays[0].shape for a in arrays):
        return None
    if arrays[0].ndim == 0:
        return run(*(a.reshape(1) for a in arrays), 0).reshape(())
    return run(*arrays, axis if axis >= 0 else axis + arrays[0].ndim)


def softmax(x: Any, axis: Any) -> Any:
    """exp(x - max) / sum(exp(x - max)) along ``axis``, in x's dtype."""
    if _fused(axis, x):
        return cuda_softmax.forward(x, log=False)
    y = _on_rows(softmax_cpu.softmax, axis, x)
    if y is not None:
        return y
    xp = backend.array_module(x)
    z, _ = shifted(xp, x, axis)
    e = xp.exp(z)
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def log_softmax(x: Any, axis: Any) -> Any:
    """x - max - log(sum(exp(x - max))) along ``axis``, in x's dtype."""
    if _fused(axis, x):
        return cuda_softmax.forward(x, log=True)
    y = _on_rows(softmax_cpu.log_softmax, axis, x)
    if y is not None:
        return y
    xp = backend.array_module(x)
    z, _ = shifted(xp, x, axis)
    with np.errstate(divide="ignore"):  # a row of -inf gives log(0) = -inf, as PyTorch
        lse = xp.log(xp.exp(z).sum(axis=axis, keepdims=True))
    return (z - lse).astype(x.dtype, copy=False)


def softmax_backward(gy: Any, y: Any, axis: Any) -> Any:
    """y * (gy - sum(gy * y)) along ``axis``, in gy's dtype."""
    if _fused(axis, gy, y):
        return cuda_softmax.backward(gy, y, log=False)
    dx = _on_rows(softmax_cpu.softmax_backward, axis, gy, y)
    if dx is not None:
        return dx
    g, yc = dt.opmath(gy), dt.opmath(y)
    return (yc * (g - (g * yc).sum(axis=axis, keepdims=True))).astype(gy.dtype, copy=False)


def log_softmax_backward(gy: Any, y: Any, axis: Any) -> Any:
    """gy - exp(y) * sum(gy) along ``axis``, in gy's dtype."""
    if _fused(axis, gy, y):
        return cuda_softmax.backward(gy, y, log=True)
    dx = _on_rows(softmax_cpu.log_softmax_backward, axis, gy, y)
    if dx is not None:
        return dx
    xp = backend.array_module(y)
    g = dt.opmath(gy)
    return (g - xp.exp(dt.opmath(y)) * g.sum(axis=axis, keepdims=True)).astype(gy.dtype, copy=False)
