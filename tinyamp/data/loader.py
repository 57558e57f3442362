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
from .sampler import BatchSampler, EpochSeededSampler, RandomSampler, SequentialSampler, host_rng
from ..tensor import Tensor

__all__ = ["TensorDataset", "Subset", "random_split", "DataLoader", "default_collate", "get_worker_info"]


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
    order = host_rng(generator, "random_split").permutation(n)
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
    """Iterate over ``dataset`` in batches, with ``torch.utils.data.DataLoader``'s arguments.

    The order comes from ``sampler`` (default: ``SequentialSampler``, or
    ``RandomSampler`` with ``shuffle=True``) cut into batches by ``batch_sampler``
    (default: ``BatchSampler(sampler, batch_size, drop_last)``), drawn one batch at
    a time, so an endless sampler works. Shuffled orders:

    - ``seed=s`` (tinyamp's): epoch ``e`` uses a generator seeded with ``(s, e)``,
      so runs are reproducible, epochs differ, and ``set_epoch`` resumes exactly;
    - ``generator=g`` (a CPU ``tinyamp.Generator`` or a ``numpy.random.Generator``):
      permutations are drawn from ``g`` in turn;
    - neither: drawn from tinyamp's default CPU generator, so ``tinyamp.manual_seed``
      makes the run reproducible, as in PyTorch.

    ``batch_size=None`` turns batching off (each sample, through ``collate_fn`` if
    given). ``num_workers``, ``pin_memory``, ``timeout``, ``prefetch_factor`` and
    ``persistent_workers`` are accepted so PyTorch loaders port; batches are always
    made in the calling process, which is the one worker: with ``num_workers > 0``
    ``worker_init_fn(0)`` runs there at the start of each epoch (PyTorch runs it in
    each worker process; with ``num_workers=0`` neither calls it).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: "int | None" = 1,
        shuffle: "bool | None" = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: "int | None" = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: "int | None" = None,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: give either seed or generator, not both")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if generator is not None:
            host_rng(generator)  # reject an unusable generator now, not mid-epoch
        if sampler is None:
            if not shuffle:
                sampler = SequentialSampler(dataset)
            elif seed is not None:
                sampler = EpochSeededSampler(dataset, seed)
            else:
                sampler = RandomSampler(dataset, generator=generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, bool(drop_last))
        self.dataset = dataset
        self.batch_size, self.drop_last = batch_size, bool(drop_last)
        self.shuffle, self.seed, self.generator = bool(shuffle), seed, generator
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.collate_fn = collate_fn
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.multiprocessing_context = worker_init_fn, multiprocessing_context
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        self.pin_memory_device, self.in_order = pin_memory_device, in_order
        self.epoch = 0  # the epoch the next iteration will run

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (to resume a seeded run)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        # A sampler without a length (an endless one) makes this a TypeError, as in PyTorch.
        return len(self.sampler) if self.batch_sampler is None else len(self.batch_sampler)

    def _whole_order(self) -> "np.ndarray | None":
        """The epoch's order at once, for tinyamp's own finite samplers batched by the default BatchSampler.

        It feeds the TensorDataset fast path (one device copy of the order per
        epoch); any other sampler is read one batch at a time.
        """
        batches = self.batch_sampler
        if type(batches) is not BatchSampler or batches.sampler is not self.sampler:
            return None
        if isinstance(self.sampler, EpochSeededSampler):
            return self.sampler.order()
        if type(self.sampler) in (SequentialSampler, RandomSampler):
            return np.fromiter(iter(self.sampler), dtype=np.int64, count=len(self.sampler))
        return None

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.sampler, EpochSeededSampler):
            self.sampler.epoch = self.epoch
        self.epoch += 1
        if self.num_workers > 0 and self.worker_init_fn is not None:
            self.worker_init_fn(0)
        dataset, indices = self.dataset, None
        fast = self.collate_fn is None and self.batch_sampler is not None
        if fast and isinstance(dataset, Subset) and isinstance(dataset.dataset, TensorDataset):
            # random_split's train/validation subsets keep the fast path.
            indices, dataset = np.asarray(dataset.indices, dtype=np.int64), dataset.dataset
        if fast and isinstance(dataset, TensorDataset):
            order = self._whole_order()
            if order is not None:
                yield from self._iter_tensor_dataset(dataset, order if indices is None else indices[order])
                return
            for batch in self.batch_sampler:
                rows = np.asarray(batch, dtype=np.int64)
                yield _gather(dataset.tensors, rows if indices is None else indices[rows])
            return
        dataset = self.dataset
        if self.batch_sampler is None:  # batching off: one sample at a time
            for index in self.sampler:
                yield dataset[index] if self.collate_fn is None else self.collate_fn(dataset[index])
            return
        collate = self.collate_fn or default_collate
        for batch in self.batch_sampler:
            yield collate([dataset[i] for i in batch])

    def _iter_tensor_dataset(self, dataset: TensorDataset, order: np.ndarray) -> Iterator[tuple[Any, ...]]:
        # One fancy-indexing gather per tensor per batch instead of stacking batch_size rows; the epoch's
        # order is copied to each tensor's device once, not once per batch.
        n, size = len(order), self.batch_size
        bounds = [(start, min(start + size, n)) for start in range(0, n, size)]
        if self.drop_last and n % size:
            bounds.pop()  # the short last batch
        orders = [_index_on_device(order, _raw(t)) for t in dataset.tensors]
        for start, stop in bounds:
            yield _gather(dataset.tensors, None, [o[start:stop] for o in orders])

    def __repr__(self) -> str:
        return (
            f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last})"
        )


def _gather(tensors: tuple, rows: "np.ndarray | None", per_tensor: "list | None" = None) -> tuple:
    """One batch: each tensor's ``rows`` (host indices), or its own device-resident ``per_tensor`` index."""
    batch = []
    for i, t in enumerate(tensors):
        gathered = _raw(t)[per_tensor[i] if per_tensor is not None else _index_on_device(rows, _raw(t))]
        batch.append(gathered if isinstance(t, np.ndarray) else _as_tensor(gathered))
    return tuple(batch)


def get_worker_info() -> None:
    """None: batches are made in the calling process (``torch.utils.data.get_worker_info`` there too)."""
    return None


def _raw(t: Any) -> Any:
    """The backend array behind a NumPy array or a tinyamp Tensor."""
    return t if isinstance(t, np.ndarray) else t.array
