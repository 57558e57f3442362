"""A small nanoGPT-style torchrun script (written for tinyamp's tests, not nanoGPT's code).

Its structure is nanoGPT's train.py: DDP is detected from RANK, ``init_process_group(backend)`` comes
before ``set_device(cuda:LOCAL_RANK)``, the model is wrapped as ``DDP(model, device_ids=[local_rank])``,
gradient accumulation toggles ``require_backward_grad_sync`` on the last micro-step, and the step is
autocast + GradScaler + unscale_ + clip_grad_norm_. Every process draws the same global batch each
iteration; with W ranks and ACCUM micro-steps, micro-step m of rank r takes rows (m * W + r)::(ACCUM * W),
so one process with ACCUM * W micro-steps sums exactly the same examples. Prints "loss <iter> <value>".

Usage: gpt_style.py --backend=mpi|nccl --accum=N (the global number of micro-batches, divided by the ranks)
"""

from __future__ import annotations

import os
import sys

import numpy as np

import tinyamp as torch
import tinyamp.nn as nn
from tinyamp.distributed import destroy_process_group, init_process_group
from tinyamp.nn import functional as F
from tinyamp.nn.parallel import DistributedDataParallel as DDP

options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
backend = options.get("backend", "mpi")
gradient_accumulation_steps = int(options.get("accum", "2"))
ITERS, BATCH, BLOCK, VOCAB, EMBD = 6, 8, 16, 32, 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(EMBD)
        self.qkv = nn.Linear(EMBD, 3 * EMBD)
        self.proj = nn.Linear(EMBD, EMBD)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(EMBD, dim=2)
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(x)


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.block = Block()
        self.ln_f = nn.LayerNorm(EMBD)
        self.head = nn.Linear(EMBD, VOCAB, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.block(self.wte(idx) + self.wpe(pos))
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_rank, ddp_local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    ddp_rank, ddp_world_size, master_process = 0, 1, True
    device = "cuda" if backend == "nccl" else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
torch.manual_seed(1337 + ddp_rank)  # different on every rank: DDP broadcasts rank 0's weights
model = TinyGPT().to(device)
scaler = torch.amp.GradScaler(device_type, init_scale=2.0 ** 10)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if backend == "nccl" else None)
rng = np.random.default_rng(0)  # the same on every rank: each iteration's global batch
micro_batches = gradient_accumulation_steps * ddp_world_size
for it in range(ITERS):
    tokens = (np.arange(BLOCK + 1)[None, :] + rng.integers(0, VOCAB, (BATCH * micro_batches, 1))) % VOCAB
    total = 0.0
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        rows = tokens[micro_step * ddp_world_size + ddp_rank::micro_batches]
        X = torch.from_numpy(rows[:, :-1].astype(np.int64)).to(device)
        Y = torch.from_numpy(rows[:, 1:].astype(np.int64)).to(device)
        with torch.amp.autocast(device_type=device_type, dtype=torch.float16):
            logits, loss = model(X, Y)
            loss = loss / micro_batches * ddp_world_size
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if ddp:  # the global batch's loss: this rank's share summed over the ranks
        t = torch.tensor([total], device=device)
        torch.distributed.all_reduce(t)
        total = t.item() / ddp_world_size
    if master_process:
        print(f"loss {it} {total:.6f}", flush=True)
if ddp:
    destroy_process_group()
