"""Datasets and mini-batch loading, after ``torch.utils.data``.

``TensorDataset`` pairs arrays (tinyamp Tensors or NumPy arrays) sample by
sample; ``DataLoader`` cuts a dataset into (optionally shuffled) batches.

Both accept NumPy arrays and tinyamp Tensors. A NumPy input gives NumPy
batches; a Tensor input gives Tensor batches on the same device, built from
the Tensor's raw array, so loading never records anything on the autograd
tape. Python numbers in samples (a custom Dataset's integer labels) batch
into a Tensor, as ``torch``'s default collation does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Iterator, Protocol

import numpy as np

from .. import backend
from ..random import Generator, default_generator
from ..tensor import Tensor

__all__ = ["TensorDataset", "Subset", "random_split", "DataLoader", "default_collate"]


class Dataset(Protocol):
    """Anything with a length and integer indexing is a dataset."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


# ------------------------------------------------------ Tensor/NumPy glue


def _as_tensor(data: Any) -> Any:
    """Wrap a freshly gathered backend array as a Tensor, without copying.

    The gather already made a private copy on the source tensor's device with
    its dtype, so ``tinyamp.tensor`` (which copies again) would only cost time.
    """
    return Tensor(data)


def _index_on_device(index: np.ndarray, array: Any) -> Any:
    """``index`` moved to the device that holds ``array`` (no-op on CPU)."""
    if isinstance(array, np.ndarray):
        return index
    return backend.to_device(index, backend.device_of(array))


# --------------------------------------------------------------- datasets


class TensorDataset:
    """Samples are rows of the given tensors: ``ds[i] == (t0[i], t1[i], ...)``.

    Every tensor must have the same first dimension (the number of samples).
    Tensors may be tinyamp Tensors or NumPy arrays; lists are converted
    with ``np.asarray``.
    """

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor, found none")
        converted = []
        for t in tensors:
            if not (isinstance(t, np.ndarray) or isinstance(t, Tensor)):
                t = np.asarray(t)
            if len(t.shape) == 0:
                raise ValueError(
                    "TensorDataset: every tensor needs a first (sample) dimension, "
                    "found a 0-d tensor"
                )
            converted.append(t)
        lengths = [t.shape[0] for t in converted]
        if len(set(lengths)) != 1:
            raise ValueError(
                "TensorDataset: all tensors must have the same size in the first "
                f"dimension (the number of samples), found sizes {lengths}"
            )
        self.tensors: tuple[Any, ...] = tuple(converted)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.tensors)
        return f"TensorDataset({shapes})"


