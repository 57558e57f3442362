"""CUDA kernel for ReLU's backward with mixed dtypes (one dtype goes to ``cuda_vector``).

- :func:`relu_backward`: ``gy * (y > 0)``, computed in float32 and rounded to
  the gradient's dtype, as CuPy's ``multiply(gy, y > 0, dtype=gy.dtype)``
  (so an inf/nan in ``gy`` at a dead unit gives nan, as that multiply does).

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from typing import Any

from . import cuda_launch as launch
from .cuda_launch import KernelSpec

RELU_BACKWARD = KernelSpec(
    "tinyamp_relu_backward", "G gy, Y y", "G out",
    "out = static_cast<float>(gy) * (static_cast<float>(y) > 0.0f ? 1.0f : 0.0f);")


def elementwise_specs() -> list[KernelSpec]:
    return [RELU_BACKWARD]


def relu_backward(gy: Any, y: Any) -> Any:
    """``gy * (y > 0)`` in ``gy``'s dtype, one launch."""
    with launch._device(gy):
        out = launch._cp().empty(gy.shape, dtype=gy.dtype)
        launch.elementwise(RELU_BACKWARD, gy, y, out)
    return out
