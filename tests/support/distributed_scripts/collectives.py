"""Run under mpiexec by tests/porting/test_distributed.py: ta.distributed's collectives, errors and DistributedSampler.

Every check runs on every rank; a failure raises (the launcher aborts the job).
Prints "OK collectives <world size>" at the end.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
import tinyamp.distributed as dist
from tinyamp.utils.data import DataLoader, DistributedSampler, TensorDataset


def raises(kind, words, call) -> None:
    try:
        call()
    except kind as exc:
        assert words in str(exc), f"{words!r} not in {exc}"
        return
    raise AssertionError(f"no {kind.__name__} containing {words!r}")


def main() -> None:
    assert dist.is_available() and not dist.is_initialized()
    raises(ValueError, "Default process group has not been initialized", dist.get_rank)
    raises(ValueError, "Invalid backend", lambda: dist.init_process_group("tcp"))
    dist.init_process_group("gloo")
    raises(ValueError, "twice", lambda: dist.init_process_group("gloo"))
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "gloo"
    values = [float(r + 1) for r in range(size)]

    for dtype in (ta.float32, ta.float64, ta.float16, ta.bfloat16, ta.int32, ta.int64, ta.int8, ta.uint8):
        for op, want in ((dist.ReduceOp.SUM, sum(values)), (dist.ReduceOp.MAX, max(values)),
                         (dist.ReduceOp.MIN, min(values)), (dist.ReduceOp.PRODUCT, float(np.prod(values)))):
            t = ta.full((5,), values[rank], dtype=dtype)
            dist.all_reduce(t, op=op)
            assert t.dtype == dtype and (t.float().numpy() == want).all(), (dtype, op, t)
    for dtype in (ta.float32, ta.float16, ta.bfloat16):
        t = ta.full((3,), values[rank], dtype=dtype)
        work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
        assert work.wait() is True and work.is_completed()
        assert (t.float().numpy() == np.float32(sum(values) / size).astype(t.numpy().dtype)).all()
    # float16 sums are made in float32 and rounded once: 2049 + 1 would be 2048 in float16 steps
    t = ta.tensor([2048.0 if rank == 0 else 0.5], dtype=ta.float16)
    dist.all_reduce(t)
    assert t.item() == np.float16(2048.0 + 0.5 * (size - 1))
    raises(ValueError, "AVG needs a floating-point", lambda: dist.all_reduce(ta.ones(2, dtype=ta.int32),
                                                                             op=dist.ReduceOp.AVG))
    raises(ValueError, "contiguous", lambda: dist.all_reduce(ta.ones(4, 4).t()))
    raises(TypeError, "Expected parameter `tensor`", lambda: dist.all_reduce(np.ones(3)))
    raises(ValueError, "not supported", lambda: dist.all_reduce(ta.ones(2), op=dist.ReduceOp.BAND))

    for dtype in (ta.float32, ta.bfloat16, ta.float16, ta.int64):
        t = ta.full((4,), float(rank), dtype=dtype)
        dist.broadcast(t, src=size - 1)
        assert (t.float().numpy() == size - 1).all()
        out = ta.zeros(2 * size, dtype=dtype)
        dist.all_gather_into_tensor(out, ta.full((2,), float(rank), dtype=dtype))
        assert out.float().numpy().tolist() == [float(r) for r in range(size) for _ in range(2)]
        out = ta.zeros(2, dtype=dtype)
        dist.reduce_scatter_tensor(out, ta.arange(2 * size).to(dtype))
        assert out.float().numpy().tolist() == [float(size * (2 * rank)), float(size * (2 * rank + 1))]
    raises(ValueError, "src must be a rank", lambda: dist.broadcast(ta.ones(1), src=size))
    raises(ValueError, "world_size times input tensor size",
           lambda: dist.all_gather_into_tensor(ta.zeros(3), ta.zeros(2)))
    raises(ValueError, "output size times world size", lambda: dist.reduce_scatter_tensor(ta.zeros(2), ta.zeros(3)))
    raises(TypeError, "same type", lambda: dist.all_gather_into_tensor(ta.zeros(2 * size), ta.zeros(2).half()))
    dist.barrier()

    # DistributedSampler: PyTorch's assignment (values from torch 2.13.0's DistributedSampler, shuffle=False)
    n = 10
    expected = {2: {False: [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], True: [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]},
                3: {False: [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]], True: [[0, 3, 6], [1, 4, 7], [2, 5, 8]]}}
    for drop_last in (False, True):
        sampler = DistributedSampler(range(n), shuffle=False, drop_last=drop_last)
        assert list(sampler) == expected[size][drop_last][rank], (drop_last, list(sampler))
        assert len(sampler) == len(expected[size][drop_last][rank])
    tiny = DistributedSampler(range(1), num_replicas=3, rank=2, shuffle=False)  # padding repeats the order
    assert list(tiny) == [0]
    shuffled = DistributedSampler(range(n), seed=3)
    epochs = []
    for epoch in range(2):
        shuffled.set_epoch(epoch)
        mine = list(shuffled)
        everyone = ta.zeros(len(mine) * size, dtype=ta.int64)
        dist.all_gather_into_tensor(everyone, ta.tensor(mine, dtype=ta.int64))
        got = everyone.numpy().reshape(size, -1).T.reshape(-1).tolist()  # positions r, r + size, ...
        assert sorted(set(got)) == list(range(n)), got  # a permutation, padded from its head
        epochs.append(got)
    assert epochs[0] != epochs[1]
    raises(ValueError, "Invalid rank 3", lambda: DistributedSampler(range(4), num_replicas=3, rank=3))
    loader = DataLoader(TensorDataset(ta.arange(n)), batch_size=2, sampler=DistributedSampler(range(n), shuffle=False))
    assert [b[0].numpy().tolist() for b in loader][0] == expected[size][False][rank][:2]
    raises(ValueError, "mutually exclusive", lambda: DataLoader(TensorDataset(ta.arange(n)), shuffle=True,
                                                                 sampler=DistributedSampler(range(n))))

    # DDP's construction checks and no_sync
    from tinyamp.nn.parallel import DistributedDataParallel as DDP
    raises(RuntimeError, "doesn't have any parameter", lambda: DDP(ta.nn.ReLU()))
    raises(ValueError, "device_ids", lambda: DDP(ta.nn.Linear(2, 2), device_ids=[0]))
    raises(RuntimeError, "same model across all ranks", lambda: DDP(ta.nn.Linear(2, 2 + rank)))
    ta.manual_seed(rank)
    model = ta.nn.Linear(3, 2)
    ddp = DDP(model)
    assert list(ddp.state_dict()) == ["module.weight", "module.bias"] and ddp.module is model
    x = ta.full((4, 3), float(rank + 1))
    with ddp.no_sync():
        ddp(x).sum().backward()
    local = model.weight.grad.numpy().copy()
    assert (local == 4.0 * (rank + 1)).all()  # not averaged inside no_sync
    ddp(x).sum().backward()  # accumulated locally, then the sum of both passes averaged
    want = np.mean([2 * 4.0 * (r + 1) for r in range(size)])
    assert np.allclose(model.weight.grad.numpy(), want), model.weight.grad
    # an unused parameter: PyTorch's error at the next forward, or find_unused_parameters
    two = ta.nn.ModuleDict({"a": ta.nn.Linear(3, 2), "b": ta.nn.Linear(3, 2)})

    class Partial(ta.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = two

        def forward(self, x):
            return self.inner["a"](x)

    partial = DDP(Partial())
    partial(x).sum().backward()
    raises(RuntimeError, "Expected to have finished reduction", lambda: partial(x))
    found = DDP(Partial(), find_unused_parameters=True)
    found(x).sum().backward()
    found(x).sum().backward()  # no error: the unused parameters counted as ready
    dist.destroy_process_group()
    assert not dist.is_initialized()
    print(f"OK collectives {size}", flush=True)


if __name__ == "__main__":
    main()
