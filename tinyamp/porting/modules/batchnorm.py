"""``torch.nn.modules.batchnorm``'s names: ``isinstance(m, nn.modules.batchnorm._BatchNorm)`` finds every BatchNorm."""

from __future__ import annotations

from ...nn.normalization import BatchNorm1d, BatchNorm2d, _BatchNorm

__all__ = ["_BatchNorm", "BatchNorm1d", "BatchNorm2d"]
