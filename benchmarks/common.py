"""Shared benchmark helpers: timing with warm-ups, medians and spread, JSON output, a GPU spin kernel, the MLP
training step the GPU benchmarks time, the GPT training step of issue 28.

Timing is measured here and never asserted in tests. Set
``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296`` for stable
CPU numbers (glibc otherwise returns large buffers to the OS every step; see
shared/notes/cpu-baselines.md).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np


def timeit(fn: Callable[[], object], repeats: int = 7, warmup: int = 3, min_time: float = 0.2,
           sync: Callable[[], None] | None = None) -> dict:
    """Median/min/max seconds per call of ``fn`` over ``repeats`` calibrated rounds."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    start = time.perf_counter()
    fn()
    if sync:
        sync()
    one = max(time.perf_counter() - start, 1e-7)
    inner = max(1, int(min_time / one))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - start) / inner)
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "repeats": repeats, "inner": inner}


def interleaved(cases: dict[str, Callable[[], object]], rounds: int = 5, **kwargs: object) -> dict:
    """Time several cases in interleaved rounds; per case, the median of the round medians."""
    per_case: dict[str, list] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            per_case[name].append(timeit(fn, **kwargs))
    return {name: {"median": statistics.median(r["median"] for r in results),
                   "min": min(r["min"] for r in results),
                   "max": max(r["max"] for r in results),
                   "round_medians": [r["median"] for r in results]}
            for name, results in per_case.items()}


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "date": time.strftime("%Y-%m-%d"),
            "malloc_thresholds_pinned": "MALLOC_MMAP_THRESHOLD_" in os.environ}


def write_json(path: str, payload: dict) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"wrote {path}")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


_SPIN = r"""extern "C" __global__ void tinyamp_bench_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}"""


def gpu_spin(cp: object, cycles: int) -> None:
    """Keep a real GPU busy for ``cycles`` clock cycles (one thread; ~2e9 a second), so the host's work after
    this call is timed or queued while the GPU waits for nothing."""
    cp.RawKernel(_SPIN, "tinyamp_bench_spin")((1,), (1,), (np.int64(cycles),))  # type: ignore[attr-defined]


def mlp_training(ta: Any, batch: int, hidden: int, device: str, *, inputs: int = 784, amp: bool = True
                 ) -> SimpleNamespace:
    """MLP inputs-hidden-10, SGD momentum 0.9, GradScaler (enabled with ``amp``) and a random batch on ``device``
    (``ta`` is the tinyamp module, imported by the caller). ``step(x, y)`` is one training step, float16
    autocast with ``amp``, returning the loss; the namespace also holds model, opt, scaler, x and y."""
    nn = ta.nn
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    opt = ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = ta.amp.GradScaler(enabled=amp)
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.random((batch, inputs), dtype=np.float32), device=device)
    y = ta.tensor(rng.integers(0, 10, batch), device=device)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        with ta.amp.autocast(device_type=device, dtype=ta.float16, enabled=amp):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return SimpleNamespace(model=model, opt=opt, scaler=scaler, x=x, y=y, step=step)


def gpt_training(ta: Any, *, blocks: int = 4, channels: int = 128, heads: int = 4, seq: int = 64, batch: int = 4,
                 vocab: int = 512, device: str = "cpu", amp: bool = True, dtype: Any = None,
                 approximate: str = "none", seed: int = 0) -> SimpleNamespace:
    """The nanoGPT-shaped step of issue 28 (``ta`` is the tinyamp or torch module, imported by the caller).

    Token and position embeddings, ``blocks`` pre-norm blocks (LayerNorm, one QKV ``Linear``,
    ``scaled_dot_product_attention(is_causal=True)``, projection, a ``GELU(approximate)`` MLP of width
    4C, residuals), a final LayerNorm, the head, ``cross_entropy``, AdamW and a GradScaler (enabled
    with ``amp`` and float16). ``step(idx, targets)`` is one training step under autocast to ``dtype``
    (default float16) when ``amp``; the namespace holds model, opt, scaler, idx, targets, step and
    ``forward(idx, targets)`` (the loss under autocast: the step's forward phase).
    """
    nn, functional = ta.nn, ta.nn.functional
    dtype = ta.float16 if dtype is None else dtype
    head_dim = channels // heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
            self.qkv, self.proj = nn.Linear(channels, 3 * channels), nn.Linear(channels, channels)
            self.fc, self.gelu = nn.Linear(channels, 4 * channels), nn.GELU(approximate=approximate)
            self.out = nn.Linear(4 * channels, channels)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.reshape(b, t, heads, head_dim).transpose(1, 2) for z in (q, k, v))
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(self.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, channels), nn.Embedding(seq, channels)
            self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
            self.ln, self.head = nn.LayerNorm(channels), nn.Linear(channels, vocab)

        def forward(self, idx: Any) -> Any:
            x = self.tokens(idx) + self.positions(ta.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    ta.manual_seed(seed)
    model = GPT().to(device)
    opt = ta.optim.AdamW(model.parameters(), lr=3e-4)
    # The scaler's device as the model's: torch.amp.GradScaler() means CUDA, and turns itself off on a CPU.
    scaler = ta.amp.GradScaler("cuda" if "cuda" in str(device) else "cpu", enabled=amp and dtype == ta.float16)
    rng = np.random.default_rng(seed)
    idx = ta.tensor(rng.integers(0, vocab, (batch, seq)), device=device)
    targets = ta.tensor(rng.integers(0, vocab, (batch, seq)), device=device)

    def forward(idx: Any, targets: Any) -> Any:
        """The loss: the model and cross-entropy under autocast (the step's forward phase)."""
        with ta.amp.autocast(device_type=device, dtype=dtype, enabled=amp):
            logits = model(idx)
            return functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    def step(idx: Any, targets: Any) -> Any:
        opt.zero_grad()
        loss = forward(idx, targets)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return SimpleNamespace(model=model, opt=opt, scaler=scaler, idx=idx, targets=targets, forward=forward,
                           step=step)
