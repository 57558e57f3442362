"""``torch.utils.data.sampler``'s path: the samplers (they live in :mod:`tinyamp.data.sampler`)."""

from __future__ import annotations

from ....data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                             WeightedRandomSampler)

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]
