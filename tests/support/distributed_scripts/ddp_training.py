"""Run under mpiexec by tests/porting/test_distributed.py: DDP training follows one process, replicas stay bitwise equal.

Each rank trains an MLP wrapped in DistributedDataParallel on its DistributedSampler
share (batch GLOBAL_BATCH / world_size) and, beside it, a one-process reference
model on the whole global batch of the same step. Checked at every step: all
ranks' parameters are bitwise equal (their bytes gathered over MPI); after
STEPS steps the DDP model is within TOLERANCE of the reference. For every AMP
configuration (float16, bfloat16; SGD, Adam; O1, O2). With --inject, rank 1 alone
gets an inf gradient after the averaging: every rank must skip that step, with
one scale sequence.

Usage: ddp_training.py --backend mpi|nccl [--graphed] [--inject] [--configs all|''|float16-O1-sgd,...]
[--collectives]; prints "OK <config>" per passed check.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from mpi4py import MPI

import collectives  # tests/support/distributed_scripts/collectives.py and nccl_checks.py, beside this file
import nccl_checks
import tinyamp as ta
import tinyamp.distributed as dist
import tinyamp.nn.functional as F
from tinyamp.nn.parallel import DistributedDataParallel as DDP
from tinyamp.utils.data import DistributedSampler

STEPS = 50
GLOBAL_BATCH = 12
SAMPLES = 96  # divisible by the global batch and by 2 and 3 ranks: no padding, so global batches tile the epoch
# The DDP run and the reference see the same samples in each step but sum them in another order (a mean of
# per-rank means, 16-bit gradients rounded per rank): float rounding that 50 optimizer steps carry forward.
TOLERANCE = {"float16": 5e-2, "bfloat16": 5e-2}  # observed at most 3.9e-2 (SGD, momentum 0.9)
INJECT_STEPS = (5, 17)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="mpi")
    parser.add_argument("--graphed", action="store_true")
    parser.add_argument("--inject", action="store_true")
    parser.add_argument("--configs", default="all")
    parser.add_argument("--collectives", action="store_true", help="run collectives.py's checks first")
    return parser.parse_args()


def data(device: str) -> tuple:
    rng = np.random.default_rng(123)
    x = rng.standard_normal((SAMPLES, 20)).astype(np.float32)
    y = rng.integers(0, 4, SAMPLES)
    return ta.tensor(x, device=device), ta.tensor(y, device=device)


def make_model(seed: int, device: str, dtype: str, level: str, optimizer: str) -> tuple:
    ta.manual_seed(seed)
    model = ta.nn.Sequential(ta.nn.Linear(20, 32), ta.nn.ReLU(), ta.nn.Linear(32, 4)).to(device)
    o2 = level == "O2"
    if o2:
        model = model.half() if dtype == "float16" else model.bfloat16()
    return model, o2


def make_optimizer(params, optimizer: str, o2: bool):
    if optimizer == "adam":
        return ta.optim.Adam(params, lr=1e-3, master_weights=o2)
    return ta.optim.SGD(params, lr=0.05, momentum=0.9, master_weights=o2)


def step_function(model, opt, scaler, dtype: str, o2: bool, device_type: str):
    low = getattr(ta, dtype)

    def step(x, y):
        opt.zero_grad()
        if dtype == "float32":
            loss = F.cross_entropy(model(x), y)
        elif o2:
            loss = F.cross_entropy(model(x.to(low)).float(), y)
        else:
            with ta.autocast(device_type, dtype=low):
                loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss
    return step


def param_bytes(model) -> bytes:
    return b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())


def check_equal_everywhere(comm, model, what: str) -> None:
    mine = param_bytes(model)
    everyone = comm.allgather(mine)
    if any(b != mine for b in everyone):
        raise AssertionError(f"{what}: parameters differ between ranks")


def train(args, comm, device: str, dtype: str, level: str, optimizer: str) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    device_type = device.split(":")[0]
    x_all, y_all = data(device)
    model, o2 = make_model(100 + rank, device, dtype, level, optimizer)  # different on every rank: DDP broadcasts rank 0's
    ddp = DDP(model, device_ids=None if device == "cpu" else [device])
    opt = make_optimizer(ddp.parameters(), optimizer, o2)
    use_scaler = dtype == "float16"
    scaler = ta.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=8) if use_scaler else None
    ref, _ = make_model(100, device, dtype, level, optimizer)  # rank 0's initial weights
    ref_opt = make_optimizer(ref.parameters(), optimizer, o2)
    ref_scaler = ta.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=8) if use_scaler else None
    check_equal_everywhere(comm, model, "after construction")
    for p, q in zip(model.parameters(), ref.parameters()):
        assert np.array_equal(p.detach().cpu().numpy(), q.detach().cpu().numpy()), "broadcast did not give rank 0's"

    local = GLOBAL_BATCH // size
    sampler = DistributedSampler(range(SAMPLES), num_replicas=size, rank=rank, shuffle=True, seed=7)
    whole = DistributedSampler(range(SAMPLES), num_replicas=1, rank=0, shuffle=True, seed=7)
    step = step_function(ddp, opt, scaler, dtype, o2, device_type)
    ref_step = step_function(ref, ref_opt, ref_scaler, dtype, o2, device_type)
    if args.graphed:  # 3 eager warm-up calls, then the captured step (its NCCL calls included) is replayed
        step = ta.cuda.make_graphed_step(step, (x_all[:local], y_all[:local]))
    per_epoch = SAMPLES // GLOBAL_BATCH
    scales = []
    nccl_calls = ta.backend.cuda_lib("cupy.cuda.nccl").collective_counts if args.backend == "nccl" else None
    per_step = len(ddp._buckets) + (1 if use_scaler else 0)  # the buckets' all-reduces, and found_inf's MAX
    for k in range(STEPS):
        epoch, j = divmod(k, per_epoch)
        sampler.set_epoch(epoch)
        whole.set_epoch(epoch)
        mine = list(sampler)[j * local:(j + 1) * local]
        batch = list(whole)[j * GLOBAL_BATCH:(j + 1) * GLOBAL_BATCH]
        assert sorted(batch) == sorted(sum(comm.allgather(mine), [])), "the ranks' shares are not the global batch"
        idx = ta.tensor(np.array(mine), device=device)
        x, y = x_all[idx], y_all[idx]
        calls = sum(nccl_calls.values()) if nccl_calls is not None else 0
        step(x, y)
        if nccl_calls is not None and k >= 4:  # from the first replay on, when graphed
            assert sum(nccl_calls.values()) - calls == per_step, (k, sum(nccl_calls.values()) - calls, per_step)
        ref_idx = ta.tensor(np.array(batch), device=device)
        ref_step(x_all[ref_idx], y_all[ref_idx])
        check_equal_everywhere(comm, model, f"step {k}")
        if scaler is not None:
            scales.append(scaler.get_scale())
    worst = max(float(np.max(np.abs(p.detach().float().cpu().numpy() - q.detach().float().cpu().numpy())))
                for p, q in zip(model.parameters(), ref.parameters()))
    if worst > TOLERANCE[dtype]:
        raise AssertionError(f"DDP drifted from the one-process run by {worst} > {TOLERANCE[dtype]}")
    if scaler is not None:
        assert all(s == scales for s in comm.allgather(scales)), "scale sequences differ"
    if args.graphed:
        assert step.captured and step.calls == STEPS
    print(f"OK {size} ranks {dtype} {level} {optimizer} max|ddp - one process| = {worst:.2e}", flush=True)


def inject(args, comm, device: str) -> None:
    """Rank 1 alone overflows at INJECT_STEPS: every rank skips those steps, with one scale sequence.

    Eager: an inf written into rank 1's gradient after DDP's averaging (only GradScaler's found_inf
    all-reduce can tell the other ranks). Graphed: a huge value in rank 1's input batch (float16
    overflows in its forward; the captured NCCL all-reduces carry it to every rank).
    """
    rank, size = dist.get_rank(), dist.get_world_size()
    x_all, y_all = data(device)
    model, _ = make_model(5, device, "float16", "O1", "sgd")
    ddp = DDP(model)
    opt = make_optimizer(ddp.parameters(), "sgd", False)
    scaler = ta.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=8)
    local = GLOBAL_BATCH // size
    device_type = device.split(":")[0]

    def train_step(x, y):
        opt.zero_grad()
        with ta.autocast(device_type, dtype=ta.float16):
            loss = F.cross_entropy(ddp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def eager_step(x, y, poison):
        opt.zero_grad()
        with ta.autocast(device_type, dtype=ta.float16):
            loss = F.cross_entropy(ddp(x), y)
        scaler.scale(loss).backward()
        if poison:
            model[0].weight.grad.array[0, 0] = float("inf")  # after DDP's averaging: only this rank sees it
        scaler.step(opt)
        scaler.update()

    step = ta.cuda.make_graphed_step(train_step, (x_all[:local], y_all[:local])) if args.graphed else None
    skipped, scales = [], []
    for k in range(20):
        idx = ta.tensor((np.arange(local) + (k * size + rank) * local) % SAMPLES, device=device)
        x, y = x_all[idx], y_all[idx]
        poison = k in INJECT_STEPS and rank == 1
        before = param_bytes(model)
        if step is not None:
            if poison:
                x = x.clone()
                x[0, 0] = 1e6  # inf in float16
            step(x, y)
        else:
            eager_step(x, y, poison)
        skipped.append(bool(scaler.last_step.skipped))
        scales.append(scaler.get_scale())
        if skipped[-1]:
            assert param_bytes(model) == before, f"step {k} was skipped but the parameters moved"
        check_equal_everywhere(comm, model, f"inject step {k}")
    for k in INJECT_STEPS:
        assert skipped[k], f"rank {rank} did not skip step {k}"
    assert all(s == skipped for s in comm.allgather(skipped)), "ranks skipped different steps"
    assert all(s == scales for s in comm.allgather(scales)), "scale sequences differ"
    mode = "graphed" if args.graphed else "eager"
    print(f"OK inject {mode} {size} ranks skipped={[k for k, s in enumerate(skipped) if s]} scales={scales[:8]}",
          flush=True)


def main() -> None:
    args = parse()
    comm = MPI.COMM_WORLD
    if args.collectives:  # one launch for both: each rank process costs seconds of imports and JIT loading
        nccl_checks.strict() if args.backend == "nccl" else collectives.main()
    if args.backend == "nccl":
        local_rank = int(os.environ["LOCAL_RANK"])
        ta.cuda.set_device(local_rank)  # one device per rank: the stand-in gives each local rank its own
        device = f"cuda:{local_rank}"
    else:
        device = "cpu"
    dist.init_process_group(args.backend)
    if args.inject:
        inject(args, comm, device)
    if args.configs:
        configs = [(d, l, o) for d in ("float16", "bfloat16") for l in ("O1", "O2") for o in ("sgd", "adam")]
        if args.configs != "all":
            configs = [c for c in configs if "-".join(c) in args.configs.split(",")]
        for config in configs:
            train(args, comm, device, *config)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
