"""Normalization layers: BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm and GroupNorm.

These layers are where mixed precision needs care: their statistics (a mean and
a variance over many values) lose accuracy and overflow easily in float16. So
``model.half(keep_norm_fp32=True)`` leaves them in float32 (``_is_normalization``),
and their ``forward`` then receives float16 activations with float32 weights and
running statistics. That pairing is part of the ``layer_norm``/``group_norm``/``batch_norm`` ops'
contract (ops/normalization.py): they normalise in float32, return the input's
dtype, and send each gradient back in its own input's dtype: float16 to the
previous layer, float32 to the norm's weights. No extra cast nodes, and no
float32 copy of the activation is kept for backward. Any other mix (a float32
input with float16 weights) is refused by the op with the shapes and dtypes.
Inside autocast the ops' FP32 tag applies and the output is float32, as in PyTorch.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from .. import dtypes as dt
from ..tensor import Tensor
from .module import Module
from .parameter import Parameter
from ..grad_mode import no_grad
from ..factories import ones, zeros
from ..ops.normalization import batch_norm, group_norm, layer_norm


def register_norm_state(module: Module, num_features: int, eps: float, momentum: "float | None", affine: bool,
                        track_running_stats: bool, device: Any, dtype: Any, bias: bool = True) -> None:
    """PyTorch's ``_NormBase`` state: options, affine weight (ones) and bias (zeros), running statistics."""
    module.num_features, module.eps, module.momentum = num_features, eps, momentum
    module.affine, module.track_running_stats = affine, track_running_stats
    module.register_parameter("weight", Parameter(ones(num_features, dtype=dtype, device=device))
                              if affine else None)
    module.register_parameter("bias", Parameter(zeros(num_features, dtype=dtype, device=device))
                              if affine and bias else None)
    stats = {"running_mean": None, "running_var": None, "num_batches_tracked": None}
    if track_running_stats:
        stats = {"running_mean": zeros(num_features, dtype=dtype, device=device),
                 "running_var": ones(num_features, dtype=dtype, device=device),
                 "num_batches_tracked": zeros((), dtype=dt.int64, device=device)}
    for name, value in stats.items():
        module.register_buffer(name, value)


class _BatchNorm(Module):
    """Shared by the BatchNorm layers: normalize each channel (dim 1) over the other dims."""

    _is_normalization = True
    _expected_dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__()
        register_norm_state(self, num_features, eps, momentum, affine, track_running_stats, device, dtype, bias)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def _check_input(self, x: Tensor) -> None:
        if x.ndim not in self._expected_dims:
            # PyTorch's words first ("expected 4D input (got 2D input)"), then the layer and the shape
            raise ValueError(f"expected {' or '.join(f'{d}D' for d in self._expected_dims)} input (got {x.ndim}D "
                             f"input): {self!r} got input of shape {list(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{self!r}: expected {self.num_features} channels in dimension 1, got input of "
                             f"shape {list(x.shape)}")

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.array += 1
            self.num_batches_tracked._version[0] += 1
            if self.momentum is None:  # a cumulative moving average (reads the count on the host)
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch_stats = self.training or self.running_mean is None
        if use_batch_stats and x.numel() // x.shape[1] == 1:  # 0 values (an empty batch) are allowed, as PyTorch
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
        # Running statistics are updated (in place, by the op) only when training and tracking.
        track = not self.training or self.track_running_stats
        running_mean = self.running_mean if track else None
        running_var = self.running_var if track else None
        return batch_norm(x, running_mean, running_var, self.weight, self.bias,
                                      use_batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L) inputs."""

    _expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W) inputs."""

    _expected_dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization over (N, C, D, H, W) inputs."""

    _expected_dims = (5,)


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims; weight ones, bias zeros."""

    _is_normalization = True

    def __init__(self, normalized_shape: "int | Sequence[int]", eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        integral = isinstance(normalized_shape, numbers.Integral)
        shape = (int(normalized_shape),) if integral else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(shape, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(shape, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Weight back to ones and bias to zeros (PyTorch's initialisation)."""
        with no_grad():
            if self.weight is not None:
                self.weight.fill_(1)
            if self.bias is not None:
                self.bias.fill_(0)

    def forward(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.ndim < n or tuple(x.shape[x.ndim - n:]) != self.normalized_shape:
            raise ValueError(f"{self!r}: expected input with trailing shape {list(self.normalized_shape)}, "
                             f"got {list(x.shape)}")
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalize each sample over groups of ``num_channels // num_groups`` channels; per-channel affine."""

    _is_normalization = True

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Weight back to ones and bias to zeros (PyTorch's initialisation)."""
        with no_grad():
            if self.affine:
                self.weight.fill_(1)
                self.bias.fill_(0)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"{self!r}: expected input of shape (N, {self.num_channels}, *), got "
                             f"{list(x.shape)} ({dt.dtype_name(x.dtype)})")
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
