"""erf and GELU (exact and tanh), forward and backward: the dispatch and the reference numerics.

- :func:`erf` ``(x)``, :func:`gelu` ``(x, approximate)``, :func:`gelu_backward` ``(gy, x, approximate)``:
  arrays in, arrays out. float16/bfloat16 are computed in float32 or better and rounded once to
  their dtype; integer inputs give float32 (PyTorch's rule); floating outputs keep the dtype.
- CPU (NumPy arrays): one numba pass each (``cpu/gelu_cpu.py``), in float64 with tinyamp's one erf
  (``cpu/nn_numba.py``: absolute error below 2e-15).
- CuPy arrays: GELU and its backward in one CUDA launch each (``cuda/cuda_gelu.py``: float32 math with
  the device's ``erff``/``tanhf``, PyTorch's CUDA formulas); erf and other arrays: the same formulas
  as xp expressions (:func:`_erf_xp` evaluates the same polynomials in the array's compute dtype), so
  every device computes the same function; the bits may differ from the CPU's in the last place.

The formulas, with ``Phi(x) = (1 + erf(x / sqrt 2)) / 2`` and ``phi`` its density::

    gelu(x) = x Phi(x)                      gelu'(x) = Phi(x) + x phi(x)
    tanh:  x (1 + tanh(k (x + c x^3))) / 2, k = sqrt(2 / pi), c = 0.044715
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .. import dtypes as dt
from .cpu import cpu_path, gelu_cpu
from .cuda import cuda_gelu
from .cpu.nn_numba import ERF_LARGE, ERF_ONE, ERF_SMALL, ERF_SPLIT

__all__ = ["erf", "gelu", "gelu_backward"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_gelu.py); False sends every array to the xp expressions below (a
# test shows what the launch budget loses without them).
FUSED_ON_GPU = True

_INV_SQRT_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TANH_K = math.sqrt(2 / math.pi)
_TANH_C = 0.044715


def _floating(x: Any) -> Any:
    """x itself when floating, else as float32 (an integer input's result is float32, as in PyTorch)."""
    return x if x.dtype in dt.FLOATING else x.astype(dt.float32)


def erf(x: Any) -> Any:
    """erf(x), elementwise."""
    x = _floating(x)
    if cpu_path.numba_takes(x):
        return gelu_cpu.erf(x, x.dtype)
    xp = backend.array_module(x)
    return _erf_xp(xp, dt.opmath(x)).astype(x.dtype, copy=False)


def gelu(x: Any, approximate: str = "none") -> Any:
    """x Phi(x), or its tanh approximation, elementwise."""
    x = _floating(x)
    if cpu_path.numba_takes(x):
        return gelu_cpu.gelu(x, approximate)
    if FUSED_ON_GPU and cuda_gelu.takes(x):
        return cuda_gelu.gelu(x, approximate)  # one launch, float32 math (the device's erff/tanhf)
    xp = backend.array_module(x)
    z = dt.opmath(x)
    if approximate == "tanh":
        y = 0.5 * z * (1 + xp.tanh(_TANH_K * (z + _TANH_C * z * z * z)))
    else:
        y = 0.5 * z * (1 + _erf_xp(xp, z * _INV_SQRT_2))
    return y.astype(x.dtype, copy=False)


def gelu_backward(gy: Any, x: Any, approximate: str = "none") -> Any:
    """gy * gelu'(x) in gy's dtype."""
    x = _floating(x)
    if cpu_path.numba_takes(gy, x) and gy.shape == x.shape:
        return gelu_cpu.gelu_backward(gy, x, approximate)
    if FUSED_ON_GPU and cuda_gelu.takes(gy, x):
        return cuda_gelu.gelu_backward(gy, x, approximate)
    xp = backend.array_module(x)
    z = dt.opmath(x)
    if approximate == "tanh":
        u = _TANH_K * (z + _TANH_C * z * z * z)
        e = xp.exp(-2 * xp.abs(u))
        t = xp.copysign((1 - e) / (1 + e), u)
        sech2 = 4 * e / ((1 + e) * (1 + e))  # 1 - t^2 without cancelling (as nn_numba.tanh_sech2)
        slope = 0.5 * (1 + t) + 0.5 * z * sech2 * _TANH_K * (1 + 3 * _TANH_C * z * z)
    else:
        slope = 0.5 * (1 + _erf_xp(xp, z * _INV_SQRT_2)) + z * xp.exp(-0.5 * z * z) * _INV_SQRT_2PI
    return (dt.opmath(gy) * slope).astype(gy.dtype, copy=False)


def _horner(coefficients: tuple, t: Any) -> Any:
    p = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        p = p * t + c
    return p


def _erf_xp(xp: Any, x: Any) -> Any:
    """The polynomials of ``nn_numba.erf64`` as xp expressions (both pieces, one selected: no sync)."""
    a = xp.minimum(xp.abs(x), ERF_ONE)
    small = a * _horner(ERF_SMALL, a * a)
    large = 1 - xp.exp(-x * x) * _horner(ERF_LARGE, (2 * a - (ERF_SPLIT + ERF_ONE)) / (ERF_ONE - ERF_SPLIT))
    return xp.copysign(xp.where(a < ERF_SPLIT, small, large), x)
