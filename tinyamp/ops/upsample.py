"""Resampling: ``interpolate`` (``F.interpolate``, ``nn.Upsample``) in every mode but the anti-aliased ones.

Each mode is separable: output position ``o`` along a spatial axis is a weighted
sum of a few input positions (taps) along that axis, with PyTorch's source
coordinates (``area_pixel_compute_source_index``):

- ``nearest``: ``floor(o * scale)``; ``nearest-exact``: ``floor((o + 0.5) * scale)``;
- ``linear``/``bilinear``/``trilinear``: the two neighbours of ``(o + 0.5) * scale - 0.5``
  (``o * (in - 1) / (out - 1)`` with ``align_corners``), clamped at 0;
- ``bicubic``: four neighbours with the cubic convolution weights (A = -0.75), the
  positions clamped to the border;
- ``area``: the mean of ``[floor(o * in / out), ceil((o + 1) * in / out))`` (adaptive average pooling).

``scale`` is ``1 / scale_factor`` when a scale factor is given (and not recomputed),
``in / out`` otherwise. The forward gathers taps and sums them, axis by axis, in
float32 for 16-bit inputs (rounded once); the backward scatter-adds the gradient
back through the same taps (``InterpolateGrad``, whose own backward is the
forward again). FP32 under autocast: PyTorch's CUDA autocast runs every
``upsample_*`` op in float32.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor

_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
_LINEAR_RANK = {"linear": 3, "bilinear": 4, "trilinear": 5}
_RANK_NAME = {3: "3D", 4: "4D", 5: "5D"}


def _cubic(t: np.ndarray) -> list:
    """The four cubic-convolution weights at fractional offset ``t`` (PyTorch's A = -0.75)."""
    a = -0.75

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(mode: str, size_in: int, size_out: int, scale_factor: "float | None",
          align_corners: bool) -> tuple:
    """(indices, weights, ragged): (size_out, taps) arrays saying which inputs make each output, in float64.

    ``ragged``: the rows have different numbers of taps (area), padded with weight 0.
    """
    out = np.arange(size_out, dtype=np.float64)
    if mode == "area":
        start = np.floor(out * size_in / size_out).astype(np.int64)
        stop = np.ceil((out + 1) * size_in / size_out).astype(np.int64)
        width = int((stop - start).max()) if size_out else 1
        index = start[:, None] + np.arange(width)
        inside = index < stop[:, None]
        weight = np.where(inside, 1.0 / (stop - start)[:, None], 0.0)
        return np.minimum(index, size_in - 1), weight, True
    if align_corners:
        scale = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    else:
        scale = 1.0 / scale_factor if scale_factor is not None and scale_factor > 0 else size_in / size_out
    if mode in ("nearest", "nearest-exact"):
        offset = 0.5 if mode == "nearest-exact" else 0.0
        # float32 coordinates, as PyTorch's nearest kernels compute them
        src = np.floor((out.astype(np.float32) + np.float32(offset)) * np.float32(scale)).astype(np.int64)
        return np.minimum(src, size_in - 1)[:, None], np.ones((size_out, 1)), False
    src = out * scale if align_corners else scale * (out + 0.5) - 0.5
    if mode == "bicubic":
        base = np.floor(src)
        t = src - base
        index = np.clip(base.astype(np.int64)[:, None] + np.arange(-1, 3), 0, size_in - 1)
        return index, np.stack(_cubic(t), axis=1), False
    src = np.maximum(src, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    frac = src - low
    return np.stack([low, high], axis=1), np.stack([1 - frac, frac], axis=1), False


def _along(xp: Any, x: Any, axis: int, index: Any, weight: Any, ragged: bool) -> Any:
    """sum over taps t of weight[:, t] * x.take(index[:, t], axis).

    ``ragged`` (area windows of unequal width): a tap of weight 0 is left out, not
    multiplied, so an inf outside an output's window stays outside it.
    """
    shape = [1] * x.ndim
    shape[axis] = -1
    total = None
    for t in range(index.shape[1]):
        w = weight[:, t].reshape(shape)
        term = xp.take(x, index[:, t], axis=axis) * w
        if ragged:
            term = xp.where(w != 0, term, 0)
        total = term if total is None else total + term
    return total


def _along_adjoint(xp: Any, g: Any, axis: int, index: Any, weight: Any, ragged: bool, size_in: int) -> Any:
    """The adjoint of ``_along``: each output's gradient, weighted, added back at its taps."""
    shape = list(g.shape)
    shape[axis] = size_in
    out = xp.zeros(shape, dtype=g.dtype)
    wshape = [1] * g.ndim
    wshape[axis] = -1
    moved = xp.moveaxis(out, axis, 0)  # a view: the scatter writes into ``out``
    for t in range(index.shape[1]):
        w = weight[:, t].reshape(wshape)
        values = g * w
        values = xp.moveaxis(xp.where(w != 0, values, 0) if ragged else values, axis, 0)
        if backend.is_cupy_array(out):
            backend.cuda_lib("cupyx").scatter_add(moved, index[:, t], values)
        else:
            np.add.at(moved, index[:, t], values)
    return out


class _Resample(Function):
    """Shared setup: per spatial axis, the taps on the array's device in the compute dtype."""

    precision = FP32

    def __init__(self, taps: list, sizes_in: tuple) -> None:
        self.taps, self.sizes_in = taps, sizes_in

    def _device_taps(self, xp: Any, like: Any, dtype: Any) -> list:
        device = backend.device_of(like)
        return [(backend.to_device(i, device), backend.to_device(w.astype(dtype), device), ragged)
                for i, w, ragged in self.taps]


class Interpolate(_Resample):
    """y = x resampled along each spatial axis by fixed taps: y_o = sum_t w_ot x_(i_ot); dx = the taps' adjoint of gy"""

    name = "interpolate"

    def forward(self, xp: Any, x: Any) -> Any:
        cdt = dt.opmath_dtype(x.dtype)
        y = x.astype(cdt, copy=False)
        for axis, (index, weight, ragged) in enumerate(self._device_taps(xp, x, cdt), start=2):
            y = _along(xp, y, axis, index, weight, ragged)
        return y.astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        return InterpolateGrad(self.taps, self.sizes_in)(gy)


class InterpolateGrad(_Resample):
    """dx = gy scatter-added back through interpolate's taps; its gradient is interpolate again"""

    name = "interpolate_backward"

    def forward(self, xp: Any, g: Any) -> Any:
        cdt = dt.opmath_dtype(g.dtype)
        gx = g.astype(cdt, copy=False)
        taps = self._device_taps(xp, g, cdt)
        for axis in reversed(range(len(taps))):
            index, weight, ragged = taps[axis]
            gx = _along_adjoint(xp, gx, axis + 2, index, weight, ragged, self.sizes_in[axis])
        return gx.astype(g.dtype, copy=False)

    def backward(self, gg: Tensor) -> Tensor:
        return Interpolate(self.taps, self.sizes_in)(gg)


def _per_axis(value: Any, dims: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * dims


def interpolate(input: Tensor, size: "int | Sequence[int] | None" = None,  # noqa: A002 - torch name
                scale_factor: "float | Sequence[float] | None" = None, mode: str = "nearest",
                align_corners: "bool | None" = None, recompute_scale_factor: "bool | None" = None,
                antialias: bool = False) -> Tensor:
    """``torch.nn.functional.interpolate`` of an (N, C, d1[, d2[, d3]]) input; ``antialias=True`` is refused."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    if mode not in _MODES or input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) "
                                  f"for the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                                  f"nearest-exact (got {mode})")
    if mode in _LINEAR_RANK and input.ndim != _LINEAR_RANK[mode]:
        raise NotImplementedError(f"Got {_RANK_NAME[input.ndim]} input, but {mode} mode needs "
                                  f"{_RANK_NAME[_LINEAR_RANK[mode]]} input")
    if mode == "bicubic" and input.ndim != 4:
        raise NotImplementedError(f"Input Error: Only 4D input Tensors supported (got {input.ndim}D) for the "
                                  f"mode bicubic")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not implemented in tinyamp")
    if input.dtype not in dt.FLOATING:
        raise RuntimeError(f"interpolate: expected a floating input, got {dt.dtype_name(input.dtype)} of shape "
                           f"{list(input.shape)}")
    dims, spatial = input.ndim - 2, list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)) and len(size) != dims:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {spatial} and output size of {size}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) "
                             f"format.")
        sizes = _per_axis(size, dims)
        if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in sizes):
            raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, int] or Tuple[int, int, "
                            f"int], but got size with types {[type(s) for s in sizes]}")
        sizes, factors = [int(s) for s in sizes], [None] * dims
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)) and len(scale_factor) != dims:
            raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                             f"input with spatial dimensions of {spatial} and scale_factor of shape "
                             f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                             f"scale_factor in (s1, s2, ...,sK) format.")
        factors = [float(f) for f in _per_axis(scale_factor, dims)]
        sizes = [math.floor(n * f) for n, f in zip(spatial, factors)]
        if recompute_scale_factor or mode == "area":
            factors = [None] * dims
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if any(s <= 0 for s in sizes) or any(n <= 0 for n in spatial):
        raise RuntimeError(f"interpolate: input and output sizes should be greater than 0, but got input "
                           f"{spatial} and output {sizes}")
    taps = [_taps(mode, n, s, f, bool(align_corners)) for n, s, f in zip(spatial, sizes, factors)]
    return Interpolate(taps, tuple(spatial))(input)


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",  # noqa: A002
             align_corners: "bool | None" = None) -> Tensor:
    """``F.upsample``: the deprecated name of ``interpolate``."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:  # noqa: A002
    """``F.upsample_nearest``: ``interpolate(mode="nearest")``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:  # noqa: A002
    """``F.upsample_bilinear``: ``interpolate(mode="bilinear", align_corners=True)``, as PyTorch."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


METHODS: dict = {}  # functions only (torch.nn.functional)
