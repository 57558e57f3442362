"""Adadelta (PyTorch's update), with optional float32 master weights.

PyTorch's rule, per parameter ``w`` with gradient ``g``::

    d = -g if maximize else g
    d = d + weight_decay * w                              (if weight_decay)
    square_avg = rho * square_avg + (1 - rho) * d * d
    delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * d
    acc_delta = rho * acc_delta + (1 - rho) * delta * delta
    w = w - lr * delta

The state holds ``step`` (a 0-d float32 device counter, as PyTorch's; the
update does not read it), ``square_avg`` and ``acc_delta``, every write masked
by the AMP keep flag (see ``optimizer.py``).

There is no fused CUDA kernel for Adadelta: on a GPU the same array code runs
as CuPy ufuncs (a few launches per parameter, no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import dtypes as dt
from .optimizer import Optimizer, check_hyperparameters, decayed_gradient, masked_write, refuse_differentiable


def _adadelta_param(xp: Any, w: Any, g: Any, square_avg: Any, acc_delta: Any, step: Any, keep: Any, *,
                    lr: float, rho: float, eps: float, weight_decay: float, maximize: bool) -> None:
    """Update one parameter and its two running averages in place, masked by ``keep``."""
    w32 = dt.opmath(w)
    d = decayed_gradient(w32, g, maximize=maximize, weight_decay=weight_decay)
    new_square = rho * dt.opmath(square_avg) + (1 - rho) * d * d
    acc = dt.opmath(acc_delta)
    delta = xp.sqrt(acc + eps) / xp.sqrt(new_square + eps) * d
    masked_write(xp, w, w32 - lr * delta, keep)
    masked_write(xp, square_avg, new_square, keep)
    masked_write(xp, acc_delta, rho * acc + (1 - rho) * delta * delta, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class Adadelta(Optimizer):
    """Adadelta (``torch.optim.Adadelta``), with optional float32 master weights.

    ``foreach``, ``capturable`` and ``differentiable`` are PyTorch's flags,
    accepted so constructors port: tinyamp picks its update path itself (one
    vectorised pass per tensor; no fused CUDA kernel), always keeps the step
    counter on the device (what ``capturable=True`` asks for), and refuses
    ``differentiable=True`` (its updates are in place, outside autograd).
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: bool | None = None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False, master_weights: bool = False) -> None:
        check_hyperparameters(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        refuse_differentiable("Adadelta", differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        master_weights=master_weights)
        super().__init__(params, defaults)

    def _update_group(self, group: dict, entries: list) -> None:
        for p, w, g, keep, master in entries:
            step = self._step_counter(p, w)
            square_avg = self._state_buffer(p, "square_avg", w)
            acc_delta = self._state_buffer(p, "acc_delta", w)
            _adadelta_param(p.device.xp, w, g, square_avg, acc_delta, step, keep, lr=group["lr"],
                            rho=group["rho"], eps=group["eps"], weight_decay=group["weight_decay"],
                            maximize=group["maximize"])
