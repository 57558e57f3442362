"""``tinyamp.utils.data``: ``torch.utils.data``'s names for what :mod:`tinyamp.data` implements.

``from torch.utils.data import DataLoader, TensorDataset`` ports as
``from tinyamp.utils.data import DataLoader, TensorDataset``; the submodules
``dataloader``, ``sampler``, ``dataset`` and ``distributed`` are PyTorch's module
paths (``from torch.utils.data.dataloader import default_collate``). Nothing lives here.
"""

from __future__ import annotations

from . import dataloader, dataset, distributed, sampler
from ...distributed_sampler import DistributedSampler
from ....data.loader import DataLoader, Dataset, Subset, TensorDataset, default_collate, get_worker_info, random_split
from ....data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                             WeightedRandomSampler)

__all__ = ["DataLoader", "Dataset", "TensorDataset", "Subset", "random_split", "DistributedSampler",
           "default_collate", "get_worker_info", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "dataloader", "dataset", "distributed",
           "sampler"]
