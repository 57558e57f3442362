"""Data-parallel AMP training of an MNIST MLP: DistributedDataParallel, DistributedSampler, resumable checkpoints.

Written as a torchrun script (PyTorch's DDP recipe with ``import tinyamp as ta``)
and started by tinyamp's launcher:

    python -m tinyamp.distributed.run --nproc-per-node 2 examples/mnist_ddp.py --epochs 2
    python -m tinyamp.distributed.run --nproc-per-node 2 examples/mnist_ddp.py --epochs 4   # resumes at epoch 2

Every rank trains on its DistributedSampler share of the bundled MNIST subset
(``--batch-size`` per rank) with autocast and a GradScaler; gradients are
averaged by DDP. Rank 0 alone writes the checkpoint (model without DDP's
``module.`` prefix, optimizer, scaler, epoch) after each epoch; a restarted job
loads it on every rank and continues from the next epoch. ``--backend nccl``
with ``--device cuda`` trains on one GPU per rank (``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import argparse
import os

import tinyamp as ta
import tinyamp.nn.functional as F
from tinyamp.data import load_mnist
from tinyamp.distributed import barrier, destroy_process_group, get_rank, get_world_size, init_process_group
from tinyamp.nn.parallel import DistributedDataParallel as DDP
from tinyamp.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--backend", default="gloo", choices=["gloo", "mpi", "nccl"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--checkpoint", default="mnist_ddp.ckpt")
    return parser.parse_args()


def main() -> None:
    args = parse()
    init_process_group(backend=args.backend)
    rank, world = get_rank(), get_world_size()
    if args.device == "cuda":
        local_rank = int(os.environ["LOCAL_RANK"])
        ta.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    else:
        device = "cpu"
    images, labels = load_mnist(flatten=True, normalize=True)
    train_set = TensorDataset(ta.tensor(images, device=device), ta.tensor(labels, device=device))
    test_images, test_labels = load_mnist(split="test", flatten=True, normalize=True)
    test_x, test_y = ta.tensor(test_images, device=device), ta.tensor(test_labels, device=device)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    ta.manual_seed(rank)  # different on purpose: DDP broadcasts rank 0's weights
    model = ta.nn.Sequential(ta.nn.Linear(784, args.hidden), ta.nn.ReLU(), ta.nn.Linear(args.hidden, 10)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if args.device == "cuda" else None)
    optimizer = ta.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    scaler = ta.amp.GradScaler(args.device, enabled=args.dtype == "float16")
    low = getattr(ta, args.dtype)

    start = 0
    if os.path.exists(args.checkpoint):  # every rank reads rank 0's checkpoint
        state = ta.load(args.checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from {args.checkpoint} at epoch {start}", flush=True)

    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for x, y in loader:
            optimizer.zero_grad()
            with ta.autocast(args.device, dtype=low):
                loss = F.cross_entropy(ddp(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        ddp.eval()
        with ta.no_grad():
            accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f} test accuracy {accuracy:.3f} (world size {world})",
                  flush=True)
            ta.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scaler": scaler.state_dict(), "epoch": epoch}, args.checkpoint)
        barrier()  # nobody resumes from a checkpoint rank 0 is still writing
    destroy_process_group()


if __name__ == "__main__":
    main()
