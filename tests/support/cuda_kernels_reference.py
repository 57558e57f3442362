"""The fused CUDA kernels of tinyamp/kernels/cuda/cuda_scaler.py and cuda_optim.py, transcribed to NumPy.

Same float32 arithmetic in the same order, same branches, on NumPy arrays:
what each kernel computes, readable without CUDA. The tests hold these and
the kernels (run on the CPU through the CUDA stand-in, and on a GPU)
against the scaler's and the optimizers' NumPy paths, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_f32 = np.float32


def unscale_reference(grads: list, outs: list, scale: Any, found_inf: Any) -> None:
    """What ``unscale_group``'s kernel does, on NumPy arrays."""
    s = _f32(1.0 / np.float64(scale))
    for g, o in zip(grads, outs):
        v = g.astype(np.float32) * s
        if not np.isfinite(v).all():
            found_inf[...] = 1.0
        o[...] = v.astype(o.dtype)


def update_scale_reference(scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                           growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                           min_scale: "float | None", max_scale: "float | None", floor: float) -> None:
    """``UPDATE_SCALE``'s one thread, on 0-d NumPy arrays."""
    current = _f32(scale)
    hyst_left = max(int(hysteresis_tracker) - 1, 0)
    successful = int(growth_tracker) + 1
    if _f32(found_inf) > 0:
        growth_tracker[...], hysteresis_tracker[...] = 0, hyst_left
        if hyst_left <= 0:
            backed = _f32(np.float64(current) * backoff_factor)
            scale[...] = max(backed, _f32(floor if min_scale is None else min_scale))
    elif successful >= growth_interval:
        grown = np.float64(current) * growth_factor
        if max_scale is not None and max_scale < grown:
            grown = np.float64(max_scale)
        with np.errstate(over="ignore"):
            grown32 = _f32(grown)
        if np.isfinite(grown32):
            scale[...] = grown32
        growth_tracker[...], hysteresis_tracker[...] = 0, hysteresis
    else:
        growth_tracker[...] = successful


def sgd_reference(w: Any, g: Any, buf: Any, step: Any, keep: Any, *, low: Any = None, lr: float,
                  momentum: float, dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """``SGD_GROUP``'s loop body for one tensor and ``ADVANCE_STEPS``, on NumPy arrays."""
    if not bool(keep):
        return
    w32, d = w.astype(np.float32), g.astype(np.float32)
    if maximize:
        d = -d
    if weight_decay != 0:
        d = d + _f32(weight_decay) * w32
    if momentum != 0:
        b = _f32(momentum) * buf.astype(np.float32) + _f32(1 - dampening) * d if step > 0 else d
        d = d + _f32(momentum) * b if nesterov else b
        buf[...] = b
    w_new = w32 - _f32(lr) * d
    w[...] = w_new
    if low is not None:
        low[...] = w_new
    if momentum != 0:
        step[...] = step + _f32(1)


def adam_reference(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, low: Any = None,
                   lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                   decoupled: bool) -> None:
    """``ADAM_PREPARE_GROUP`` and ``ADAM_GROUP``'s loop body for one tensor, on NumPy arrays."""
    t = np.float64(step + _f32(1))
    step_size = _f32(lr / (1.0 - np.power(beta1, t)))
    bias2_sqrt = _f32(np.sqrt(1.0 - np.power(beta2, t)))
    if not bool(keep):
        return
    step[...] = step + _f32(1)
    w32, g32 = w.astype(np.float32), g.astype(np.float32)
    if weight_decay != 0:
        if decoupled:
            w32 = w32 * _f32(1 - lr * weight_decay)
        else:
            g32 = g32 + _f32(weight_decay) * w32
    m32 = m.astype(np.float32)
    m_new = m32 + _f32(1 - beta1) * (g32 - m32)
    v_new = _f32(beta2) * v.astype(np.float32) + _f32(1 - beta2) * (g32 * g32)
    second = v_new
    if v_max is not None:
        vm = v_max.astype(np.float32)
        second = np.where((vm >= v_new) | np.isnan(vm), vm, v_new)
        v_max[...] = second
    denom = np.sqrt(second) / bias2_sqrt + _f32(eps)
    w_new = w32 - step_size * (m_new / denom)
    w[...], m[...], v[...] = w_new, m_new, v_new
    if low is not None:
        low[...] = w_new
