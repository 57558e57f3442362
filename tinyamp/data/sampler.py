"""Samplers: the order a DataLoader reads a dataset in, as ``torch.utils.data.sampler``.

A sampler is an iterable of dataset indices; a batch sampler an iterable of
lists of them. ``DataLoader`` draws from them lazily, one batch at a time, so a
sampler without an end (detectron2's training sampler) works as in PyTorch.

``RandomSampler`` draws its permutation from a tinyamp ``Generator`` or a
``numpy.random.Generator`` (NumPy's PCG64 under both), so a seeded order is
reproducible but not PyTorch's ``randperm`` order.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Sized
from typing import Any, Generic, TypeVar

import numpy as np

from ..random import Generator, default_generator

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]

T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """The base class: subclasses define ``__iter__`` (and ``__len__`` when the order has an end)."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """Indices 0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def host_rng(generator: Any, caller: str = "DataLoader") -> np.random.Generator:
    """The NumPy generator behind ``generator`` (None: tinyamp's default CPU generator)."""
    if isinstance(generator, np.random.Generator):
        return generator
    if generator is None:
        generator = default_generator("cpu")
    if not isinstance(generator, Generator):
        raise TypeError(f"{caller}: generator must be a tinyamp.Generator or a numpy.random.Generator, "
                        f"found {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(f"{caller}: the shuffle order is drawn on the host; expected a CPU generator, "
                         f"found one on {generator.device}")
    return generator.rng


class RandomSampler(Sampler[int]):
    """A random permutation of the indices (or ``num_samples`` draws with ``replacement``)."""

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: "int | None" = None,
                 generator: Any = None) -> None:
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")
        if generator is not None:
            host_rng(generator, "RandomSampler")  # refuse an unusable generator now, not mid-epoch

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), host_rng(self.generator, "RandomSampler")
        if self.replacement:
            return iter(rng.integers(0, n, size=self.num_samples).tolist())
        whole, rest = divmod(self.num_samples, n)
        order = [rng.permutation(n) for _ in range(whole)] + ([rng.permutation(n)[:rest]] if rest else [])
        return iter(np.concatenate(order).tolist() if order else [])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in a random order."""

    def __init__(self, indices: Iterable[int], generator: Any = None) -> None:
        self.indices, self.generator = list(indices), generator

    def __iter__(self) -> Iterator[int]:
        for i in host_rng(self.generator, "SubsetRandomSampler").permutation(len(self.indices)):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights: Iterable[float], num_samples: int, replacement: bool = True,
                 generator: Any = None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(weights.shape)}")
        if not replacement and num_samples > np.count_nonzero(weights):
            raise RuntimeError(f"WeightedRandomSampler: cannot draw {num_samples} samples without replacement "
                               f"from {np.count_nonzero(weights)} non-zero weights")
        self.weights, self.num_samples, self.replacement, self.generator = weights, num_samples, replacement, generator

    def __iter__(self) -> Iterator[int]:
        rng = host_rng(self.generator, "WeightedRandomSampler")
        drawn = rng.choice(len(self.weights), self.num_samples, self.replacement, self.weights / self.weights.sum())
        return iter(drawn.tolist())

    def __len__(self) -> int:
        return self.num_samples


class EpochSeededSampler(Sampler[int]):
    """tinyamp's ``DataLoader(shuffle=True, seed=s)``: epoch ``e`` is the permutation of a generator seeded (s, e)."""

    def __init__(self, data_source: Sized, seed: int) -> None:
        self.data_source, self.seed, self.epoch = data_source, seed, 0

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())

    def order(self) -> np.ndarray:
        # Mixing the epoch into the seed gives each epoch its own permutation, and any one can be replayed.
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.data_source))

    def __len__(self) -> int:
        return len(self.data_source)


class BatchSampler(Sampler[list]):
    """Lists of ``batch_size`` indices drawn from ``sampler`` in turn; the short last one unless ``drop_last``."""

    def __init__(self, sampler: "Sampler[int] | Iterable[int]", batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def __iter__(self) -> Iterator[list]:
        batch: list = []
        for index in self.sampler:  # one index at a time: an endless sampler yields its first batch
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
