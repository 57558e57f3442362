"""RMSprop (PyTorch's update), with momentum, the centered variant and optional float32 master weights.

PyTorch's rule, per parameter ``w`` with gradient ``g``::

    d = -g if maximize else g
    d = d + weight_decay * w                             (if weight_decay)
    square_avg = alpha * square_avg + (1 - alpha) * d * d
    grad_avg = grad_avg + (1 - alpha) * (d - grad_avg)   (centered: a running mean of d)
    avg = sqrt(square_avg - grad_avg**2) + eps           (centered; else sqrt(square_avg) + eps)
    buf = momentum * buf + d / avg;  w = w - lr * buf    (momentum > 0)
    w = w - lr * d / avg                                 (otherwise)

The state holds ``step`` (a 0-d float32 device counter, as PyTorch's;
RMSprop's update does not read it), ``square_avg``, ``momentum_buffer`` (when
momentum > 0) and ``grad_avg`` (when centered). Every write is masked by the
AMP keep flag, so a skipped step changes nothing (see ``optimizer.py``).

There is no fused CUDA kernel for RMSprop: on a GPU the same array code runs
as CuPy ufuncs (a few launches per parameter, no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import dtypes as dt
from .optimizer import Optimizer, check_hyperparameters, decayed_gradient, masked_write, refuse_differentiable


def _rmsprop_param(xp: Any, w: Any, g: Any, square_avg: Any, grad_avg: Any, buf: Any, step: Any, keep: Any, *,
                   lr: float, alpha: float, eps: float, weight_decay: float, momentum: float,
                   maximize: bool) -> None:
    """Update one parameter and its state in place, masked by ``keep`` (``grad_avg``/``buf`` None when unused)."""
    w32 = dt.opmath(w)
    d = decayed_gradient(w32, g, maximize=maximize, weight_decay=weight_decay)
    new_square = alpha * dt.opmath(square_avg) + (1 - alpha) * d * d
    if grad_avg is not None:
        ga = dt.opmath(grad_avg)
        new_grad_avg = ga + (1 - alpha) * (d - ga)  # PyTorch's lerp form
        avg = xp.sqrt(new_square - new_grad_avg * new_grad_avg) + eps
        masked_write(xp, grad_avg, new_grad_avg, keep)
    else:
        avg = xp.sqrt(new_square) + eps
    if buf is not None:
        new_buf = momentum * dt.opmath(buf) + d / avg
        masked_write(xp, w, w32 - lr * new_buf, keep)
        masked_write(xp, buf, new_buf, keep)
    else:
        masked_write(xp, w, w32 - lr * (d / avg), keep)
    masked_write(xp, square_avg, new_square, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class RMSprop(Optimizer):
    """RMSprop (``torch.optim.RMSprop``), with optional float32 master weights.

    ``capturable``, ``foreach`` and ``differentiable`` are PyTorch's flags,
    accepted so constructors port: tinyamp always keeps the step counter on the
    device and never reads it on the host (what ``capturable=True`` asks for),
    picks its update path itself (one vectorised pass per tensor; no fused CUDA
    kernel), and refuses ``differentiable=True`` (its updates are in place,
    outside autograd).
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False, *,
                 master_weights: bool = False) -> None:
        check_hyperparameters(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        refuse_differentiable("RMSprop", differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, maximize=maximize, master_weights=master_weights)
        super().__init__(params, defaults)

    def _update_group(self, group: dict, entries: list) -> None:
        for p, w, g, keep, master in entries:
            step = self._step_counter(p, w)
            square_avg = self._state_buffer(p, "square_avg", w)
            buf = self._state_buffer(p, "momentum_buffer", w) if group["momentum"] > 0 else None
            grad_avg = self._state_buffer(p, "grad_avg", w) if group["centered"] else None
            _rmsprop_param(p.device.xp, w, g, square_avg, grad_avg, buf, step, keep, lr=group["lr"],
                           alpha=group["alpha"], eps=group["eps"], weight_decay=group["weight_decay"],
                           momentum=group["momentum"], maximize=group["maximize"])
