"""The optimizers' group updates on any device: SGD and Adam/AdamW, one call per parameter group.

Each weight of the group takes the fastest path that computes the optimizer's
own rule (``rule``: ``optim.sgd._sgd_param``, ``optim.adam._adam_param``, on
``xp`` arrays) bit for bit:

- on a GPU, one fused launch for all the group's float16/bfloat16/float32
  weights on that device (``cuda/cuda_optim.py``), reading ``found_inf`` and the
  hyper-parameters (:class:`DeviceHyper`) on the device and writing each
  weight's rounded 16-bit copy in the same pass;
- on the CPU, a kept step of a float32 weight in one numba pass (``cpu/cpu_optim.py``);
- otherwise the rule itself, masked by the keep flag.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

from .. import dtypes as dt
from ..backend import array_module
from .cpu import cpu_optim
from .cuda import cuda_launch, cuda_optim

__all__ = ["DeviceHyper", "Group", "adam", "fused_dtypes", "keep_mask", "sgd"]


class Group(NamedTuple):
    """One parameter group's arrays, as an optimizer hands them to an update kernel."""

    weights: list  # updated in place (a float32 master under master weights)
    grads: list
    keeps: list  # per weight: True (kept), False (skipped, read on the host) or a device flag / found_inf
    low_copy: Callable[[int], Any]  # where a fused kernel writes weight i's rounded 16-bit copy (or None)
    hyper: Callable[[Any], Any]  # the group's hyper-parameters on the GPU of the array given (DeviceHyper)


class DeviceHyper:
    """Each parameter group's hyper-parameters as a float64 array on the GPU, uploaded only when one changes.

    The fused kernels read them there rather than as launch arguments, so a
    steady step copies nothing to the device and a captured CUDA graph replays
    with a scheduler's new learning rate (:meth:`on_device` again before the replay).
    """

    def __init__(self) -> None:
        self._mirrors: dict[int, cuda_launch.DeviceValues] = {}  # group key -> its device values

    def on_device(self, key: int, like: Any, values: tuple) -> Any:
        """``values`` of group ``key`` on ``like``'s GPU (uploaded if they changed)."""
        mirror = self._mirrors.get(key)
        if mirror is None:
            mirror = self._mirrors[key] = cuda_launch.DeviceValues()
        return mirror.get(cuda_launch._device(like), values)

    def __contains__(self, key: int) -> bool:
        return key in self._mirrors


def fused_dtypes(arrays: Any) -> bool:
    """Whether every array is on a GPU in a dtype the fused kernels take (a group whose update they make whole)."""
    return all(cuda_launch.on_gpu(a) and a.dtype in cuda_launch.FUSED_DTYPES for a in arrays)


def keep_mask(keep: Any) -> Any:
    """A keep flag as the array rule masks with: found_inf (a fused kernel's flag) becomes ``found == 0``."""
    if keep is True or keep is False or keep.dtype == dt.bool_:
        return keep
    return array_module(keep).equal(keep.reshape(()), 0)


def _by_device(group: Group) -> "tuple[dict[int, list[int]], list[int]]":
    """(GPU id -> indices of the weights the fused kernels take, the other indices), in group order."""
    fused: dict[int, list[int]] = {}
    rest = []
    for i, (w, g) in enumerate(zip(group.weights, group.grads)):
        if cuda_launch.fusable_update(w, g):
            fused.setdefault(cuda_launch._device(w).id, []).append(i)
        else:
            rest.append(i)
    return fused, rest


def _pick(values: "list | None", indices: list) -> "list | None":
    return None if values is None else [values[i] for i in indices]


def _launches(group: Group, fused: dict) -> Iterator[tuple]:
    """Per GPU: (indices, weights, their 16-bit copies' targets, found_inf or None) of one fused launch.

    A skipped step on a device whose flag the host read (keep False) launches nothing.
    """
    for indices in fused.values():
        lows = [group.low_copy(i) for i in indices]
        keep = group.keeps[indices[0]]
        if keep is not False:
            yield indices, _pick(group.weights, indices), lows, None if keep is True else keep


def sgd(group: Group, bufs: "list | None", steps: "list | None", *, rule: Callable, lr: float, momentum: float,
        dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """SGD on one group, in place; ``bufs``/``steps`` (momentum buffers, step counters) None without momentum."""
    hyper = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                 maximize=maximize)
    fused, rest = _by_device(group)
    for i in rest:
        w, g, keep = group.weights[i], group.grads[i], group.keeps[i]
        buf, step = (None, None) if bufs is None else (bufs[i], steps[i])
        if keep is True and cpu_optim.sgd_update(w, g, buf, step, **hyper):
            continue  # one numba pass on the CPU, the same bits
        rule(array_module(w), w, g, buf, step, keep_mask(keep), **hyper)
    for indices, weights, lows, found_inf in _launches(group, fused):  # the update, then the step counters
        cuda_optim.sgd_group(weights, _pick(group.grads, indices), _pick(bufs, indices), _pick(steps, indices),
                             lows, found_inf, group.hyper(weights[0]), nesterov=bool(nesterov),
                             maximize=bool(maximize))


def adam(group: Group, ms: list, vs: list, v_maxs: "list | None", steps: list, *, rule: Callable, lr: float,
         beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool) -> None:
    """Adam/AdamW on one group, in place: moments ``ms``/``vs``, ``v_maxs`` (AMSGrad, else None), step counters."""
    hyper = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, decoupled=decoupled)
    fused, rest = _by_device(group)
    for i in rest:
        w, g, keep = group.weights[i], group.grads[i], group.keeps[i]
        v_max = None if v_maxs is None else v_maxs[i]
        if keep is True and cpu_optim.adam_update(w, g, ms[i], vs[i], v_max, steps[i], **hyper):
            continue  # one numba pass on the CPU, the same bits
        rule(array_module(w), w, g, ms[i], vs[i], v_max, steps[i], keep_mask(keep), **hyper)
    for indices, weights, lows, found_inf in _launches(group, fused):  # step counters and corrections, the update
        cuda_optim.adam_group(weights, _pick(group.grads, indices), _pick(ms, indices), _pick(vs, indices),
                              _pick(v_maxs, indices), _pick(steps, indices), lows, found_inf,
                              group.hyper(weights[0]), decoupled=decoupled)
