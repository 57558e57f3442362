"""``tinyamp.utils.data``: ``torch.utils.data``'s names for what :mod:`tinyamp.data` implements.

``from torch.utils.data import DataLoader, TensorDataset`` ports as
``from tinyamp.utils.data import DataLoader, TensorDataset``; nothing lives here.
"""

from __future__ import annotations

from ..distributed_sampler import DistributedSampler
from ...data.loader import DataLoader, Dataset, Subset, TensorDataset, default_collate, random_split

__all__ = ["DataLoader", "Dataset", "TensorDataset", "Subset", "random_split", "DistributedSampler",
           "default_collate"]
