"""GradScaler's hook into the process group: one rank's inf/nan skips the step on every rank.

Averaged gradients are the same on every rank, so each rank's ``found_inf``
normally agrees already; the all-reduce (MAX, on the flag where it lives: a
0-d array on the device, no host read) makes the skip decision agree even when
one rank overflowed in work the others did not share (a loss term computed per
rank, a clipping norm), so the replicas never step apart.
"""

from __future__ import annotations

from ...amp.grad_scaler import FOUND_INF_REDUCERS
from .process_group import ReduceOp, _state


def all_reduce_found_inf(found_per_device: dict) -> None:
    """Replace each device's ``found_inf`` flag by its MAX over the default group (nothing without a group)."""
    group = _state["backend"]
    if group is None:
        return
    for flag in found_per_device.values():
        group.all_reduce(flag, ReduceOp.MAX)()


FOUND_INF_REDUCERS.append(all_reduce_found_inf)
