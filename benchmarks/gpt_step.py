"""A nanoGPT-shaped training step written once, run by tinyamp and by PyTorch (``lib`` is either module).

Token + position embeddings, ``blocks`` pre-norm blocks (``nn.LayerNorm``, one QKV ``nn.Linear``,
``F.scaled_dot_product_attention(is_causal=True)``, a projection, an ``nn.GELU()`` MLP of width 4C,
residuals), a final ``nn.LayerNorm``, a head, ``F.cross_entropy``, AdamW and a GradScaler. The same
source runs on both libraries (tinyamp ports by the import rule), so the two steps do the same work.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np


def build(lib: Any, *, vocab: int, block_size: int, channels: int, heads: int, blocks: int) -> Any:
    """The GPT model as a ``lib.nn.Module`` (its classes defined on ``lib``)."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(channels)
            self.qkv = nn.Linear(channels, 3 * channels)
            self.proj = nn.Linear(channels, channels)
            self.ln_2 = nn.LayerNorm(channels)
            self.fc = nn.Linear(channels, 4 * channels)
            self.gelu = nn.GELU()
            self.fc_out = nn.Linear(4 * channels, channels)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.fc_out(self.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, channels)
            self.wpe = nn.Embedding(block_size, channels)
            self.h = nn.ModuleList([Block() for _ in range(blocks)])
            self.ln_f = nn.LayerNorm(channels)
            self.head = nn.Linear(channels, vocab, bias=False)

        def forward(self, idx: Any, targets: Any) -> Any:
            pos = lib.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def training(lib: Any, *, device: str = "cpu", dtype: Any = None, batch: int, vocab: int, block_size: int,
             channels: int, heads: int, blocks: int, seed: int = 0) -> SimpleNamespace:
    """Model, AdamW, GradScaler and a random batch on ``device``; ``step()`` runs one training step.

    ``dtype`` None is float32; float16/bfloat16 is autocast of that dtype (the scaler is enabled for
    float16 only, as PyTorch's recipe: bfloat16 needs no loss scaling).
    """
    lib.manual_seed(seed)
    model = build(lib, vocab=vocab, block_size=block_size, channels=channels, heads=heads,
                  blocks=blocks).to(device)
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    amp = dtype is not None
    scaler = lib.amp.GradScaler(device, enabled=amp and dtype == lib.float16)
    rng = np.random.default_rng(seed)
    idx = lib.tensor(rng.integers(0, vocab, (batch, block_size)), device=device)
    targets = lib.tensor(rng.integers(0, vocab, (batch, block_size)), device=device)
    device_type = "cuda" if "cuda" in str(device) else "cpu"

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        with lib.autocast(device_type=device_type, dtype=dtype or lib.float16, enabled=amp):
            loss = model(idx, targets)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return SimpleNamespace(model=model, opt=opt, scaler=scaler, idx=idx, targets=targets, step=step)
