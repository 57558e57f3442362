"""``tinyamp.nn.parallel``: ``DistributedDataParallel``, as ``torch.nn.parallel``."""

from __future__ import annotations

from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
