"""Data for tinyamp: IDX files, MNIST and mini-batch loading.

- :func:`read_idx` / :func:`write_idx` read and write the IDX format MNIST is
  distributed in (raw or gzip), raising :class:`IDXError` on malformed files.
- :func:`load_mnist` returns MNIST as NumPy arrays: by default the bundled
  5,000-image subset split 4,000/1,000, or the full data set from a folder
  (``root=`` or the ``TINYAMP_DATA`` environment variable).
- :func:`copy_task` generates a synthetic sequence task from a seed (copy a
  random prefix after a separator), for examples/tiny_transformer.py.
- :class:`TensorDataset` and :class:`DataLoader` batch and shuffle arrays or
  tinyamp Tensors, with PyTorch's interface and reproducible seeded shuffling;
  :class:`Subset` and :func:`random_split` make train/validation splits;
  the samplers (:mod:`.sampler`) give the order a loader reads in.
"""

from .idx import IDXError, read_idx, write_idx
from ..porting.distributed_sampler import DistributedSampler
from .loader import DataLoader, Subset, TensorDataset, random_split
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .mnist import load_mnist
from .copy_task import copy_task

__all__ = ["read_idx", "write_idx", "IDXError", "load_mnist", "copy_task", "TensorDataset", "Subset", "random_split",
           "DataLoader", "DistributedSampler", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler",
           "BatchSampler"]
