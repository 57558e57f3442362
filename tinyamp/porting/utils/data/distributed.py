"""``torch.utils.data.distributed``'s path: ``DistributedSampler`` (from :mod:`tinyamp.data.distributed_sampler`)."""

from __future__ import annotations

from ...distributed_sampler import DistributedSampler

__all__ = ["DistributedSampler"]
