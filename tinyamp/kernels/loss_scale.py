"""The loss-scale math of GradScaler on device arrays: unscale with inf/nan detection, the scale rule.

:func:`unscale_group` and :func:`update_scale` are the per-device math of
``GradScaler.unscale_`` and ``GradScaler.update``: written on ``xp`` arrays
(NumPy on the CPU, CuPy on a GPU) without a branch on the data, so they never
wait for the device. On CuPy arrays each hands over to its fused kernel in
``cuda_scaler.py`` (one launch per dtype pair of a gradient group; one thread
for the scale rule), which computes the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from . import cuda_launch, cuda_scaler

# Without a min_scale the scale still never drops below the smallest normal
# float32, so it stays positive and 1/scale stays finite.
DEFAULT_MIN_SCALE = float(np.finfo(np.float32).tiny)


def unscale_group(xp: Any, grads: list, outs: list, inv_scale: Any, found_inf: Any) -> None:
    """``out = grad * inv_scale`` for each pair; ``found_inf = 1`` if any result is inf/nan.

    Checking the *result* also catches a finite scaled gradient that overflows
    when the scale is below 1. ``out`` is the gradient itself, or a float32
    master gradient for a float16 one. bfloat16 in place is computed in float32
    and rounded once.
    """
    if cuda_launch.on_gpu(found_inf):
        # One fused pass; pairs it does not take (float64, non-contiguous) stay for the loop.
        pairs = cuda_scaler.unscale_group(grads, outs, inv_scale, found_inf)
        grads, outs = [g for g, _ in pairs], [o for _, o in pairs]
    for grad, out in zip(grads, outs):
        if out.dtype in dt.LOW_PRECISION:
            result = dt.opmath(grad) * inv_scale  # computed in float32, rounded once
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
    if cuda_launch.on_gpu(scale):
        cuda_scaler.update_scale(scale, growth_tracker, hysteresis_tracker, found_inf,
                                 growth_factor=growth_factor, backoff_factor=backoff_factor,
                                 growth_interval=growth_interval, hysteresis=hysteresis,
                                 min_scale=min_scale, max_scale=max_scale, floor=DEFAULT_MIN_SCALE)
        return
    found = found_inf > 0
    current = scale.astype(np.float64)
    hyst_left = xp.maximum(hysteresis_tracker - 1, 0)
    backoff = xp.logical_and(found, hyst_left <= 0)
    backed = xp.maximum((current * backoff_factor).astype(np.float32),
                        np.float32(DEFAULT_MIN_SCALE if min_scale is None else min_scale))
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
