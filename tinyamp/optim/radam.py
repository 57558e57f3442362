"""RAdam (PyTorch's update): Adam with the variance rectification of Liu et al. (2019).

Per parameter ``w`` with gradient ``g`` at step ``t`` (counted from 1)::

    g = -g if maximize; L2 or decoupled weight decay as Adam/AdamW
    m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)
    rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
    w = w - lr * m / (1 - beta1**t) * sqrt(1 - beta2**t) / (sqrt(v) + eps) * rect    (rho_t > 5)
    w = w - lr * m / (1 - beta1**t)                                                   (otherwise: plain momentum)

Which branch a step takes depends on ``t``, the 0-d float32 device counter
``state["step"]``. PyTorch reads it on the host; here ``rho_t > 5`` is a
device boolean and both branches meet in ``xp.where``, so a skipped step
(which does not advance ``t``) never switches branch and nothing is read on
the host.

There is no fused CUDA kernel for RAdam: on a GPU the same array code runs as
CuPy ufuncs (a few launches per parameter, no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .adam import adam_moments
from .. import dtypes as dt
from .optimizer import Optimizer, check_hyperparameters, masked_write, refuse_differentiable


def _rectification(xp: Any, t: Any, beta2: float) -> tuple:
    """(rho_t > 5, rect) as 0-d float64 device arrays; ``(False, None)`` when no step can be rectified."""
    rho_inf = 2 / (1 - beta2) - 1
    if rho_inf <= 5:  # rho_t < rho_inf: every step takes the momentum branch (small beta2)
        return False, None
    rho_t = rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t)
    rectified = rho_t > 5.0
    # Evaluate the formula at rho_inf where it is not used: below 4 it would take a negative square root.
    rho = xp.where(rectified, rho_t, rho_inf)
    rect = xp.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
    return rectified, rect


def _radam_param(xp: Any, w: Any, g: Any, m: Any, v: Any, step: Any, keep: Any, *, lr: float, beta1: float,
                 beta2: float, eps: float, weight_decay: float, decoupled: bool, maximize: bool) -> None:
    """Update one parameter, its moments and ``step`` in place, masked by ``keep``."""
    w32 = dt.opmath(w)
    compute = w32.dtype
    t = (step + 1).astype(np.float64)
    bias1 = (1 - beta1 ** t).astype(compute)
    bias2_sqrt = xp.sqrt(1 - beta2 ** t).astype(compute)
    rectified, rect = _rectification(xp, t, beta2)
    w32, _, new_m, new_v = adam_moments(w32, g, m, v, lr=lr, beta1=beta1, beta2=beta2,
                                        weight_decay=weight_decay, decoupled=decoupled, maximize=maximize)
    momentum_step = new_m / bias1 * lr
    if rect is None:
        update = momentum_step
    else:
        adaptive = bias2_sqrt / (xp.sqrt(new_v) + eps)
        update = xp.where(rectified, momentum_step * adaptive * rect.astype(compute), momentum_step)
    masked_write(xp, w, w32 - update, keep)
    masked_write(xp, m, new_m, keep)
    masked_write(xp, v, new_v, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class RAdam(Optimizer):
    """RAdam (``torch.optim.RAdam``), with optional float32 master weights.

    ``foreach``, ``capturable`` and ``differentiable`` are PyTorch's flags,
    accepted so constructors port: tinyamp picks its update path itself (one
    vectorised pass per tensor; no fused CUDA kernel), always decides the
    rectification on the device (what ``capturable=True`` asks for), and
    refuses ``differentiable=True`` (its updates are in place, outside autograd).
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, master_weights: bool = False) -> None:
        check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        refuse_differentiable("RAdam", differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        master_weights=master_weights)
        super().__init__(params, defaults)

    def _update_group(self, group: dict, entries: list) -> None:
        beta1, beta2 = group["betas"]
        for p, w, g, keep, master in entries:
            step = self._step_counter(p, w)
            m = self._state_buffer(p, "exp_avg", w)
            v = self._state_buffer(p, "exp_avg_sq", w)
            _radam_param(p.device.xp, w, g, m, v, step, keep, lr=group["lr"], beta1=beta1, beta2=beta2,
                         eps=group["eps"], weight_decay=group["weight_decay"],
                         decoupled=group["decoupled_weight_decay"], maximize=group["maximize"])
