"""The device-side pieces of GradScaler: its two kernels and the lazy record of the last step.

``unscale_group`` and ``update_scale`` are the per-device math of
``GradScaler.unscale_`` and ``GradScaler.update``: written on ``xp`` arrays
(NumPy on the CPU, CuPy on a GPU) without a branch on the data, so they never
wait for the device. On CuPy arrays each hands over to its fused kernel in
``tinyamp/cuda_kernels.py`` (one launch per dtype pair of a gradient group;
one thread for the scale rule), which computes the same values. ``ScalerStep`` keeps the last update's values on the device until a
property is read; ``read_host`` is the one place a value crosses to the host and
is counted (``ta.cuda.sync_count()``), on the CPU too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend, cuda_kernels
from .. import dtypes as dt
from ..tensor import Tensor

# Without a min_scale the scale still never drops below the smallest normal
# float32, so it stays positive and 1/scale stays finite.
FLOOR = float(np.finfo(np.float32).tiny)


def read_host(array: Any) -> float:
    """Read a device value on the host: one host synchronisation, counted on the CPU too."""
    if not backend.is_cupy_array(array):
        backend.cuda.note_sync()
    return backend.to_host(array).reshape(()).item()  # to_host counts the GPU case


def unscale_group(xp: Any, grads: list, outs: list, inv_scale: Any, found_inf: Any) -> None:
    """``out = grad * inv_scale`` for each pair; ``found_inf = 1`` if any result is inf/nan.

    Checking the *result* also catches a finite scaled gradient that overflows
    when the scale is below 1. ``out`` is the gradient itself, or a float32
    master gradient for a float16 one. bfloat16 in place is computed in float32
    and rounded once.
    """
    if cuda_kernels.on_gpu(found_inf):
        # One fused pass; pairs it does not take (float64, non-contiguous) stay for the loop.
        pairs = cuda_kernels.unscale_group(grads, outs, inv_scale, found_inf)
        grads, outs = [g for g, _ in pairs], [o for _, o in pairs]
    for grad, out in zip(grads, outs):
        if out.dtype in dt.LOW_PRECISION:
            result = grad.astype(np.float32) * inv_scale
            out[...] = result.astype(out.dtype)
        else:
            result = xp.multiply(grad, inv_scale, out=out)
        xp.maximum(found_inf, xp.logical_not(xp.isfinite(result).all()), out=found_inf)


def update_scale(xp: Any, scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                  growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                  min_scale: float | None, max_scale: float | None) -> None:
    """The dynamic rule, in place on the device, without a branch on the data.

    inf/nan found: the growth tracker resets and the hysteresis tracker counts
    down; once it reaches 0 the scale backs off (to no less than ``min_scale``).
    Clean: the growth tracker counts up; at ``growth_interval`` the scale grows
    (to no more than ``max_scale``, never to inf) and both trackers reset.
    With ``hysteresis=1`` this is exactly PyTorch's ``_amp_update_scale_``.
    """
    if cuda_kernels.on_gpu(scale):
        cuda_kernels.update_scale(scale, growth_tracker, hysteresis_tracker, found_inf,
                                  growth_factor=growth_factor, backoff_factor=backoff_factor,
                                  growth_interval=growth_interval, hysteresis=hysteresis,
                                  min_scale=min_scale, max_scale=max_scale, floor=FLOOR)
        return
    found = found_inf > 0
    current = scale.astype(np.float64)
    hyst_left = xp.maximum(hysteresis_tracker - 1, 0)
    backoff = xp.logical_and(found, hyst_left <= 0)
    backed = xp.maximum((current * backoff_factor).astype(np.float32),
                        np.float32(FLOOR if min_scale is None else min_scale))
    successful = growth_tracker + 1
    grow = xp.logical_and(xp.logical_not(found), successful >= growth_interval)
    grown = current * growth_factor
    if max_scale is not None:
        grown = xp.minimum(grown, max_scale)
    grown = grown.astype(np.float32)
    grown = xp.where(xp.isfinite(grown), grown, scale)
    zero = xp.zeros((), dtype=np.int32)
    full_budget = xp.full((), hysteresis, dtype=np.int32)
    new_scale = xp.where(backoff, backed, xp.where(grow, grown, scale))
    new_growth = xp.where(xp.logical_or(found, grow), zero, successful)
    new_hyst = xp.where(found, hyst_left, xp.where(grow, full_budget, hysteresis_tracker))
    scale[...] = new_scale
    growth_tracker[...] = new_growth
    hysteresis_tracker[...] = new_hyst


class ScalerStep:
    """What the last ``update()`` saw. Values stay on the device until a property is read.

    ``skipped`` is true when some optimizer stepped since the previous update
    found inf/nan and skipped its step; ``scale_before``/``scale_after`` are the
    scale used for this iteration and the one for the next. Each property read
    is a host synchronisation.
    """

    __slots__ = ("_found_inf", "_before", "_after")

    def __init__(self, found_inf: Any, before: Any, after: Any) -> None:
        self._found_inf, self._before, self._after = found_inf, before, after

    @property
    def found_inf(self) -> "Tensor | None":
        return None if self._found_inf is None else Tensor._wrap(self._found_inf)

    @property
    def skipped(self) -> bool:
        return self._found_inf is not None and read_host(self._found_inf) > 0

    @property
    def applied(self) -> bool:
        return not self.skipped

    @property
    def scale_before(self) -> float:
        return 1.0 if self._before is None else read_host(self._before)

    @property
    def scale_after(self) -> float:
        return 1.0 if self._after is None else read_host(self._after)

    def __repr__(self) -> str:
        return (f"ScalerStep(skipped={self.skipped}, scale_before={self.scale_before}, "
                f"scale_after={self.scale_after})")
