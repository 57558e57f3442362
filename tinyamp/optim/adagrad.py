"""Adagrad (PyTorch's update), with a learning-rate decay and optional float32 master weights.

PyTorch's rule, per parameter ``w`` with gradient ``g`` at step ``t`` (counted from 1)::

    d = -g if maximize else g
    d = d + weight_decay * w                  (if weight_decay)
    clr = lr / (1 + (t - 1) * lr_decay)
    sum = sum + d * d                         (sum starts at initial_accumulator_value)
    w = w - clr * d / (sqrt(sum) + eps)

As in PyTorch the state (``step``, ``sum``) is created when the optimizer is
built, so ``state_dict()`` has it before the first step. ``t`` comes from the
0-d float32 device counter ``state["step"]``, advanced by the AMP keep flag,
and ``clr`` is computed on the device (float64, then rounded to the arithmetic
dtype): no host read, and a skipped step changes nothing.

There is no fused CUDA kernel for Adagrad: on a GPU the same array code runs
as CuPy ufuncs (a few launches per parameter, no host synchronisation).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .. import dtypes as dt
from .optimizer import Optimizer, check_hyperparameters, decayed_gradient, masked_write, refuse_differentiable


def _adagrad_param(xp: Any, w: Any, g: Any, total: Any, step: Any, keep: Any, *, lr: float, lr_decay: float,
                   weight_decay: float, eps: float, maximize: bool) -> None:
    """Update one parameter and its accumulated squares in place, masked by ``keep``."""
    w32 = dt.opmath(w)
    d = decayed_gradient(w32, g, maximize=maximize, weight_decay=weight_decay)
    clr: Any = lr
    if lr_decay != 0:
        # t - 1 is the counter before this step.
        clr = (lr / (1 + step.astype(np.float64) * lr_decay)).astype(w32.dtype)
    new_total = dt.opmath(total) + d * d
    masked_write(xp, w, w32 - clr * (d / (xp.sqrt(new_total) + eps)), keep)
    masked_write(xp, total, new_total, keep)
    xp.add(step, keep, out=step, casting="unsafe")


class Adagrad(Optimizer):
    """Adagrad (``torch.optim.Adagrad``), with optional float32 master weights.

    ``foreach``, ``fused`` and ``differentiable`` are PyTorch's flags, accepted
    so constructors port: tinyamp picks its update path itself (one vectorised
    pass per tensor; no fused CUDA kernel, and every tinyamp optimizer takes
    GradScaler's ``found_inf`` on the device, which is what PyTorch's
    ``fused=True`` adds), and refuses ``differentiable=True`` (its updates are
    in place, outside autograd).
    """

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None,
                 master_weights: bool = False) -> None:
        check_hyperparameters(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                              initial_accumulator_value=initial_accumulator_value, eps=eps)
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        refuse_differentiable("Adagrad", differentiable)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, maximize=maximize,
                        master_weights=master_weights)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                master = self._master(p, group)
                self._init_state(p, p.array if master is None else master.array, group)

    def _init_state(self, p: Any, like: Any, group: dict) -> tuple:
        """``state[p]``'s ``step`` and ``sum`` arrays, created on first use in ``like``'s dtype (the master's under O2)."""
        return (self._step_counter(p, like),
                self._state_buffer(p, "sum", like, fill=group["initial_accumulator_value"]))

    def _update_group(self, group: dict, entries: list) -> None:
        for p, w, g, keep, master in entries:
            step, total = self._init_state(p, w, group)
            _adagrad_param(p.device.xp, w, g, total, step, keep, lr=group["lr"], lr_decay=group["lr_decay"],
                           weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])
