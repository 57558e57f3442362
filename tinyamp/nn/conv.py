"""Conv2d and ConvTranspose2d over (N, C, H, W) inputs, PyTorch's layouts and defaults."""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..tensor import Tensor
from .linear import WeightAndBias
from .parameter import Parameter
from ..factories import empty
from ..ops.conv import conv2d
from ..ops.conv_transpose import conv_transpose2d


def _pair(value: Any, name: str) -> tuple[int, int]:
    """``3`` -> ``(3, 3)``; a pair stays a pair."""
    if isinstance(value, int):
        return (value, value)
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair  # type: ignore[return-value]


class Conv2d(WeightAndBias):
    """Weight (out_channels, in_channels // groups, kH, kW); PyTorch's default init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must "
                             f"both be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv2d: padding_mode={padding_mode!r} is not supported; only 'zeros'")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.dilation = _pair(dilation, "dilation")
        if isinstance(padding, str) and padding not in ("valid", "same"):
            raise ValueError(f"Conv2d: padding must be 'valid', 'same', an int or a pair, got {padding!r}")
        # 'same' and 'valid' go to the op as they are (it places the odd pixel as PyTorch does).
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding")
        self.padding_mode = padding_mode
        self._make_parameters((out_channels, in_channels // groups, *self.kernel_size), bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ValueError(f"{self!r}: expected input of shape (N, {self.in_channels}, H, W) or "
                             f"({self.in_channels}, H, W), got {list(x.shape)} ({dt.dtype_name(x.dtype)})")
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding not in ((0, 0), "valid"):
            text += f", padding={self.padding}"
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class ConvTranspose2d(WeightAndBias):
    """Weight (in_channels, out_channels // groups, kH, kW); PyTorch's default init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"ConvTranspose2d: in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must both be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for ConvTranspose2d, got {padding_mode!r}')
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        self.output_padding = _pair(output_padding, "output_padding")
        self.dilation = _pair(dilation, "dilation")
        self.padding_mode = padding_mode
        self.weight = Parameter(empty(in_channels, out_channels // groups, *self.kernel_size, dtype=dtype,
                                              device=device))
        if bias:  # one per output channel (the weight's dim 1 times groups, not its dim 0)
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()  # fan_in from the weight's dim 1, as PyTorch's transposed convolutions

    def _output_padding(self, x: Tensor, output_size: Any) -> tuple:
        """PyTorch's: the output_padding that makes the output ``output_size`` (H, W), or the layer's own."""
        if output_size is None:
            return self.output_padding
        size = list(output_size)[-2:]
        padding = []
        for d, want in enumerate(size):
            smallest = ((x.shape[-2 + d] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            if not smallest <= want < smallest + self.stride[d]:
                raise ValueError(f"{self!r}: requested an output size of {size}, but valid sizes range from "
                                 f"{smallest} to {smallest + self.stride[d] - 1} in dim {d} (for an input "
                                 f"of {list(x.shape)})")
            padding.append(want - smallest)
        return tuple(padding)

    def forward(self, x: Tensor, output_size: Any = None) -> Tensor:
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ValueError(f"{self!r}: expected input of shape (N, {self.in_channels}, H, W) or "
                             f"({self.in_channels}, H, W), got {list(x.shape)} ({dt.dtype_name(x.dtype)})")
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                            self._output_padding(x, output_size), self.groups, self.dilation)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0, 0):
            text += f", padding={self.padding}"
        if self.output_padding != (0, 0):
            text += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text
