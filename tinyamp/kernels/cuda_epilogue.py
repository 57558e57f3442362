"""CUDA kernels around linear's GEMM: the bias + ReLU + downcast epilogue, and ReLU's backward.

One-launch kernels (CuPy's ufuncs take three launches and two temporaries for
the epilogue, two launches for the backward). ``linear``'s 16-bit forward on a
GPU no longer takes the epilogue (``gemm.gemm_bias`` writes its output once);
``ReluBackward`` takes ``relu_backward`` for mixed dtypes (one dtype goes to
``cuda_vector``):

- :func:`bias_act_convert`: ``round(max(y + float32(bias), 0))`` (or without the
  ReLU) from the float32 GEMM output to float16/bfloat16, the bias read in its
  own dtype and widened exactly. Same bits as ``y += bias``, ``maximum(y, 0)``
  (NaN propagates), ``astype``.
- :func:`relu_backward`: ``gy * (y > 0)``, computed in float32 and rounded to
  the gradient's dtype, as CuPy's ``multiply(gy, y > 0, dtype=gy.dtype)``
  (so an inf/nan in ``gy`` at a dead unit gives nan, as that multiply does).

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cuda_launch as launch
from .cuda_launch import KernelSpec

BIAS_ACT = KernelSpec(
    "tinyamp_bias_act_convert", "float32 y, raw B bias, int64 cols, bool has_bias, bool relu", "O out",
    r"""
    float v = has_bias ? y + static_cast<float>(bias[i % cols]) : y;  // no +0.0: it would turn -0.0 into +0.0
    if (relu && !(v > 0.0f || isnan(v))) v = 0.0f;  // NumPy's maximum(v, 0): nan stays nan
    out = v;
    """)

RELU_BACKWARD = KernelSpec(
    "tinyamp_relu_backward", "G gy, Y y", "G out",
    "out = static_cast<float>(gy) * (static_cast<float>(y) > 0.0f ? 1.0f : 0.0f);")


def elementwise_specs() -> list[KernelSpec]:
    return [BIAS_ACT, RELU_BACKWARD]


def bias_act_convert(y: Any, bias: Any, dtype: Any, relu: bool) -> Any:
    """The epilogue on the device: a new ``dtype`` array of ``y``'s shape; ``bias`` (N,) or None."""
    cols = y.shape[-1] if y.ndim else 1
    with launch._device(y):
        out = launch._cp().empty(y.shape, dtype=dtype)
        b = bias if bias is not None else y  # never read without a bias
        launch.elementwise(BIAS_ACT, y, b, np.int64(cols), bias is not None, bool(relu), out)
    return out


def relu_backward(gy: Any, y: Any) -> Any:
    """``gy * (y > 0)`` in ``gy``'s dtype, one launch."""
    with launch._device(gy):
        out = launch._cp().empty(gy.shape, dtype=gy.dtype)
        launch.elementwise(RELU_BACKWARD, gy, y, out)
    return out
