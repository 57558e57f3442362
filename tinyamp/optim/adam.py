"""Adam and AdamW (PyTorch's updates), with AMSGrad and optional float32 master weights.

Per parameter ``w`` with gradient ``g`` and step ``t`` (counted from 1)::

    g = g + weight_decay * w                (Adam: L2 penalty in the gradient)
    w = w * (1 - lr * weight_decay)         (AdamW: decoupled decay)
    m = m + (1 - beta1) * (g - m)           (PyTorch's lerp form of beta1*m + (1-beta1)*g)
    v = beta2 * v + (1 - beta2) * g * g
    v_max = max(v_max, v)                   (amsgrad; the denominator uses v_max)
    w = w - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

The step counter ``t`` is a 0-d float32 device array (as PyTorch's), advanced
by the keep mask, so a skipped AMP step leaves it unchanged and the bias
corrections are computed on the device (in float64, then rounded to the
arithmetic dtype), without reading it on the host.

On a GPU, the float16/bfloat16/float32 parameters of a group are updated by
fused kernels (``tinyamp/kernels/cuda/cuda_optim.py``: one launch for the step
counters and bias corrections of the whole group, one for the update, the
same math), which also write each weight's rounded low-precision copy (O2
parameters, autocast's cached copies); float64 ones take the array path below.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .. import dtypes as dt
from ..kernels import updates
from .fused import FusedUpdates
from .optimizer import check_hyperparameters, decayed_gradient, masked_write


def adam_moments(w32: Any, g: Any, m: Any, v: Any, *, lr: float, beta1: float, beta2: float,
                 weight_decay: float, decoupled: bool, maximize: bool = False) -> tuple:
    """The Adam family's shared start: (decayed weights, gradient, new m, new v), nothing written yet.

    Shared by Adam/AdamW, NAdam and RAdam (their weight decay and moments are one rule).
    """
    g32 = decayed_gradient(w32, g, maximize=maximize, weight_decay=0 if decoupled else weight_decay)
    if decoupled and weight_decay != 0:
        w32 = w32 * (1 - lr * weight_decay)
    m32 = dt.opmath(m)
    new_m = m32 + (1 - beta1) * (g32 - m32)
    new_v = beta2 * dt.opmath(v) + (1 - beta2) * (g32 * g32)
    return w32, g32, new_m, new_v


def _adam_param(xp: Any, w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, lr: float,
                beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool) -> None:
    """Update one parameter and its moments in place, masked by ``keep`` (``v_max`` None without amsgrad)."""
    w32 = dt.opmath(w)
    compute = w32.dtype
    t = (step + 1).astype(np.float64)
    step_size = (lr / (1 - beta1 ** t)).astype(compute)
    bias2_sqrt = xp.sqrt(1 - beta2 ** t).astype(compute)
    w32, _, new_m, new_v = adam_moments(w32, g, m, v, lr=lr, beta1=beta1, beta2=beta2,
                                        weight_decay=weight_decay, decoupled=decoupled)
    second = new_v
    if v_max is not None:
        second = xp.maximum(dt.opmath(v_max), new_v)
        masked_write(xp, v_max, second, keep)
    denom = xp.sqrt(second) / bias2_sqrt + eps
    masked_write(xp, w, w32 - step_size * (new_m / denom), keep)
    masked_write(xp, m, new_m, keep)
    masked_write(xp, v, new_v, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class Adam(FusedUpdates):
    """Adam (``torch.optim.Adam``): L2 weight decay added to the gradient."""

    _step_supports_amp_scaling = True
    _decoupled = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 master_weights: bool = False, foreach: bool | None = None, fused: bool | None = None) -> None:
        # foreach/fused are accepted so PyTorch constructors port: tinyamp picks its
        # update path itself (fused kernels on a GPU, one vectorised pass per tensor on NumPy).
        check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        master_weights=master_weights)
        super().__init__(params, defaults)

    _device_hyper_keys = ("lr", "betas", "eps", "weight_decay")

    def _device_hyper_values(self, group: dict) -> tuple:
        """What the fused kernels read from device memory: (lr, beta1, beta2, eps, weight_decay)."""
        beta1, beta2 = group["betas"]
        return (float(group["lr"]), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]))

    def _update_group(self, group: dict, entries: list) -> None:
        beta1, beta2 = group["betas"]
        ms, vs, v_maxs, steps = zip(*[self._moments(p, w, group["amsgrad"]) for p, w, _, _, _ in entries])
        updates.adam(self._kernel_group(group, entries), list(ms), list(vs),
                     list(v_maxs) if group["amsgrad"] else None, list(steps), rule=_adam_param, lr=group["lr"],
                     beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                     decoupled=self._decoupled)

    def _moments(self, p: Any, w: Any, amsgrad: bool) -> tuple:
        """(exp_avg, exp_avg_sq, max_exp_avg_sq or None, step) of ``p``, made on first use."""
        return (self._state_buffer(p, "exp_avg", w), self._state_buffer(p, "exp_avg_sq", w),
                self._state_buffer(p, "max_exp_avg_sq", w) if amsgrad else None, self._step_counter(p, w))


class AdamW(Adam):
    """AdamW (``torch.optim.AdamW``): decoupled weight decay, default 1e-2."""

    _decoupled = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 master_weights: bool = False, foreach: bool | None = None, fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, master_weights=master_weights)
