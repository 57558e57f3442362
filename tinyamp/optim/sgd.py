"""SGD with momentum, dampening, weight decay, Nesterov and maximize (PyTorch's update).

PyTorch's rule, per parameter ``w`` with gradient ``g``::

    d = -g if maximize else g
    d = d + weight_decay * w                        (if weight_decay)
    buf = d                      on the first step  (if momentum)
    buf = momentum * buf + (1 - dampening) * d      afterwards
    d = d + momentum * buf if nesterov else buf
    w = w - lr * d

"The first step" is decided on the device: the state keeps a step counter next
to the momentum buffer, so a skipped first step (AMP, masked) leaves the buffer
uninitialised instead of seeding it with an inf gradient.

On a GPU, the float16/bfloat16/float32 parameters of a group are updated by
one fused kernel launch (``tinyamp/kernels/cuda/cuda_optim.py``, the same math; one
more launch advances the step counters), which also writes each weight's
rounded low-precision copy (O2 parameters, autocast's cached copies); float64
ones take the array path below.
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import dtypes as dt
from ..kernels import updates
from .fused import FusedUpdates
from .optimizer import masked_write


def _sgd_param(xp: Any, w: Any, g: Any, buf: Any, step: Any, keep: Any, *, lr: float, momentum: float,
               dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """Update one parameter in place (masked by ``keep``); ``buf``/``step`` None without momentum."""
    w32, d = dt.opmath(w), dt.opmath(g)
    if maximize:
        d = -d
    if weight_decay != 0:
        d = d + weight_decay * w32
    if momentum != 0:
        started = step > 0
        new_buf = xp.where(started, momentum * dt.opmath(buf) + (1 - dampening) * d, d)
        d = d + momentum * new_buf if nesterov else new_buf
        masked_write(xp, buf, new_buf, keep)
        xp.add(step, keep, out=step, casting="unsafe")
    if keep is True and w32 is w:
        # The common float32 step without AMP: update in place, no temporary for w - lr d.
        xp.subtract(w, lr * d, out=w)
    else:
        masked_write(xp, w, w32 - lr * d, keep)


class SGD(FusedUpdates):
    """Stochastic gradient descent (``torch.optim.SGD``), with optional float32 master weights."""

    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 master_weights: bool = False, foreach: bool | None = None, fused: bool | None = None) -> None:
        # foreach/fused are accepted so PyTorch constructors port; tinyamp picks the update path.
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, master_weights=master_weights)
        super().__init__(params, defaults)

    _device_hyper_keys = ("lr", "momentum", "dampening", "weight_decay")

    def _device_hyper_values(self, group: dict) -> tuple:
        """What the fused kernel reads from device memory: (lr, momentum, dampening, weight_decay)."""
        return (float(group["lr"]), float(group["momentum"]), float(group["dampening"]), float(group["weight_decay"]))

    def _graph_frozen(self, group: dict) -> tuple:
        """With or without a momentum buffer: a different kernel variant, fixed in a captured graph."""
        return (group["momentum"] != 0,)

    def _update_group(self, group: dict, entries: list) -> None:
        bufs = steps = None
        if group["momentum"] != 0:
            bufs = [self._state_buffer(p, "momentum_buffer", w) for p, w, _, _, _ in entries]
            steps = [self._step_counter(p, w) for p, w, _, _, _ in entries]
        updates.sgd(self._kernel_group(group, entries), bufs, steps, rule=_sgd_param, lr=group["lr"],
                    momentum=group["momentum"], dampening=group["dampening"], weight_decay=group["weight_decay"],
                    nesterov=group["nesterov"], maximize=group["maximize"])
