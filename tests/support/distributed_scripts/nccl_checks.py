"""Run by tests/porting/test_distributed.py under the CUDA stand-in: the NCCL backend's code on the strict NCCL stand-in.

``nccl_checks.py duplicate`` (mpiexec without a launcher: every rank on cuda:0) expects NCCL's
"Duplicate GPU detected"; ``nccl_checks.py strict`` (through the launcher, one device per local rank)
runs ta.distributed's collectives with backend="nccl" and checks what the stand-in refuses.
"""

from __future__ import annotations

import sys

import numpy as np

import tinyamp as ta
import tinyamp.distributed as dist
from tinyamp import backend


def raises(kind, words, call) -> None:
    try:
        call()
    except kind as exc:
        assert words in str(exc), f"{words!r} not in {exc}"
        return
    raise AssertionError(f"no {kind.__name__} containing {words!r}")


def duplicate() -> None:
    assert ta.cuda.device_count() == 1
    ta.cuda.set_device(0)
    dist.init_process_group("nccl")  # the communicator is built at the first collective, as in PyTorch
    raises(RuntimeError, "Duplicate GPU detected", lambda: dist.all_reduce(ta.ones(2, device="cuda")))
    print("OK duplicate", flush=True)


def strict() -> None:
    import os  # noqa: PLC0415

    local = int(os.environ["LOCAL_RANK"])
    assert ta.cuda.device_count() == int(os.environ["LOCAL_WORLD_SIZE"])
    raises(RuntimeError, "owns cuda:", lambda: ta.zeros(2, device="cuda")) if local != 0 else None
    ta.cuda.set_device(local)
    assert ta.cuda.current_device() == local
    dist.init_process_group("nccl")
    assert dist.is_nccl_available() and dist.get_backend() == "nccl"
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = f"cuda:{local}"
    nccl = backend.cuda_lib("cupy.cuda.nccl")
    counts = nccl.collective_counts
    before = sum(counts.values())
    for dtype in (ta.float32, ta.float16, ta.bfloat16, ta.int32, ta.int64):
        for op, want in ((dist.ReduceOp.SUM, float(sum(range(1, size + 1)))), (dist.ReduceOp.MAX, float(size))):
            t = ta.full((5,), float(rank + 1), dtype=dtype, device=dev)
            dist.all_reduce(t, op=op)
            assert (t.float().cpu().numpy() == want).all(), (dtype, op, t)
        t = ta.full((4,), float(rank), dtype=dtype, device=dev)
        work = dist.broadcast(t, src=size - 1, async_op=True)
        work.wait()
        assert (t.float().cpu().numpy() == size - 1).all()
        out = ta.zeros(2 * size, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, ta.full((2,), float(rank), dtype=dtype, device=dev))
        assert out.float().cpu().numpy().tolist() == [float(r) for r in range(size) for _ in range(2)]
        out = ta.zeros(2, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, ta.arange(2 * size, device=dev).to(dtype))
        assert out.float().cpu().numpy().tolist() == [float(size * 2 * rank), float(size * (2 * rank + 1))]
    t = ta.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert (t.cpu().numpy() == np.float32((size + 1) / 2)).all()
    assert sum(counts.values()) - before == 5 * 5 + 1  # one NCCL call per collective
    raises(ValueError, "works on CUDA tensors", lambda: dist.all_reduce(ta.ones(2)))
    # the stand-in's own checks, as NCCL's binding would be called wrongly
    comm = dist.process_group.default_backend().comm
    x = ta.ones(4, device=dev).array
    stream = backend.cupy().cuda.get_current_stream().ptr
    raises(RuntimeError, "not an NCCL datatype", lambda: comm.allReduce(x.data.ptr, x.data.ptr, 4, 42, 0, stream))
    raises(RuntimeError, "not an NCCL reduction", lambda: comm.allReduce(x.data.ptr, x.data.ptr, 4, 7, 9, stream))
    raises(RuntimeError, "not the current stream",
           lambda: comm.allReduce(x.data.ptr, x.data.ptr, 4, 7, 0, stream + 1))
    raises(ValueError, "run past the end", lambda: comm.allReduce(x.data.ptr, x.data.ptr, 5, 7, 0, stream))
    dist.barrier()
    dist.destroy_process_group()
    print(f"OK strict nccl {size}", flush=True)


if __name__ == "__main__":
    duplicate() if sys.argv[1] == "duplicate" else strict()
