"""Porting cases: one function per case, run with ``lib = torch`` (tests/make_porting_references.py
records the answers in porting_references.json) and with ``lib = tinyamp`` (the tests compare).

A case returns plain JSON values: tensors become nested lists (``plain``), an
exception becomes ``"TypeName: message"`` (``error``). This file imports neither library.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

CASES: dict = {}


def case(fn: Callable) -> Callable:
    CASES[fn.__name__] = fn
    return fn


def plain(value: Any) -> Any:
    """Tensors and NumPy arrays as lists, containers element by element."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def error(fn: Callable) -> str:
    """``"TypeName: message"`` of what ``fn()`` raises."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the exception is the answer
        return f"{type(exc).__name__}: {exc}"
    return "no error"


# ------------------------------------------------------------------ data: samplers and the DataLoader
@case
def samplers_orders(lib: Any) -> dict:
    data = lib.utils.data
    seq = data.SequentialSampler(range(7))
    return {
        "sequential": list(seq), "sequential_len": len(seq),
        "batches": list(data.BatchSampler(data.SequentialSampler(range(10)), 3, False)),
        "batches_drop_last": list(data.BatchSampler(range(10), batch_size=3, drop_last=True)),
        "len": [len(data.BatchSampler(range(10), 3, False)), len(data.BatchSampler(range(10), 3, True))],
        "is_sampler": [isinstance(seq, data.Sampler), isinstance(data.BatchSampler(seq, 2, False), data.Sampler)],
        "random_is_permutation": sorted(data.RandomSampler(range(9))) == list(range(9)),
        "random_num_samples": len(list(data.RandomSampler(range(4), num_samples=10))),
        "random_replacement_len": len(data.RandomSampler(range(4), replacement=True, num_samples=6)),
        "subset_random": sorted(data.SubsetRandomSampler([5, 2, 8])),
        "weighted_only_positive": sorted(set(data.WeightedRandomSampler([0, 1, 0, 1], 20))),
    }


@case
def sampler_errors(lib: Any) -> dict:
    data = lib.utils.data
    return {
        "batch_size_0": error(lambda: data.BatchSampler(range(3), 0, False)),
        "batch_size_float": error(lambda: data.BatchSampler(range(3), 2.5, False)),
        "drop_last_int": error(lambda: data.BatchSampler(range(3), 2, 1)),
        "random_num_samples": error(lambda: data.RandomSampler(range(3), num_samples=0)),
        "random_replacement": error(lambda: data.RandomSampler(range(3), replacement=1)),
        "weighted_num_samples": error(lambda: data.WeightedRandomSampler([1.0], 0)),
        "weighted_2d": error(lambda: data.WeightedRandomSampler([[1.0]], 1)),
        "base_iter": error(lambda: iter(data.Sampler())),
    }


class _Endless:
    """detectron2's TrainingSampler in miniature: an index stream without an end (no __len__).

    It refuses to be read past 100 indices, so a loader that reads the whole order
    before its first batch fails here instead of hanging.
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        for i in itertools.count():
            if i == 100:
                raise RuntimeError("the endless sampler was read past 100 indices before a batch was used")
            yield i % self.n


@case
def loader_with_samplers(lib: Any) -> dict:
    data = lib.utils.data
    ds = data.TensorDataset(lib.arange(10) * 10)
    batch_sampler = data.BatchSampler(data.SequentialSampler(ds), 4, False)
    endless = iter(data.DataLoader(ds, batch_size=4, sampler=_Endless(10)))
    endless_batches = iter(data.DataLoader(ds, batch_sampler=data.BatchSampler(_Endless(10), 3, False)))
    plain_list = list(range(5))
    return {
        "batch_sampler": [plain(b) for b in data.DataLoader(ds, batch_sampler=batch_sampler)],
        "batch_sampler_len": len(data.DataLoader(ds, batch_sampler=batch_sampler)),
        "batch_sampler_attrs": [data.DataLoader(ds, batch_sampler=batch_sampler).batch_size,
                                data.DataLoader(ds, batch_sampler=batch_sampler).drop_last],
        "endless_sampler": [plain(next(endless)) for _ in range(4)],
        "endless_batch_sampler": [plain(next(endless_batches)) for _ in range(4)],
        "endless_len": error(lambda: len(data.DataLoader(ds, sampler=_Endless(10)))),
        "list_dataset": [plain(b) for b in data.DataLoader(plain_list, batch_size=2, sampler=[4, 0, 3])],
        "no_batching": [plain(b) for b in data.DataLoader(plain_list, batch_size=None)],
        "default_sampler_types": [type(data.DataLoader(ds).sampler).__name__,
                                  type(data.DataLoader(ds, shuffle=True).sampler).__name__,
                                  type(data.DataLoader(ds).batch_sampler).__name__],
        "dataloader_module": [data.dataloader.DataLoader is data.DataLoader,
                              data.dataloader.default_collate([1, 2]).tolist(),
                              data.sampler.BatchSampler is data.BatchSampler,
                              data.dataloader.get_worker_info() is None],
    }


@case
def loader_errors(lib: Any) -> dict:
    data = lib.utils.data
    ds = list(range(6))
    bs = data.BatchSampler(range(6), 2, False)
    return {
        "sampler_and_shuffle": error(lambda: data.DataLoader(ds, sampler=[0, 1], shuffle=True)),
        "batch_sampler_and_batch_size": error(lambda: data.DataLoader(ds, batch_size=2, batch_sampler=bs)),
        "batch_sampler_and_drop_last": error(lambda: data.DataLoader(ds, drop_last=True, batch_sampler=bs)),
        "batch_sampler_and_sampler": error(lambda: data.DataLoader(ds, sampler=[0], batch_sampler=bs)),
        "no_batching_and_drop_last": error(lambda: data.DataLoader(ds, batch_size=None, drop_last=True)),
        "negative_workers": error(lambda: data.DataLoader(ds, num_workers=-1)),
        "negative_timeout": error(lambda: data.DataLoader(ds, timeout=-1)),
        "prefetch_without_workers": error(lambda: data.DataLoader(ds, prefetch_factor=2)),
        "persistent_without_workers": error(lambda: data.DataLoader(ds, persistent_workers=True)),
        "batch_size_0": error(lambda: data.DataLoader(ds, batch_size=0)),
    }
