"""DistributedSampler: each rank's share of a dataset's indices, as ``torch.utils.data.DistributedSampler``.

The partitioning rules are PyTorch's: every rank gets ``num_samples`` indices,
``ceil(len / num_replicas)``; without ``drop_last`` the epoch's order is padded
to ``num_samples * num_replicas`` by repeating its head (as often as needed),
with ``drop_last`` its tail is cut (to ``ceil((len - num_replicas) /
num_replicas)`` per rank when the length does not divide); rank ``r`` takes
positions ``r, r + num_replicas, ...``. With ``shuffle`` the order is a
permutation drawn from a generator seeded with ``seed + epoch`` (so every rank
draws the same one, and ``set_epoch`` changes it): PyTorch draws it with
``torch.randperm``, tinyamp with ``ta.randperm`` on a ``ta.Generator``, so the
shuffled order differs from PyTorch's while who gets which position does not.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from .distributed import process_group
from ..factories import randperm
from ..random import Generator


class DistributedSampler:
    """The indices of ``dataset`` that rank ``rank`` of ``num_replicas`` reads this epoch."""

    def __init__(self, dataset: Any, num_replicas: "int | None" = None, rank: "int | None" = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None:
            num_replicas = process_group.get_world_size()
        if rank is None:
            rank = process_group.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.epoch = 0
        self.drop_last = bool(drop_last)
        length = len(dataset)
        if self.drop_last and length % self.num_replicas:
            self.num_samples = math.ceil((length - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(length / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = bool(shuffle)
        self.seed = int(seed)

    def _epoch_order(self) -> list[int]:
        length = len(self.dataset)
        if not self.shuffle:
            return list(range(length))
        generator = Generator()
        generator.manual_seed(self.seed + self.epoch)
        return randperm(length, generator=generator).array.tolist()

    def __iter__(self) -> Iterator[int]:
        order = self._epoch_order()
        if self.drop_last:
            order = order[:self.total_size]
        else:
            short = self.total_size - len(order)
            repeats = math.ceil(short / len(order)) if order else 0
            order = order + (order * repeats)[:short]
        mine = order[self.rank:self.total_size:self.num_replicas]
        if len(mine) != self.num_samples:
            raise RuntimeError(f"DistributedSampler: rank {self.rank} got {len(mine)} indices, expected "
                               f"{self.num_samples}")
        return iter(mine)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next ``__iter__`` draws (call it before each epoch when shuffling)."""
        self.epoch = int(epoch)
