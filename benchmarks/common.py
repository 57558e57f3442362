"""Shared benchmark helpers: timing with warm-ups, medians and spread, JSON output, a GPU spin kernel, the MLP
training step the GPU benchmarks time.

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
