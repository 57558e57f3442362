"""MaxPool2d and AvgPool2d: windowed max / mean over (N, C, H, W) inputs."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .module import Module
from ..ops.conv import adaptive_avg_pool2d, avg_pool2d, max_pool2d


class MaxPool2d(Module):
    """Max over each ``kernel_size`` window; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = stride if stride is not None else kernel_size
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Any:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                      ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over each ``kernel_size`` window; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                                      ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Mean over a grid of ``output_size`` cells (``(1, 1)``: global average pooling)."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
