"""Samplers, BatchSampler and the DataLoader's sampler arguments against PyTorch 2.13's recorded answers.

The cases are tests/support/porting_cases.py (the same code ran through torch);
an endless sampler must yield batches (the loader reads it one batch at a time).
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tests.support.porting_refs import check


@pytest.mark.parametrize("name", ["samplers_orders", "sampler_errors", "loader_with_samplers", "loader_errors"])
def test_data_case_matches_pytorch(name: str) -> None:
    check(name)


def test_worker_init_fn_runs_once_per_epoch_in_the_calling_process() -> None:
    calls = []
    loader = ta.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=2, worker_init_fn=calls.append)
    for _ in range(2):
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    assert calls == [0, 0]
    ta.utils.data.DataLoader(list(range(4)), worker_init_fn=calls.append).__iter__().__next__()
    assert calls == [0, 0]  # num_workers=0: never called, as PyTorch


def test_custom_sampler_over_tensor_dataset_on_device(device: str) -> None:
    x = ta.arange(12, device=device).reshape(6, 2)
    loader = ta.utils.data.DataLoader(ta.utils.data.TensorDataset(x), batch_size=2, sampler=[5, 0, 3])
    batches = [b[0] for b in loader]
    assert all(b.device == x.device for b in batches)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in batches]), x.numpy()[[5, 0, 3]])


def test_detectron2_style_sampler_subclass() -> None:
    class TrainingSampler(ta.utils.data.Sampler):
        def __init__(self, size: int) -> None:
            self._size = size

        def __iter__(self):
            g = np.random.default_rng(0)
            for _ in range(100):  # "while True" in detectron2; bounded so a loader reading it all fails
                yield from g.permutation(self._size).tolist()
            raise RuntimeError("the sampler was read to its end before the first batch")

    ds = ta.utils.data.TensorDataset(ta.arange(5))
    it = iter(ta.utils.data.DataLoader(ds, batch_size=4, sampler=TrainingSampler(len(ds))))
    seen = [next(it)[0].tolist() for _ in range(5)]
    assert all(len(b) == 4 for b in seen) and sorted(sum(seen, [])[:5]) == list(range(5))
