"""What SGD and Adam keep for their fused group updates (``kernels/updates.py``), beside the Optimizer base.

On a GPU a fused kernel updates a whole parameter group in one launch and, in
the same pass, writes each weight's rounded 16-bit copy: the O2 parameter of a
float32 master (the base's write-back is then skipped), or the autocast
weight-cast cache's copy of a float32 weight, re-stamped with the version the
update gives the weight, so the next region's Cast node converts nothing. The
kernels read the group's hyper-parameters from a small device array rewritten
only when a value changes (``kernels.updates.DeviceHyper``), so a captured CUDA
graph may replay with a scheduler's new learning rate: ``_graph_device_keys``
and ``_refresh_device_hyper`` are what ``cuda/graphed_step.py`` asks.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..amp.casting import low_copy_to_refresh, restamp_low_copy
from ..kernels import updates
from ..tensor import Tensor
from .optimizer import Optimizer


class FusedUpdates(Optimizer):
    """An optimizer whose group update is one ``kernels.updates`` call (SGD, Adam, AdamW)."""

    # The fused kernels read found_inf themselves: on a GPU the keep flag is found_inf (see Optimizer._keep_flag).
    _kernels_read_found_inf = True
    # The group keys a fused kernel reads from the group's device mirror, and the tuple it mirrors there.
    _device_hyper_keys: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], defaults: dict) -> None:
        self._device_hyper = updates.DeviceHyper()
        self._rounded_by_kernel: set = set()  # O2 parameters whose rounded value a fused kernel wrote this step
        self._refreshed_low_copies: dict = {}  # float32 parameter -> dtype of the cached copy a kernel rewrote
        super().__init__(params, defaults)

    def _device_hyper_values(self, group: dict) -> tuple:
        raise NotImplementedError(f"{type(self).__name__} keeps no hyper-parameters on the device")

    def _kernel_group(self, group: dict, entries: list) -> updates.Group:
        """The group's arrays as the update kernels take them (the entries of ``Optimizer._prepare``)."""
        return updates.Group(
            [w for _, w, _, _, _ in entries], [g for _, _, g, _, _ in entries], [k for _, _, _, k, _ in entries],
            lambda i: self._low_copy(entries[i][0], entries[i][4]),
            lambda like: self._device_hyper.on_device(id(group), like, self._device_hyper_values(group)))

    def _low_copy(self, p: Tensor, master: "Tensor | None") -> Any:
        """Where a fused kernel writes ``p``'s rounded new value: the O2 parameter, the
        weight-cast cache's current copy of a float32 parameter, or nowhere (None)."""
        if master is not None:
            self._rounded_by_kernel.add(p)
            return p.array
        refresh = low_copy_to_refresh(p)
        if refresh is None:
            return None
        self._refreshed_low_copies[p] = refresh[0]
        return refresh[1]

    def _write_back(self, p: Tensor, master: Tensor) -> None:
        if p in self._rounded_by_kernel:  # the fused kernel wrote the rounded weights itself (a kept step only)
            self._rounded_by_kernel.discard(p)
        else:
            super()._write_back(p, master)

    def _finish(self, p: Tensor, master: "Tensor | None") -> None:
        super()._finish(p, master)
        if self._refreshed_low_copies:
            low = self._refreshed_low_copies.pop(p, None)
            if low is not None:  # the kernel wrote round(new weight) into the cached copy
                restamp_low_copy(p, low)

    # ------------------------------------------------- CUDA graphs (tinyamp/cuda/graphed_step.py)
    def _graph_device_keys(self, group: dict) -> tuple[str, ...]:
        """The keys of ``group`` a captured step reads from device memory, so they may change between replays.

        Only when every parameter of the group takes the fused GPU kernels
        (float16/bfloat16/float32 on CUDA): the array path passes them to CuPy
        as Python numbers, which a graph freezes.
        """
        if id(group) not in self._device_hyper or not updates.fused_dtypes([p.array for p in group["params"]]):
            return ()
        return self._device_hyper_keys

    def _refresh_device_hyper(self) -> None:
        for group in self.param_groups:
            if group["params"] and id(group) in self._device_hyper:
                self._device_hyper.on_device(id(group), group["params"][0].array, self._device_hyper_values(group))
