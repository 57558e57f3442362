"""Data-parallel AMP training of an MNIST MLP: DistributedDataParallel, DistributedSampler, resumable checkpoints.

Written as a torchrun script (PyTorch's DDP recipe with ``import tinyamp as ta``)
and started by tinyamp's launcher:

    python -m tinyamp.distributed.run --nproc-per-node 2 examples/mnist_ddp.py --epochs 2
    python -m tinyamp.distributed.run --nproc-per-node 2 examples/mnist_ddp.py --epochs 4 --resume   # epochs 2-3

Every rank trains on its DistributedSampler share of the bundled MNIST subset
(``--batch-size`` per rank) with autocast and a GradScaler; gradients are
averaged by DDP. Rank 0 alone writes the checkpoint (model without DDP's
``module.`` prefix, optimizer, scaler, epoch) after each epoch. ``--resume``
loads it on every rank and continues from the next epoch; without it a run
starts from scratch (and says so when it will overwrite a checkpoint).
``--backend nccl`` with ``--device cuda`` trains on one GPU per rank
(``cuda:LOCAL_RANK``). As in the other examples, every flag is checked before
training: a bad one stops every rank with one line (rank 0's) and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common, also when imported by tests

import tinyamp as ta  # noqa: E402
import tinyamp.nn.functional as F  # noqa: E402
from tinyamp.data import load_mnist  # noqa: E402
from tinyamp.distributed import barrier, destroy_process_group, get_rank, get_world_size, init_process_group  # noqa: E402
from tinyamp.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from tinyamp.serialization import CheckpointError  # noqa: E402
from tinyamp.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
import _common  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = _common.make_parser(os.path.basename(__file__), __doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=_common.positive_int, default=2, help="epochs in all (with --resume: up to)")
    p.add_argument("--batch-size", type=_common.positive_int, default=64, help="per rank")
    p.add_argument("--hidden", type=_common.positive_int, default=256)
    p.add_argument("--lr", type=_common.positive_float, default=0.05)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--backend", default="gloo", choices=["gloo", "mpi", "nccl"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--checkpoint", metavar="PATH", default="mnist_ddp.ckpt",
                   help="written by rank 0 after each epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint (it must exist)")
    p.add_argument("--log-every", type=_common.positive_int, default=None, metavar="N",
                   help="a progress line every N steps (default: about 10 a run, and at least every "
                        f"{_common.PROGRESS_INTERVAL_S:g} s)")
    return p


def checkpoint_problem(path: str) -> "str | None":
    """Why rank 0 could not write ``path`` at the end of an epoch, found without writing (every rank asks)."""
    if os.path.isdir(path):
        return "is a folder; give a file name"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot be written: {'it is under a file' if os.path.exists(folder) else 'its folder does not exist'}"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "cannot be written (permission denied)"
    return None


def parse(argv: "list[str] | None" = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.prog = parser.prog
    if args.device == "cuda" and not ta.cuda.is_available():
        parser.error("--device cuda: no usable CUDA GPU (install CuPy with a driver, or use --device cpu)")
    if args.backend == "nccl" and args.device != "cuda":
        parser.error("--backend nccl needs --device cuda (NCCL reduces CUDA tensors; gloo/mpi reduce CPU ones)")
    problem = checkpoint_problem(args.checkpoint)
    if problem:
        parser.error(f"--checkpoint {args.checkpoint}: {problem}")
    if args.resume and not os.path.isfile(args.checkpoint):
        parser.error(f"--resume: {args.checkpoint} does not exist (run once without --resume to make it)")
    return args


def resume(args: argparse.Namespace, model: ta.nn.Module, optimizer: ta.optim.Optimizer,
           scaler: ta.amp.GradScaler, device: str) -> int:
    """The first epoch to train: 0, or with ``--resume`` the one after the checkpoint's (every rank loads it)."""
    if not args.resume:
        if os.path.exists(args.checkpoint) and _common.speaks():
            print(f"{args.checkpoint} exists: training from scratch, overwriting it after epoch 0 "
                  f"(--resume continues from it)", flush=True)
        return 0
    try:
        state = ta.load(args.checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        start = int(state["epoch"]) + 1
    except CheckpointError as exc:  # damaged, or not a checkpoint
        _common.fail(args, f"--resume: {args.checkpoint} cannot be read: {exc}")
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:  # a model of another shape, another file
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[1]}" + (" ..." if len(lines) > 2 else "")
        _common.fail(args, f"--resume: {args.checkpoint} does not fit this run (other flags?): {detail}")
    if start >= args.epochs:
        _common.fail(args, f"--resume: {args.checkpoint} holds epochs 0-{start - 1} already; nothing to train "
                           f"with --epochs {args.epochs} (give more)")
    if _common.speaks():
        print(f"resumed from {args.checkpoint} at epoch {start}", flush=True)
    return start


def main(argv: "list[str] | None" = None) -> None:
    args = parse(argv)  # every flag checked on every rank before the process group forms
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
    start = resume(args, model, optimizer, scaler, device)

    say = print if rank == 0 else (lambda *parts, **kw: None)
    say(f"tinyamp MNIST DDP | {world} ranks on {args.device} ({args.backend}) | MLP 784-{args.hidden}-10 | "
        f"AMP {args.dtype}{', dynamic loss scale' if scaler.is_enabled() else ''} | epochs {start}-{args.epochs - 1} "
        f"of {len(loader)} steps, batch {args.batch_size} per rank", flush=True)
    if rank == 0 and _common.device_note(ta.device(device)):
        say(_common.device_note(ta.device(device)), flush=True)
    total = (args.epochs - start) * len(loader)
    progress = _common.Progress(total, sys.stdout, args.log_every or max(1, total // 10), bar=False,
                                per_epoch=len(loader))
    step = skipped = 0
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
            step += 1
            if rank == 0:  # the loss and the skip decision read on the host: rank 0's progress only
                skipped += bool(scaler.is_enabled() and scaler.last_step.skipped)
                progress.update(step, loss.item(), scaler.get_scale() if scaler.is_enabled() else None, skipped,
                                epoch=f"{epoch}/{args.epochs - 1}")
        ddp.eval()
        with ta.no_grad():
            accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f} test accuracy {accuracy:.3f} (world size {world})",
                  flush=True)
            ta.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scaler": scaler.state_dict(), "epoch": epoch}, args.checkpoint)
        barrier()  # nobody resumes from a checkpoint rank 0 is still writing
    if rank == 0:
        print(f"checkpoint: {args.checkpoint} (epoch {args.epochs - 1}; --resume with more --epochs continues)",
              flush=True)
    destroy_process_group()


if __name__ == "__main__":
    main()
