"""Real training code using the issue-22 utilities runs by the import alone (``import tinyamp as torch``).

A torchvision/timm-style transformer-ish classifier with activation checkpointing per block, the
nanoGPT/timm TF32 lines, a warm-up ``SequentialLR``, an EMA through ``AveragedModel``
(``get_ema_multi_avg_fn``), forum-style gradient hooks on every block, and torchvision's
checkpoint/resume of the generator state: written as PyTorch code, run under AMP with a
GradScaler. Checked: it trains, checkpointing changes no bit of it, and a resume from the saved
state replays the same step.
"""

from __future__ import annotations

import numpy as np

import tinyamp as torch
import tinyamp.nn as nn
import tinyamp.nn.functional as F
from tinyamp.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from tinyamp.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tinyamp.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim: int = 16, depth: int = 3, classes: int = 4, grad_checkpointing: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)
        self.grad_checkpointing = grad_checkpointing

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x)


def train(grad_checkpointing: bool, steps: int = 5) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    try:
        torch.manual_seed(0)
        model = Net(grad_checkpointing=grad_checkpointing)
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = SequentialLR(optimizer, [LinearLR(optimizer, start_factor=0.1, total_iters=2),
                                             CosineAnnealingLR(optimizer, T_max=steps)], milestones=[2])
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        grad_norms = []
        for block in model.blocks:
            block.register_full_backward_hook(lambda m, gin, gout: grad_norms.append(gout[0].float().norm().item()))
        data = [(torch.randn(12, 8), torch.randint(0, 4, (12,))) for _ in range(steps)]
        losses, saved = [], None
        for step, (x, y) in enumerate(data):
            if step == 3:
                saved = {"rng": torch.get_rng_state(), "model": {k: v.clone() for k, v in model.state_dict().items()}}
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            ema.update_parameters(model)
            losses.append(loss.item())
        return {"losses": losses, "grad_norms": grad_norms, "ema": ema, "model": model, "saved": saved,
                "data": data, "lr": optimizer.param_groups[0]["lr"]}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = False


def test_the_ported_loop_trains_and_checkpointing_changes_no_bit() -> None:
    plain, ckpt = train(False), train(True)
    assert all(np.isfinite(plain["losses"]))
    assert plain["losses"] == ckpt["losses"]
    assert plain["grad_norms"] == ckpt["grad_norms"] and len(plain["grad_norms"]) == 3 * 5
    assert int(ckpt["ema"].n_averaged.item()) == 5
    for a, b in zip(plain["ema"].state_dict().values(), ckpt["ema"].state_dict().values()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert plain["lr"] == ckpt["lr"]


def test_a_resume_with_the_saved_generator_state_replays_the_step() -> None:
    run = train(True)
    model = run["model"]
    model.load_state_dict(run["saved"]["model"])
    torch.set_rng_state(run["saved"]["rng"])
    x, y = run["data"][3]
    with torch.autocast("cpu", dtype=torch.float16):
        replayed = F.cross_entropy(model(x), y).item()
    assert replayed == run["losses"][3]  # the same dropout masks: the same loss
