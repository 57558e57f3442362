"""Run on 2 ranks by tests/porting/test_distributed.py: DDP(find_unused_parameters=True) against PyTorch 2.13's gradients.

A model of three Linear(2, 1) layers: ``a`` used on every rank, ``b`` on rank 0 only, ``c`` on none. The
expected values are PyTorch 2.13.0's (gloo, 2 ranks, the same model and inputs): after the first backward
a.weight.grad [[1.5, 1.5]], b.weight.grad [[0.5, 0.5]] on both ranks (rank 1 contributes zeros), c's None;
after a second backward without zeroing, b's [[1.0, 1.0]] and c's still None; a gradient set on c by hand
stays [[5.0, 5.0]]. AdamW then leaves c's weight as it was (no gradient: no weight decay).
Prints "OK unused <rank>".
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
import tinyamp.distributed as dist
from tinyamp.nn.parallel import DistributedDataParallel as DDP


class Model(ta.nn.Module):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank
        self.a, self.b, self.c = ta.nn.Linear(2, 1), ta.nn.Linear(2, 1), ta.nn.Linear(2, 1)

    def forward(self, x):
        out = self.a(x)
        return out + self.b(x) if self.rank == 0 else out


def grad(p):
    return None if p.grad is None else p.grad.numpy().tolist()


dist.init_process_group("gloo")
rank = dist.get_rank()
ta.manual_seed(0)
inner = Model(rank)
model = DDP(inner, find_unused_parameters=True)
x = ta.ones(1, 2) * (rank + 1)
model(x).sum().backward()
assert grad(inner.a.weight) == [[1.5, 1.5]], grad(inner.a.weight)
assert grad(inner.b.weight) == [[0.5, 0.5]], grad(inner.b.weight)
assert inner.c.weight.grad is None and inner.c.bias.grad is None, grad(inner.c.weight)
model(x).sum().backward()
assert grad(inner.b.weight) == [[1.0, 1.0]], grad(inner.b.weight)
assert inner.c.weight.grad is None, grad(inner.c.weight)
inner.c.weight.grad = ta.full((1, 2), 5.0)
model(x).sum().backward()
assert grad(inner.c.weight) == [[5.0, 5.0]], grad(inner.c.weight)
inner.c.weight.grad = None
with ta.no_grad():
    inner.c.weight.fill_(1.8)
opt = ta.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
opt.zero_grad()
model(x).sum().backward()
opt.step()
assert np.array_equal(inner.c.weight.detach().numpy(), np.full((1, 2), 1.8, np.float32)), inner.c.weight  # not 1.6245
dist.destroy_process_group()
print(f"OK unused {rank}", flush=True)
