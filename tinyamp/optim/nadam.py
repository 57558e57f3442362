"""NAdam (PyTorch's update): Adam with Nesterov momentum and a momentum-decay schedule.

Per parameter ``w`` with gradient ``g`` at step ``t`` (counted from 1)::

    g = -g if maximize; L2 or decoupled weight decay as Adam/AdamW
    mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))      (and mu_{t+1} alike)
    mu_product = mu_product * mu_t                                  (a float32 scalar, as PyTorch's)
    m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
    denom = sqrt(v / (1 - beta2 ** t)) + eps
    w = w - lr (1 - mu_t) / (1 - mu_product) * g / denom
          - lr mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / denom

``step`` and ``mu_product`` are 0-d float32 device arrays (PyTorch's state
names and dtype). Both are advanced under the AMP keep mask and every scalar
above is computed from them on the device (float64, rounded to the
arithmetic dtype), so a skipped step advances neither and nothing is read on
the host.

There is no fused CUDA kernel for NAdam: on a GPU the same array code runs as
CuPy ufuncs (a few launches per parameter, no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .adam import adam_moments
from .. import dtypes as dt
from .optimizer import Optimizer, check_hyperparameters, masked_write, refuse_differentiable


def _momentum_coefficient(t: Any, beta1: float, momentum_decay: float) -> Any:
    """mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay)) for a float64 device step ``t``."""
    return beta1 * (1.0 - 0.5 * 0.96 ** (t * momentum_decay))


def _nadam_param(xp: Any, w: Any, g: Any, m: Any, v: Any, mu_product: Any, step: Any, keep: Any, *, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, momentum_decay: float,
                 decoupled: bool, maximize: bool) -> None:
    """Update one parameter, its moments, ``mu_product`` and ``step`` in place, masked by ``keep``."""
    w32 = dt.opmath(w)
    compute = w32.dtype
    t = (step + 1).astype(np.float64)
    mu = _momentum_coefficient(t, beta1, momentum_decay)
    mu_next = _momentum_coefficient(t + 1, beta1, momentum_decay)
    # PyTorch multiplies its float32 mu_product by mu rounded to float32.
    new_mu_product = mu_product * mu.astype(np.float32)
    product = new_mu_product.astype(np.float64)
    grad_coef = (-lr * (1.0 - mu) / (1.0 - product)).astype(compute)
    avg_coef = (-lr * mu_next / (1.0 - product * mu_next)).astype(compute)
    bias2 = (1 - beta2 ** t).astype(compute)
    w32, g32, new_m, new_v = adam_moments(w32, g, m, v, lr=lr, beta1=beta1, beta2=beta2,
                                          weight_decay=weight_decay, decoupled=decoupled, maximize=maximize)
    denom = xp.sqrt(new_v / bias2) + eps
    masked_write(xp, w, w32 + grad_coef * (g32 / denom) + avg_coef * (new_m / denom), keep)
    masked_write(xp, m, new_m, keep)
    masked_write(xp, v, new_v, keep)
    masked_write(xp, mu_product, new_mu_product, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class NAdam(Optimizer):
    """NAdam (``torch.optim.NAdam``), with optional float32 master weights.

    ``foreach``, ``capturable`` and ``differentiable`` are PyTorch's flags,
    accepted so constructors port: tinyamp picks its update path itself (one
    vectorised pass per tensor; no fused CUDA kernel), always keeps ``step``
    and ``mu_product`` on the device (what ``capturable=True`` asks for), and
    refuses ``differentiable=True`` (its updates are in place, outside autograd).
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False, master_weights: bool = False) -> None:
        check_hyperparameters(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay, momentum_decay=momentum_decay)
        refuse_differentiable("NAdam", differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                        maximize=maximize, master_weights=master_weights)
        super().__init__(params, defaults)

    def _update_group(self, group: dict, entries: list) -> None:
        beta1, beta2 = group["betas"]
        for p, w, g, keep, master in entries:
            step = self._step_counter(p, w)
            mu_product = self._mu_product(p, step)
            m = self._state_buffer(p, "exp_avg", w)
            v = self._state_buffer(p, "exp_avg_sq", w)
            _nadam_param(p.device.xp, w, g, m, v, mu_product, step, keep, lr=group["lr"], beta1=beta1,
                         beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                         momentum_decay=group["momentum_decay"], decoupled=group["decoupled_weight_decay"],
                         maximize=group["maximize"])

    def _mu_product(self, p: Any, step: Any) -> Any:
        """``state[p]["mu_product"]``: a 0-d float32 device array starting at 1 (made like the step counter)."""
        return self._state_buffer(p, "mu_product", step, fill=1.0)
