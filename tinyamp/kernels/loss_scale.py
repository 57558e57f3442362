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
from .cuda import cuda_launch, cuda_scaler
from .cpu import cpu_numba, cpu_path

# Without a min_scale the scale still never drops below the smallest normal
# float32, so it stays positive and 1/scale stays finite.
DEFAULT_MIN_SCALE = float(np.finfo(np.float32).tiny)


def inverse_scale(xp: Any, scale: Any) -> Any:
    """``1 / scale`` as the unscale pass multiplies by it: divided in float64, rounded once to float32."""
    return xp.reciprocal(scale.astype(np.float64)).astype(np.float32)


def unscale_group(xp: Any, grads: list, outs: list, scale: Any, found_inf: Any) -> None:
    """``out = grad * inverse_scale(scale)`` for each pair; ``found_inf = 1`` if any result is inf/nan.

    Checking the *result* also catches a finite scaled gradient that overflows
    when the scale is below 1. ``out`` is the gradient itself, or a float32
    master gradient for a float16 one. bfloat16 in place is computed in float32
    and rounded once.
    """
    if cuda_launch.on_gpu(found_inf):
        # One fused pass; pairs it does not take (float64, non-contiguous) stay for the loop.
        pairs = cuda_scaler.unscale_group(grads, outs, scale, found_inf)
        grads, outs = [g for g, _ in pairs], [o for _, o in pairs]
    if not grads:
        return
    if xp is np:
        # In place (O1's gradients) and out of place (into float32 master gradients) apart: the
        # numba kernels differ, and LLVM vectorizes only the one-array loop.
        in_place = [grad for grad, out in zip(grads, outs) if out is grad]
        if in_place:
            unscale_in_place_on_host(in_place, scale, found_inf)
        if len(in_place) == len(grads):
            return
        grads, outs = zip(*[(grad, out) for grad, out in zip(grads, outs) if out is not grad])
        if (cpu_path.LOADED and cpu_path.BACKEND == "numba") or cpu_path.resolve(None) == "numba":
            # float32 pairs: multiply and check in one numba pass each (the NumPy ufuncs take four).
            inv, rest, kernel = np.float32(1.0 / float(scale)), [], cpu_numba.KERNELS["unscale_f32"]
            for grad, out in zip(grads, outs):
                if grad.shape != out.shape:
                    _refuse_pair(grad, out)
                if (grad.dtype != dt.float32 or out.dtype != dt.float32
                        or not (grad.flags.c_contiguous and out.flags.c_contiguous)):
                    rest.append((grad, out))
                elif kernel(grad, out, inv):
                    found_inf[...] = 1.0
            if not rest:
                return
            grads, outs = [g for g, _ in rest], [o for _, o in rest]
    _unscale_with_ufuncs(xp, grads, outs, inverse_scale(xp, scale), found_inf)


def unscale_in_place_on_host(grads: list, scale: Any, found_inf: Any) -> None:
    """``unscale_group(np, grads, grads, scale, found_inf)``: NumPy gradients unscaled in place.

    The CPU's usual step (O1's gradients, no master copies): each C-contiguous
    float32 gradient in one numba pass (the kernel flattens it), the others
    through the NumPy ufuncs.
    """
    rest = grads
    if (cpu_path.LOADED and cpu_path.BACKEND == "numba") or cpu_path.resolve(None) == "numba":
        inv, rest, kernel = np.float32(1.0 / float(scale)), [], cpu_numba.KERNELS["unscale_f32_inplace"]
        for grad in grads:
            if grad.dtype != dt.float32 or not grad.flags.c_contiguous:
                rest.append(grad)
            elif kernel(grad, inv):
                found_inf[...] = 1.0
    if rest:
        _unscale_with_ufuncs(np, rest, rest, inverse_scale(np, scale), found_inf)


def _refuse_pair(grad: Any, out: Any) -> None:
    raise ValueError(f"unscale: a gradient of shape {list(grad.shape)} cannot be unscaled into an output of "
                     f"shape {list(out.shape)}")


def _unscale_with_ufuncs(xp: Any, grads: Any, outs: Any, inv_scale: Any, found_inf: Any) -> None:
    """The unscale pass in array operations, any dtype and layout (four passes per pair)."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf/nan is what we look for
        for grad, out in zip(grads, outs):
            if grad.shape != out.shape:
                _refuse_pair(grad, out)
            if out.dtype in dt.LOW_PRECISION:
                result = dt.opmath(grad) * inv_scale  # computed in float32, rounded once
                out[...] = result.astype(out.dtype)
            else:
                result = xp.multiply(grad, inv_scale, out=out)
            xp.maximum(found_inf, xp.logical_not(xp.isfinite(result).all()), out=found_inf)


def update_scale(xp: Any, scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                  growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                  min_scale: float | None, max_scale: float | None, record: Any = None) -> "tuple[float, float] | None":
    """The dynamic rule, in place: on a GPU one kernel thread (no host sync), on the CPU a few host reads.

    ``record`` (two float32, optional) receives the scale before and after. On
    the CPU they are also returned as Python floats (read for free there).

    inf/nan found: the growth tracker resets and the hysteresis tracker counts
    down; once it reaches 0 the scale backs off (to no less than ``min_scale``).
    Clean: the growth tracker counts up; at ``growth_interval`` the scale grows
    (to no more than ``max_scale``, never to inf) and both trackers reset.
    With ``hysteresis=1`` this is exactly PyTorch's ``_amp_update_scale_``.
    The arithmetic is the kernel's: the scale times a factor in float64, rounded
    once to float32.
    """
    if cuda_launch.on_gpu(scale):
        cuda_scaler.update_scale(scale, growth_tracker, hysteresis_tracker, found_inf,
                                 growth_factor=growth_factor, backoff_factor=backoff_factor,
                                 growth_interval=growth_interval, hysteresis=hysteresis,
                                 min_scale=min_scale, max_scale=max_scale, floor=DEFAULT_MIN_SCALE, record=record)
        return
    # NumPy arrays: reading them on the host costs nothing, so decide in Python.
    current = after = float(scale)  # a float32 value, exactly
    successful = int(growth_tracker) + 1
    if float(found_inf) > 0:
        hyst_left = max(int(hysteresis_tracker) - 1, 0)
        growth_tracker[...] = 0
        hysteresis_tracker[...] = hyst_left
        if hyst_left <= 0:
            floor = np.float32(DEFAULT_MIN_SCALE if min_scale is None else min_scale)
            backed = max(np.float32(current * backoff_factor), floor)
            scale[...] = backed
            after = float(backed)
    elif successful >= growth_interval:
        grown = current * growth_factor
        if max_scale is not None and max_scale < grown:
            grown = max_scale
        with np.errstate(over="ignore"):  # past float32's range: inf, refused below
            grown32 = np.float32(grown)
        if np.isfinite(grown32):  # never grow to inf
            scale[...] = grown32
            after = float(grown32)
        growth_tracker[...] = 0
        hysteresis_tracker[...] = hysteresis
    else:
        growth_tracker[...] = successful
    if record is not None:
        record[0], record[1] = current, after
    return current, after
