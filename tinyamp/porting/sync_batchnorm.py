"""``nn.SyncBatchNorm``: BatchNorm whose statistics PyTorch averages over processes; in one process, a BatchNorm.

tinyamp does not synchronise the statistics: in training with more than one
process in the default group the layer refuses to run (per-process
statistics would silently differ from PyTorch's). ``convert_sync_batchnorm``
swaps every BatchNorm of a model for one, keeping its parameters and buffers.
"""

from __future__ import annotations

from typing import Any

from .distributed import process_group as pg
from ..nn.module import Module
from ..nn.normalization import _BatchNorm
from ..tensor import Tensor


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over (N, C, *) inputs; one process only (see the module docstring)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: "float | None" = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group: Any = None, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input(self, x: Tensor) -> None:
        if x.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {x.ndim}D input)")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{self!r}: expected {self.num_features} channels in dimension 1, got input of "
                             f"shape {list(x.shape)}")

    def forward(self, x: Tensor) -> Tensor:
        if self.training and pg.is_initialized() and pg.get_world_size() > 1:
            raise NotImplementedError(f"SyncBatchNorm: synchronising batch statistics over "
                                      f"{pg.get_world_size()} processes is not implemented in tinyamp; use "
                                      f"BatchNorm (per-process statistics) or train in one process")
        return super().forward(x)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """``module`` with every BatchNorm layer replaced by a SyncBatchNorm holding the same tensors."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            for name in ("weight", "bias"):
                converted.register_parameter(name, module._parameters.get(name))
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                converted._buffers[name] = module._buffers.get(name)
            converted.train(module.training)
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