class Subset:
    """The samples of ``dataset`` at ``indices``, in that order (``torch.utils.data.Subset``)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.indices[index]]


def random_split(dataset: Dataset, lengths: Sequence[float], generator: Any = None) -> list[Subset]:
    """Disjoint random subsets of the given lengths (counts, or fractions summing to 1), as PyTorch.

    Fractions are floored and the samples left over go one each to the first
    subsets. The permutation comes from ``generator`` (a CPU tinyamp Generator
    or a NumPy one), else from tinyamp's default generator.
    """
    n = len(dataset)
    if lengths and all(0 <= f <= 1 for f in lengths) and abs(sum(lengths) - 1) < 1e-9 and sum(lengths) != n:
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    else:
        counts = [int(c) for c in lengths]
    if sum(counts) != n or any(c < 0 for c in counts):
        raise ValueError(f"random_split: sum of input lengths {list(lengths)} does not equal the length of "
                         f"the input dataset ({n})")
    order = _host_rng(generator).permutation(n)
    edges = np.cumsum([0] + counts)
    return [Subset(dataset, order[a:b]) for a, b in zip(edges[:-1], edges[1:])]


# ------------------------------------------------------------------ loader


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _python_numbers(batch: Sequence[Any], float64: bool) -> np.ndarray:
    """A field of Python numbers as ``torch.tensor(batch)`` makes it (``float64``: the first one is a float,
    and torch's default_collate asks for float64): bools stay bool, ints are int64 (one outside int64 is an
    error, PyTorch's "Overflow when unpacking long long", not a silent float64), any float makes float32."""
    kinds = {type(v) for v in batch}
    if not kinds <= {bool, int, float}:
        raise TypeError(f"default_collate: a field of Python numbers holds {sorted(k.__name__ for k in kinds)}")
    if float64 or float in kinds:
        return np.asarray(batch, dtype=np.float64 if float64 else np.float32)
    if kinds == {bool}:
        return np.asarray(batch, dtype=np.bool_)
    for v in batch:
        if not _INT64[0] <= v <= _INT64[1]:
            raise ValueError(f"default_collate: the int {v} does not fit in the int64 tensor a field of Python ints "
                             f"becomes (PyTorch: Overflow when unpacking long long)")
    return np.asarray(batch, dtype=np.int64)


def default_collate(batch: Sequence[Any]) -> Any:
    """A list of samples as one batch of the same structure (``torch.utils.data.default_collate``).

    Tensors are stacked into a Tensor on their device; NumPy arrays and NumPy
    scalars into a NumPy array (NumPy in, NumPy out); Python bools, ints and
    floats into a bool, int64 or float64 Tensor; strings stay a list; a dict
    becomes a dict of batches, a tuple (a named one too) or list a tuple or
    list of batches, field by field, each field keeping its own dtype.
    """
    if len(batch) == 0:
        raise ValueError("default_collate: the batch is empty")
    first = batch[0]
    if isinstance(first, Tensor):
        if any(not isinstance(item, Tensor) or item.shape != first.shape for item in batch):
            shapes = sorted({str(list(getattr(item, "shape", ()))) for item in batch})
            raise RuntimeError(f"default_collate: stack expects each tensor to be equal size, got shapes "
                               f"{', '.join(shapes)}")
        xp = backend.array_module(first.array)
        return _as_tensor(xp.stack([item.array for item in batch]))
    if isinstance(first, (np.ndarray, np.generic)) and not isinstance(first, (np.str_, np.bytes_)):
        arrays = [np.asarray(item) for item in batch]
        if any(a.shape != arrays[0].shape for a in arrays):
            raise RuntimeError(f"default_collate: stack expects each array to be equal size, got shapes "
                               f"{', '.join(sorted({str(list(a.shape)) for a in arrays}))}")
        return np.stack(arrays)
    if isinstance(first, (bool, int, float)):
        # A Dataset returning (image, label): int labels batch into an int64 Tensor (float: float64), as
        # torch's default_collate does, so they go straight into a loss.
        return _as_tensor(_python_numbers(batch, float64=isinstance(first, float)))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, Sequence):
        if any(not isinstance(sample, Sequence) or len(sample) != len(first) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(samples)) for samples in zip(*batch)]
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
            return type(first)(*fields)
        return tuple(fields) if isinstance(first, tuple) else fields
    raise TypeError(f"default_collate: batch must contain tensors, NumPy arrays, numbers, strings, dicts or "
                    f"lists; found {type(first).__name__}")


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` samples.

    Each batch is a tuple with one stacked array per field of a sample
    (for a ``TensorDataset``: one per tensor). With ``shuffle=True`` the order
    is a fresh permutation every epoch (every pass of ``for batch in loader``):

    - ``seed=s``: epoch ``e`` uses a generator seeded with ``(s, e)``, so runs
      are reproducible, epochs differ, and ``set_epoch`` resumes exactly;
    - ``generator=g`` (a CPU ``tinyamp.Generator`` or a
      ``numpy.random.Generator``): permutations are drawn from ``g`` in turn;
    - neither: drawn from tinyamp's default CPU generator, so
      ``tinyamp.manual_seed`` makes the run reproducible, as in PyTorch.

    ``sampler=`` (an iterable of indices with ``len``, such as a
    ``DistributedSampler``) gives the order instead, and excludes ``shuffle``.
    The last, smaller batch is kept unless ``drop_last=True``. ``collate_fn``
    replaces the default batching of a list of samples. ``num_workers`` and
    ``pin_memory`` are accepted so PyTorch loaders port; batches are always
    made in the calling process (the gathers are single NumPy/CuPy calls).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
        generator: Any = None,
        *,
        sampler: Any = None,
        collate_fn: Any = None,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, (int, np.integer))
            or batch_size < 1
        ):
            raise ValueError(
                f"DataLoader: batch_size must be a positive integer, found {batch_size!r}"
            )
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: give either seed or generator, not both")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if generator is not None:
            _host_rng(generator)  # reject an unusable generator now, not mid-epoch
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = seed
        self.generator = generator
        self.sampler = sampler
        self.collate_fn = collate_fn
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.epoch = 0  # the epoch the next iteration will run

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (to resume a seeded run)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        if self.drop_last:
            return n // self.batch_size
        return -(-n // self.batch_size)  # ceiling division

    def _order(self, epoch: int) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter(iter(self.sampler), dtype=np.int64)
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        if self.seed is not None:
            # Mixing the epoch into the seed gives each epoch its own
            # permutation while any single epoch can be replayed on its own.
            return np.random.default_rng([self.seed, epoch]).permutation(n)
        return _host_rng(self.generator).permutation(n)

    def __iter__(self) -> Iterator[Any]:
        order = self._order(self.epoch)
        self.epoch += 1
        n, size = len(order), self.batch_size
        bounds = [(start, min(start + size, n)) for start in range(0, n, size)]
        if self.drop_last and n % size:
            bounds.pop()  # the short last batch

        dataset = self.dataset
        if self.collate_fn is None and isinstance(dataset, Subset) and isinstance(dataset.dataset, TensorDataset):
            # random_split's train/validation subsets keep the fast path.
            order, dataset = np.asarray(dataset.indices, dtype=np.int64)[order], dataset.dataset
        if self.collate_fn is None and isinstance(dataset, TensorDataset):
            yield from self._iter_tensor_dataset(dataset, order, bounds)
        else:
            collate = self.collate_fn or default_collate
            for start, stop in bounds:
                yield collate([dataset[int(i)] for i in order[start:stop]])

    def _iter_tensor_dataset(
        self, dataset: TensorDataset, order: np.ndarray, bounds: list[tuple[int, int]]
    ) -> Iterator[tuple[Any, ...]]:
        # One fancy-indexing gather per tensor per batch instead of stacking
        # batch_size rows; the epoch's order is copied to each tensor's device
        # once, not once per batch.
        tensors = dataset.tensors
        orders = [_index_on_device(order, _raw(t)) for t in tensors]
        for start, stop in bounds:
            batch = []
            for t, t_order in zip(tensors, orders):
                rows = _raw(t)[t_order[start:stop]]
                batch.append(rows if isinstance(t, np.ndarray) else _as_tensor(rows))
            yield tuple(batch)

    def __repr__(self) -> str:
        return (
            f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last})"
        )


def _host_rng(generator: Any) -> np.random.Generator:
    """The NumPy generator behind ``generator`` (None: tinyamp's default)."""
    if isinstance(generator, np.random.Generator):
        return generator
    if generator is None:
        generator = default_generator("cpu")
    if not isinstance(generator, Generator):
        raise TypeError(
            "DataLoader: generator must be a tinyamp.Generator or a "
            f"numpy.random.Generator, found {type(generator).__name__}"
        )
    if generator.device.type != "cpu":
        raise ValueError(
            "DataLoader: the shuffle order is drawn on the host; expected a CPU "
            f"generator, found one on {generator.device}"
        )
    return generator.rng


def _raw(t: Any) -> Any:
    """The backend array behind a NumPy array or a tinyamp Tensor."""
    return t if isinstance(t, np.ndarray) else t.array
