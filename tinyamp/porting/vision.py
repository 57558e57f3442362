"""Vision layers beyond the AMP path: PixelShuffle, padding layers, Upsample, InstanceNorm, LocalResponseNorm.

They hold options (and InstanceNorm its affine parameters and optional running
statistics) and call ops: ``interpolate`` (FP32 under autocast, as PyTorch's CUDA
``upsample_*``), ``instance_norm`` (NEUTRAL: the input's dtype, as PyTorch's CUDA
autocast leaves it off its lists), ``pad`` and the compositions of
:mod:`tinyamp.porting.vision_functional`. Re-exported as ``tinyamp.nn.<Name>``.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from ..nn.module import Module
from ..nn.normalization import register_norm_state
from ..ops.normalization import instance_norm
from ..ops.shape import pad, squeeze, unsqueeze
from ..ops.upsample import interpolate
from ..tensor import Tensor
from .vision_functional import local_response_norm, pixel_shuffle, pixel_unshuffle


class PixelShuffle(Module):
    """(*, C r^2, H, W) -> (*, C, H r, W r) with r = ``upscale_factor`` (sub-pixel convolution's rearrangement)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - torch name
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H r, W r) -> (*, C r^2, H, W) with r = ``downscale_factor``."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


# ------------------------------------------------------------------ padding layers
class _PadNd(Module):
    """``F.pad(input, padding, mode, value)`` with ``padding`` one int or 2 * dims ints (last dim first)."""

    mode = "constant"
    dims = 2

    def __init__(self, padding: "int | Sequence[int]", value: float = 0.0) -> None:
        super().__init__()
        widths = (padding,) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        if len(widths) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.dims} ints, got "
                             f"{padding!r}")
        self.padding, self.value = widths, value

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if self.mode != "constant":
            for i in range(self.dims):  # PyTorch's check, before the gather would read out of range
                size, (before, after) = input.shape[input.ndim - 1 - i], self.padding[2 * i:2 * i + 2]
                if self.mode == "reflect" and (before >= size or after >= size):
                    raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input "
                                       f"dimension, but got: padding ({before}, {after}) at dimension "
                                       f"{input.ndim - 1 - i} of input {list(input.shape)}")
            return pad(input, self.padding, self.mode)
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"{self.padding}" if self.mode != "constant" or type(self).__name__.startswith("Zero") \
            else f"padding={self.padding}, value={self.value}"


def _pad_class(name: str, mode: str, dims: int, doc: str) -> type:
    return type(name, (_PadNd,), {"mode": mode, "dims": dims, "__doc__": doc, "__module__": __name__})


ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1, "Pad the last dim by reflection (edge not repeated).")
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2, "Pad the last 2 dims by reflection.")
ReflectionPad3d = _pad_class("ReflectionPad3d", "reflect", 3, "Pad the last 3 dims by reflection.")
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1, "Pad the last dim with its edge values.")
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2, "Pad the last 2 dims with their edge values.")
ReplicationPad3d = _pad_class("ReplicationPad3d", "replicate", 3, "Pad the last 3 dims with their edge values.")


class ZeroPad1d(_PadNd):
    """Pad the last dim with zeros."""

    dims = 1

    def __init__(self, padding: "int | Sequence[int]") -> None:
        super().__init__(padding, 0.0)


class ZeroPad2d(ZeroPad1d):
    """Pad the last 2 dims with zeros."""

    dims = 2


class ConstantPad1d(_PadNd):
    """Pad the last dim with ``value``."""

    dims = 1

    def __init__(self, padding: "int | Sequence[int]", value: float) -> None:
        super().__init__(padding, value)


class ConstantPad2d(ConstantPad1d):
    """Pad the last 2 dims with ``value``."""

    dims = 2


class ConstantPad3d(ConstantPad1d):
    """Pad the last 3 dims with ``value``."""

    dims = 3


# ------------------------------------------------------------------ resampling
class Upsample(Module):
    """``F.interpolate(input, size, scale_factor, mode, align_corners)`` as a layer."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: "bool | None" = None, recompute_scale_factor: "bool | None" = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size, self.mode = size, mode
        if isinstance(scale_factor, tuple):
            self.scale_factor: Any = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        shown = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{shown}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample(mode="nearest")`` of (N, C, H, W) inputs."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(mode="bilinear", align_corners=True)`` of (N, C, H, W) inputs."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


# ------------------------------------------------------------------ normalization
class _InstanceNorm(Module):
    """Normalize each sample's channels over their spatial dims; optional affine and running statistics."""

    _is_normalization = True
    _dims: tuple = ()     # the accepted ranks: (unbatched, batched)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__()
        register_norm_state(self, num_features, eps, momentum, affine, track_running_stats, device, dtype, bias)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in self._dims:
            raise ValueError(f"expected {self._dims[0]}D or {self._dims[1]}D input (got {input.ndim}D input)")
        feature_dim = input.ndim - self._dims[0]
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          f"warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = input.ndim == self._dims[0]
        x = unsqueeze(input, 0) if unbatched else input
        y = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                          self.training or not self.track_running_stats,
                          0.0 if self.momentum is None else self.momentum, self.eps)
        return squeeze(y, 0) if unbatched else y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or unbatched (C, L) inputs."""

    _dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or unbatched (C, H, W) inputs."""

    _dims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or unbatched (C, D, H, W) inputs."""

    _dims = (4, 5)


class LocalResponseNorm(Module):
    """x / (k + alpha / size * sum of x^2 over ``size`` neighbouring channels) ** beta (AlexNet's normalization)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
