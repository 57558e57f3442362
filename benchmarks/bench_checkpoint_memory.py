"""What activation checkpointing saves: device bytes kept after forward and the peak, with and without it.

A stack of ``depth`` blocks (Linear(width, 4*width), GELU, Linear(4*width, width), residual), batch
``batch``, one training step under float16 autocast, on the CUDA stand-in (its allocator counts what
a GPU's would: ``ta.cuda.memory_allocated``/``max_memory_allocated``), three ways: no checkpointing,
``checkpoint`` around each block, ``checkpoint_sequential`` in two segments. Bytes are counts (the same
on every machine), not timings.

    python benchmarks/bench_checkpoint_memory.py [--json benchmarks/bench_checkpoint_memory.json]
"""

from __future__ import annotations

import argparse

import tinyamp as ta
from common import machine, table, write_json
from tinyamp import backend, nn
from tinyamp.utils.checkpoint import checkpoint, checkpoint_sequential


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: ta.Tensor) -> ta.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(x)))


def measure(mode: str, depth: int, width: int, batch: int) -> dict:
    ta.manual_seed(0)
    model = nn.Sequential(*[Block(width) for _ in range(depth)]).to("cuda")
    x = ta.randn(batch, width, device="cuda", requires_grad=True)
    ta.amp.clear_autocast_cache()
    start = ta.cuda.memory_allocated()
    ta.cuda.reset_peak_memory_stats()
    with ta.autocast("cuda", dtype=ta.float16):
        if mode == "none":
            y = model(x)
        elif mode == "per block":
            y = x
            for block in model:
                y = checkpoint(block, y, use_reentrant=False)
        else:
            y = checkpoint_sequential(model, 2, x, use_reentrant=False)
        loss = y.float().square().mean()
    kept = ta.cuda.memory_allocated() - start
    loss.backward()
    peak = ta.cuda.max_memory_allocated() - start
    return {"mode": mode, "kept_after_forward": kept, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with backend.use_cuda_standin():
        results = [measure(mode, args.depth, args.width, args.batch) for mode in ("none", "per block", "sequential")]
    base = results[0]
    rows = [[r["mode"], f"{r['kept_after_forward']:,}", f"{r['kept_after_forward'] / base['kept_after_forward']:.2f}",
             f"{r['peak']:,}", f"{r['peak'] / base['peak']:.2f}"] for r in results]
    print(f"depth {args.depth}, width {args.width}, batch {args.batch}, float16 autocast, CUDA stand-in")
    print(table(rows, ["checkpointing", "bytes kept after forward", "x none", "peak bytes (step)", "x none"]))
    if args.json:
        write_json(args.json, {"machine": machine(), "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
