"""GPU benchmark (issue 6): float16 GEMM against torch, the MNIST MLP step at four precisions.

Measured side by side in one process on one GPU:

- GEMM at 4096^3 and 8192^3: tinyamp's ``gemm`` in float16 (cuBLAS GemmEx,
  CUBLAS_COMPUTE_32F) against ``torch.matmul`` in float16, in TFLOP/s.
- One training step of the MLP 784-8192-10 (SGD, momentum 0.9) at batch 4096
  and 8192: tinyamp float32, tinyamp AMP O1 (autocast float16 + GradScaler),
  tinyamp AMP O1 captured once and replayed as one CUDA graph per step
  (``ta.cuda.make_graphed_step``, mode ``amp-graph``: the batch copied into its
  static inputs, then the replay), torch float32, torch ``autocast`` +
  ``GradScaler``. Per case: the median
  step time from CUDA events around each step (warm-up steps first), the
  peak memory of one step (``ta.cuda.max_memory_allocated`` /
  ``torch.cuda.max_memory_allocated``) and tinyamp's host syncs per step
  (``ta.cuda.sync_count``; the loop never reads the loss).
- float32 runs without TF32 on both sides: ``CUPY_TF32=0`` is set before CuPy
  is first used, ``torch.backends.cuda.matmul.allow_tf32 = False``.

Issue 20, on a GPU:

- Kernels at memory speed: each elementwise and reduction kernel of the AMP
  step alone, at the step's shapes (batch x hidden float16 activations, the
  784-wide input batch, the model's parameters), its device time from CUDA
  events while a spin kernel hides the host's launch time
  (:func:`device_samples`): its bytes (read + written, counted as the
  stand-in's byte counters count them) over its median time, next to a
  device-to-device copy of the same bytes (the issue's target: at least 70%
  of the copy's bandwidth), to the kernel
  it replaced (CuPy's ``maximum``, ``cuda_epilogue``'s ReLU backward, CuPy's
  ``sum``) and to PyTorch's kernel for the same work.
- GPU time per step: the CUDA kernels' time in one step, from CUPTI through
  ``torch.profiler`` (the sum over the step's kernels, and each kernel's
  share), for tinyamp's eager and graphed AMP steps and PyTorch's eager
  autocast step and its step captured as a CUDA graph (static loss scale,
  SGD momentum; each call copies the batch into the graph's static inputs, as
  tinyamp's graphed step does, and a "replay only" row without the copies);
  also each step's wall time from CUDA events (the target: tinyamp's graphed
  step's at most PyTorch's, both copying their batch).

Prints a table and the issue's targets, writes JSON with the GPU model, the
driver, CUDA, CuPy and torch versions and the date. ``--dry-run`` runs the
same code on the CPU with tiny sizes (to check the script, not to measure; no
graph row: a CUDA graph needs CUDA); ``--standin`` runs it on the CUDA
stand-in, graph row included.

    python benchmarks/bench_gpu.py [--json PATH] [--repeats N]
    python benchmarks/bench_gpu.py --issue20 / --no-issue20   (issue 20's sections alone / all the others)
    python benchmarks/bench_gpu.py --dry-run
    python benchmarks/bench_gpu.py --standin --no-torch
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

_TF32_BEFORE = os.environ.get("CUPY_TF32")
os.environ["CUPY_TF32"] = "0"  # read once by CuPy, at its first float32 matmul: set before anything runs

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import tinyamp as ta  # noqa: E402
from tinyamp import backend  # noqa: E402
from tinyamp.kernels.cuda import cuda_vector  # noqa: E402
from tinyamp.kernels.cuda import cuda_launch, cuda_optim, cuda_scaler, cuda_epilogue
from tinyamp.kernels.gemm import gemm, gemm_bias  # noqa: E402

TARGETS = {"amp_vs_float32_speedup": 2.0, "amp_vs_torch_autocast_time": 1.25,
           "amp_vs_float32_peak_memory": 0.55,  # issue 20 (issue 6 asked 0.6)
           "gemm_8192_vs_torch": 0.9, "host_syncs_per_step": 0,
           # issue 11: the captured AMP step against torch.autocast eager (both batches), and its speed-up over
           # tinyamp's eager float32 (at the largest batch, 8192)
           "graph_amp_vs_torch_autocast_time": 0.8, "graph_amp_vs_float32_speedup": 2.5,
           # issue 20: every elementwise kernel at 70% of a device-to-device copy's bandwidth; the AMP step's GPU
           # time at most PyTorch eager's, the graphed step's at most PyTorch's captured step
           "kernel_vs_copy_bandwidth": 0.7, "amp_gpu_time_vs_torch_eager": 1.0,
           "graph_gpu_time_vs_torch_graph": 1.0, "graph_wall_vs_torch_graph": 1.0}


def load_torch(device: str) -> Any:
    try:
        import torch  # noqa: PLC0415 - optional comparison
    except ImportError:
        return None
    if device == "cuda" and not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch


# ------------------------------------------------------------------ timing
class Timer:
    """Seconds per call: CUDA events around each call (CuPy's or torch's stream), else perf_counter."""

    def __init__(self, device: str, torch: Any = None) -> None:
        self.device, self.torch = device, torch

    def sync(self) -> None:
        if self.device == "cuda":
            (self.torch.cuda.synchronize if self.torch else backend.cupy().cuda.Device().synchronize)()

    def samples(self, fn: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(repeats):
            if self.device != "cuda":
                start = time.perf_counter()
                fn()
                out.append(time.perf_counter() - start)
            elif self.torch is not None:
                begin, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                begin.record()
                fn()
                end.record()
                end.synchronize()
                out.append(begin.elapsed_time(end) / 1e3)
            else:
                cp = backend.cupy()
                begin, end = cp.cuda.Event(), cp.cuda.Event()
                begin.record()
                fn()
                end.record()
                end.synchronize()
                out.append(cp.cuda.get_elapsed_time(begin, end) / 1e3)
        return out


def device_samples(fn: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
    """Device seconds per call of ``fn`` (its kernels back to back), the host's launch time hidden.

    A spin kernel keeps the GPU busy while the host enqueues every call with a
    CUDA event on each side, so each pair of events brackets the kernels alone
    (timing one call at a time would measure the host's launch time for a kernel
    shorter than it). All work runs on the legacy default stream, PyTorch's too.
    On the stand-in: ``Timer.samples``.
    """
    cp = backend.cupy()
    if backend.standin_active():
        return Timer("cuda").samples(fn, repeats, warmup)
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeats)]
    common.gpu_spin(cp, 100_000_000)  # ~50 ms
    for begin, end in events:
        begin.record()
        fn()
        end.record()
    events[-1][1].synchronize()
    return [cp.cuda.get_elapsed_time(begin, end) / 1e3 for begin, end in events]


def summary(samples: list[float]) -> dict:
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else (samples[0],) * 3
    return {"median_ms": statistics.median(samples) * 1e3, "min_ms": min(samples) * 1e3,
            "iqr_ms": (q3 - q1) * 1e3, "repeats": len(samples)}


# -------------------------------------------------------------------- GEMM
def bench_gemm(device: str, torch: Any, sizes: list[int], repeats: int) -> list[dict]:
    rows = []
    xp = backend.cupy() if device == "cuda" else np
    for n in sizes:
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((n, n), dtype=np.float32).astype(np.float16) for _ in range(2))
        da, db = xp.asarray(a), xp.asarray(b)
        cases = {"tinyamp gemm float16": (Timer(device), lambda: gemm(da, db))}
        if torch is not None:
            ta_, tb_ = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
            cases["torch.matmul float16"] = (Timer(device, torch), lambda: torch.matmul(ta_, tb_))
        for name, (timer, fn) in cases.items():
            stats = summary(timer.samples(fn, repeats, warmup=5))
            rows.append({"case": name, "n": n, **stats, "tflops": 2 * n ** 3 / (stats["median_ms"] / 1e3) / 1e12})
        del da, db
        if device == "cuda":
            backend.cupy().get_default_memory_pool().free_all_blocks()  # 8192^2 operands want the room
    return rows


# --------------------------------------------------------------- MLP steps
def tinyamp_step(mode: str, batch: int, hidden: int, device: str) -> Callable[[], Any]:
    """One training step of ``mode``: "float32", "amp" or "amp-graph" (the AMP step replayed as a CUDA graph)."""
    run = common.mlp_training(ta, batch, hidden, device, amp=mode in ("amp", "amp-graph"))
    x, y = run.x, run.y
    if mode == "amp-graph":
        graphed = ta.cuda.make_graphed_step(run.step, (x, y))  # the batch is copied into its static inputs each call
        return lambda: graphed(x, y)
    return lambda: run.step(x, y)  # holds the model, optimizer and batch: deleting it frees them


def torch_step(torch: Any, mode: str, batch: int, hidden: int, device: str) -> Callable[[], Any]:
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    amp = mode == "amp"
    scaler = torch.amp.GradScaler(device, enabled=amp)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((batch, 784), dtype=np.float32)).to(device)
    y = torch.from_numpy(rng.integers(0, 10, batch)).to(device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def tinyamp_peak(step: Callable[[], Any], device: str) -> tuple[int, int]:
    """(peak bytes during one step, bytes in use between steps)."""
    if device == "cuda":
        backend.cupy().cuda.Device().synchronize()
    ta.cuda.reset_peak_memory_stats()
    resting = ta.cuda.memory_allocated()
    step()
    return ta.cuda.max_memory_allocated(), resting


def torch_peak(torch: Any, step: Callable[[], Any], device: str) -> "tuple[int, int] | tuple[None, None]":
    if device != "cuda":
        return None, None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    resting = torch.cuda.memory_allocated()
    step()
    return torch.cuda.max_memory_allocated(), resting


def bench_mlp(device: str, torch: Any, batches: list[int], hidden: int, repeats: int) -> list[dict]:
    rows = []
    modes = ("float32", "amp", "amp-graph") if device == "cuda" else ("float32", "amp")
    for batch in batches:
        for mode in modes:
            step = tinyamp_step(mode, batch, hidden, device)
            for _ in range(5 if mode == "amp-graph" else 1):  # compiles the kernels, grows the pool; captures
                step()
            peak, resting = tinyamp_peak(step, device)
            syncs, launches = ta.cuda.sync_count(), sum(cuda_launch.launches.values())
            stats = summary(Timer(device).samples(step, repeats, warmup=5))
            steps = repeats + 5
            rows.append({"framework": "tinyamp", "mode": mode, "batch": batch, **stats,
                         "peak_bytes": peak, "resting_bytes": resting,
                         "host_syncs_per_step": (ta.cuda.sync_count() - syncs) / steps,
                         "fused_launches_per_step": (sum(cuda_launch.launches.values()) - launches) / steps})
            del step
            if torch is not None and mode != "amp-graph":
                tstep = torch_step(torch, mode, batch, hidden, device)
                tstep()
                tpeak, tresting = torch_peak(torch, tstep, device)
                stats = summary(Timer(device, torch).samples(tstep, repeats, warmup=5))
                rows.append({"framework": "torch", "mode": mode, "batch": batch, **stats,
                             "peak_bytes": tpeak, "resting_bytes": tresting})
                del tstep
            if device == "cuda":
                backend.cupy().get_default_memory_pool().free_all_blocks()
                if torch is not None:
                    torch.cuda.empty_cache()
    return rows


# ------------------------------------------------- kernels at memory speed (issue 20)
def device_copy(dst: Any, src: Any) -> None:
    """``dst``'s bytes = ``src``'s by cudaMemcpyAsync."""
    dst.data.copy_from_device_async(src.data, src.nbytes)


def kernel_cases(batch: int, hidden: int, torch: Any, inputs: int = 784, classes: int = 10) -> list[tuple]:
    """(kernel, what it replaces or mirrors, callable, bytes read + written) at the AMP step's shapes."""
    cp = backend.cupy()
    f16, f32 = np.float16, np.float32
    rng = np.random.default_rng(0)
    n = batch * hidden

    def device(shape: tuple, dtype: Any) -> Any:
        return cp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)

    h, g = device((batch, hidden), f16), device((batch, hidden), f16)
    x32, x16 = device((batch, inputs), f32), device((batch, inputs), f16)
    w16, b16 = device((hidden, inputs), f16), device((hidden,), f16)
    shapes = [(hidden, inputs), (hidden,), (classes, hidden), (classes,)]
    params = sum(int(np.prod(s)) for s in shapes)
    weights, grads, bufs = ([device(s, f32) for s in shapes] for _ in range(3))
    lows = [w.astype(f16) for w in weights]
    steps = [cp.ones(1, f32) for _ in shapes]  # started: the momentum buffers are read
    found, scale = cp.zeros(1, f32), cp.ones(1, f32)
    hyper = cp.asarray(np.array([1e-9, 0.9, 0.0, 0.0]))  # a tiny lr: the weights barely move between calls
    def partial(chunk_rows: int) -> int:  # the float32 partials, written and read back
        return 4 * hidden * 2 * ((batch + chunk_rows - 1) // chunk_rows)

    cases = [
        ("tinyamp_relu_f16", "relu forward", lambda: cuda_vector.relu(h), 4 * n),
        ("cupy maximum (before)", "relu forward", lambda: cp.maximum(h, 0), 4 * n),
        ("tinyamp_relu_backward_f16", "relu backward", lambda: cuda_vector.relu_backward(g, h), 6 * n),
        ("tinyamp_relu_backward (before)", "relu backward", lambda: cuda_epilogue.relu_backward(g, h), 6 * n),
        ("tinyamp_column_sum_f16_round", "bias gradient",
         lambda: cuda_vector.column_sum(g, f16), 2 * n + partial(cuda_vector.SUM_ROWS) + 2 * hidden),
        ("tinyamp_column_sum_f16_round (64-row chunks)", "bias gradient",
         lambda: cuda_vector.column_sum(g, f16, chunk_rows=64), 2 * n + partial(64) + 2 * hidden),
        ("tinyamp_column_sum_f16_round (32-row chunks)", "bias gradient",
         lambda: cuda_vector.column_sum(g, f16, chunk_rows=32), 2 * n + partial(32) + 2 * hidden),
        ("cupy sum float32 (before)", "bias gradient", lambda: g.sum(axis=0, dtype=f32), 2 * n + 4 * hidden),
        ("tinyamp_convert_f32_f16", "input batch cast", lambda: cuda_vector.convert(x32, f16), 6 * batch * inputs),
        ("tinyamp_convert_f16_f32", "dW widened", lambda: cuda_vector.convert(w16, f32), 6 * hidden * inputs),
        ("tinyamp_convert_f16_f32_by8 (before)", "dW widened",
         lambda: cuda_vector.convert(w16, f32, eight=True), 6 * hidden * inputs),
        ("tinyamp_unscale_f32_f32", "unscale_", lambda: cuda_scaler.unscale_group(grads, grads, scale, found),
         8 * params),
        ("tinyamp_sgd_group_f32_f32_f16", "SGD momentum step",
         lambda: cuda_optim.sgd_group(weights, grads, bufs, steps, lows, found, hyper, nesterov=False,
                                      maximize=False), 22 * params),
        ("gemm_bias (linear 1 forward)", "cuBLASLt GEMM + bias epilogue",
         lambda: gemm_bias(x16, w16, b16, trans_b=True), 2 * (batch * inputs + hidden * inputs + hidden) + 2 * n),
        ("gemm, float16 out, no bias", "the same GEMM alone",
         lambda: gemm(x16, w16, f16, trans_b=True), 2 * (batch * inputs + hidden * inputs) + 2 * n),
    ]
    if torch is not None:
        th, tg = torch.as_tensor(h, device="cuda"), torch.as_tensor(g, device="cuda")
        tx32 = torch.as_tensor(x32, device="cuda")
        cases += [
            ("torch relu", "relu forward", lambda: torch.relu(th), 4 * n),
            ("torch threshold_backward", "relu backward", lambda: torch.ops.aten.threshold_backward(tg, th, 0), 6 * n),
            ("torch sum(0) float16", "bias gradient", lambda: tg.sum(0), 2 * n + 2 * hidden),
            ("torch to(float16)", "input batch cast", lambda: tx32.to(torch.float16), 6 * batch * inputs),
        ]
    return cases


def bench_kernels(device: str, torch: Any, batches: list[int], hidden: int, repeats: int) -> list[dict]:
    """Each kernel's median device time and achieved bandwidth, next to a device-to-device copy of the same bytes."""
    rows = []
    cp = backend.cupy()
    for batch in batches:
        for name, work, fn, nbytes in kernel_cases(batch, hidden, torch):
            stats = summary(device_samples(fn, repeats, warmup=3))
            src, dst = cp.empty(nbytes // 2, np.uint8), cp.empty(nbytes // 2, np.uint8)
            copy = summary(device_samples(lambda: device_copy(dst, src), repeats, warmup=3))
            del src, dst
            bandwidth = nbytes / (stats["median_ms"] / 1e3) / 1e12  # TB/s, bytes read plus written
            rows.append({"kernel": name, "work": work, "batch": batch, "hidden": hidden, "bytes": nbytes, **stats,
                         "tb_per_s": bandwidth, "copy_ms": copy["median_ms"],
                         "vs_copy": copy["median_ms"] / stats["median_ms"]})
        if device == "cuda":
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def kernel_times(torch: Any, step: Callable[[], Any], steps: int = 10) -> "dict | None":
    """GPU time of one step from CUPTI (torch.profiler): the kernels' total and by name, per step."""
    if torch is None:
        return None
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 - optional comparison

    def drain() -> None:
        backend.cupy().cuda.Device().synchronize()
        torch.cuda.synchronize()

    step()
    drain()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        drain()
    by_name: dict[str, list] = {}
    for event in prof.key_averages():
        time_us = getattr(event, "device_time_total", None)
        if time_us is None:
            time_us = getattr(event, "cuda_time_total", 0.0)
        if time_us and getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type):
            by_name[event.key] = [event.count / steps, time_us / steps]
    kernels = {k: {"calls": c, "us": t} for k, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])}
    return {"gpu_us_per_step": sum(v["us"] for v in kernels.values()),
            "kernels_per_step": sum(v["calls"] for v in kernels.values()), "kernels": kernels}


def torch_graphed_step(torch: Any, batch: int, hidden: int, device: str, scale: float = 2.0 ** 16,
                       load: bool = True) -> Callable:
    """PyTorch's AMP step (autocast float16, a static loss scale, SGD momentum) captured as one CUDA graph.

    Each call copies a batch into the graph's static inputs, then replays, as PyTorch's whole-network
    capture recipe does and as tinyamp's graphed step does; ``load=False``: the replay alone."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((batch, 784), dtype=np.float32)).to(device)
    y = torch.from_numpy(rng.integers(0, 10, batch)).to(device)
    static_x, static_y = x.clone(), y.clone()
    params = list(model.parameters())

    def body() -> None:
        with torch.autocast(device_type=device, dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(static_x), static_y)
        (loss * scale).backward()
        torch._foreach_mul_([p.grad for p in params], 1.0 / scale)
        opt.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body()

    def step() -> None:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()

    return step if load else graph.replay


def bench_gpu_time(device: str, torch: Any, batches: list[int], hidden: int, repeats: int) -> list[dict]:
    """GPU time per step (CUPTI) and wall time per step (CUDA events): tinyamp AMP eager and graphed, PyTorch
    autocast eager and captured."""
    rows = []
    for batch in batches:
        makers = {("tinyamp", "amp"): lambda: tinyamp_step("amp", batch, hidden, device),
                  ("tinyamp", "amp-graph"): lambda: tinyamp_step("amp-graph", batch, hidden, device)}
        if torch is not None:
            makers[("torch", "amp")] = lambda: torch_step(torch, "amp", batch, hidden, device)
            makers[("torch", "amp-graph")] = lambda: torch_graphed_step(torch, batch, hidden, device)
            makers[("torch", "amp-graph replay only")] = lambda: torch_graphed_step(torch, batch, hidden, device,
                                                                                    load=False)
        for (framework, mode), make in makers.items():
            try:
                step = make()
                for _ in range(5):
                    step()
                stats = summary(Timer(device, torch if framework == "torch" else None).samples(step, repeats,
                                                                                                warmup=3))
                times = kernel_times(torch, step)
            except Exception as exc:  # noqa: BLE001 - one failing case must not lose the run's other figures
                traceback.print_exc()
                rows.append({"framework": framework, "mode": mode, "batch": batch,
                             "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            rows.append({"framework": framework, "mode": mode, "batch": batch, **stats,
                         "gpu_us_per_step": None if times is None else times["gpu_us_per_step"],
                         "kernels_per_step": None if times is None else times["kernels_per_step"],
                         "kernels": None if times is None else times["kernels"]})
            del step
            if device == "cuda":
                backend.cupy().get_default_memory_pool().free_all_blocks()
                if torch is not None:
                    torch.cuda.empty_cache()
    return rows


# ----------------------------------------------------------------- report
ELEMENTWISE = ("tinyamp_relu_f16", "tinyamp_relu_backward_f16", "tinyamp_column_sum_f16_round",
               "tinyamp_convert_f32_f16", "tinyamp_convert_f16_f32", "tinyamp_unscale_f32_f32",
               "tinyamp_sgd_group_f32_f32_f16")


def issue20_targets(kernel_rows: list[dict], time_rows: list[dict]) -> list[dict]:
    """Issue 20's GPU targets from the kernel and GPU-time rows (None where a side is missing)."""
    out = []
    for batch in sorted({r["batch"] for r in kernel_rows}) or [None]:  # None: not measured (no GPU)
        ours = [r for r in kernel_rows if r["batch"] == batch and r["kernel"] in ELEMENTWISE]
        slowest = min(ours, key=lambda r: r["vs_copy"], default=None)
        value = None if slowest is None else slowest["vs_copy"]
        out.append({"target": "kernel_vs_copy_bandwidth", "batch": batch, "value": value,
                    "goal": f">= {TARGETS['kernel_vs_copy_bandwidth']} (slowest: "
                            f"{slowest and slowest['kernel']})",
                    "met": None if value is None else value >= TARGETS["kernel_vs_copy_bandwidth"]})
    for batch in sorted({r["batch"] for r in time_rows}) or [None]:
        def gpu(framework: str, mode: str, key: str = "gpu_us_per_step") -> "float | None":
            row = next((r for r in time_rows if (r["framework"], r["mode"], r["batch"]) == (framework, mode, batch)),
                       None)
            return row and row.get(key)
        for name, ours, theirs in (("amp_gpu_time_vs_torch_eager", gpu("tinyamp", "amp"), gpu("torch", "amp")),
                                   ("graph_gpu_time_vs_torch_graph", gpu("tinyamp", "amp-graph"),
                                    gpu("torch", "amp-graph")),
                                   ("graph_wall_vs_torch_graph", gpu("tinyamp", "amp-graph", "median_ms"),
                                    gpu("torch", "amp-graph", "median_ms"))):
            value = None if ours is None or not theirs else ours / theirs
            out.append({"target": name, "batch": batch, "value": value, "goal": f"<= {TARGETS[name]}",
                        "met": None if value is None else value <= TARGETS[name]})
    return out


def targets(gemm_rows: list[dict], mlp_rows: list[dict]) -> list[dict]:
    """The issue's targets, computed from the rows (None where a side is missing)."""
    def find(rows: list[dict], **keys: Any) -> "dict | None":
        return next((r for r in rows if all(r.get(k) == v for k, v in keys.items())), None)

    def ratio(a: "float | None", b: "float | None") -> "float | None":
        return None if a is None or not b else a / b

    out = []
    for batch in sorted({r["batch"] for r in mlp_rows}):
        f32, amp = find(mlp_rows, framework="tinyamp", mode="float32", batch=batch), find(
            mlp_rows, framework="tinyamp", mode="amp", batch=batch)
        torch_amp = find(mlp_rows, framework="torch", mode="amp", batch=batch)
        checks = [
            ("amp_vs_float32_speedup", ratio(f32["median_ms"], amp["median_ms"]), ">="),
            ("amp_vs_torch_autocast_time", ratio(amp["median_ms"], torch_amp and torch_amp["median_ms"]), "<="),
            ("amp_vs_float32_peak_memory", ratio(amp["peak_bytes"], f32["peak_bytes"]), "<="),
            ("host_syncs_per_step", amp["host_syncs_per_step"], "<="),
        ]
        graph = find(mlp_rows, framework="tinyamp", mode="amp-graph", batch=batch)  # None on the CPU
        graph_ms = graph and graph["median_ms"]
        checks.append(("graph_amp_vs_torch_autocast_time", ratio(graph_ms, torch_amp and torch_amp["median_ms"]),
                       "<="))
        if batch == max(r["batch"] for r in mlp_rows):  # 8192 in a full run
            checks.append(("graph_amp_vs_float32_speedup", ratio(f32["median_ms"], graph_ms), ">="))
        out += [{"target": name, "batch": batch, "value": value, "goal": f"{op} {TARGETS[name]}",
                 "met": None if value is None else (value >= TARGETS[name] if op == ">=" else value <= TARGETS[name])}
                for name, value, op in checks]
    big = max((r["n"] for r in gemm_rows), default=None)
    ours, theirs = (find(gemm_rows, case=c, n=big) for c in ("tinyamp gemm float16", "torch.matmul float16"))
    value = ratio(ours and ours["tflops"], theirs and theirs["tflops"])
    out.append({"target": "gemm_8192_vs_torch", "n": big, "value": value, "goal": ">= 0.9",
                "met": None if value is None else value >= TARGETS["gemm_8192_vs_torch"]})
    return out


def environment(device: str, torch: Any) -> dict:
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "python": platform.python_version(),
           "numpy": np.__version__, "device": device, "cpu": common.machine()["cpu"],
           "tf32": {"CUPY_TF32": os.environ["CUPY_TF32"], "CUPY_TF32_before_this_script": _TF32_BEFORE,
                    "torch_allow_tf32": None if torch is None else torch.backends.cuda.matmul.allow_tf32},
           "torch": None if torch is None else torch.__version__,
           "torch_cuda": None if torch is None else torch.version.cuda,
           "memory_tracking": os.environ.get("TINYAMP_CUDA_MEMORY_STATS", "1") != "0"}
    if device == "cuda":
        cp = backend.cupy()
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        env |= {"gpu": name.decode() if isinstance(name, bytes) else name,
                "compute_capability": dev.compute_capability, "cupy": cp.__version__,
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
                "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
                "nvidia_driver": _nvidia_driver(), "CUPY_ACCELERATORS": os.environ.get("CUPY_ACCELERATORS")}
    return env


def _nvidia_driver() -> "str | None":
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _mb(n: "int | None") -> str:
    return "-" if n is None else f"{n / 1e6:.0f}"


def report(result: dict) -> str:
    env = result["environment"]
    lines = [f"device: {env.get('gpu', env['device'])}  CuPy {env.get('cupy', '-')}  CUDA runtime "
             f"{env.get('cuda_runtime', '-')}  driver {env.get('nvidia_driver', '-')}  torch {env['torch']}  "
             f"{env['date']}",
             f"float32 without TF32 on both sides (CUPY_TF32={env['tf32']['CUPY_TF32']}, "
             f"torch allow_tf32={env['tf32']['torch_allow_tf32']})", ""]
    lines.append(common.table([[r["case"], r["n"], f"{r['median_ms']:.3f}", f"{r['tflops']:.1f}"]
                               for r in result["gemm"]], ["GEMM", "n", "median ms", "TFLOP/s"]))
    lines.append("")
    lines.append(common.table(
        [[r["framework"], r["mode"], r["batch"], f"{r['median_ms']:.3f}", f"{r['iqr_ms']:.3f}", _mb(r["peak_bytes"]),
          _mb(r["resting_bytes"]), "-" if "host_syncs_per_step" not in r else f"{r['host_syncs_per_step']:g}"]
         for r in result["mlp"]],
        ["MLP 784-H-10 step", "mode", "batch", "median ms", "IQR ms", "peak MB", "resting MB", "syncs/step"]))
    lines.append("")
    if result.get("kernels"):
        lines.append("")
        lines.append(common.table(
            [[r["kernel"], r["work"], r["batch"], f"{r['bytes'] / 1e6:.1f}", f"{r['median_ms']:.4f}",
              f"{r['tb_per_s']:.2f}", f"{r['copy_ms']:.4f}", f"{r['vs_copy']:.2f}"] for r in result["kernels"]],
            ["kernel", "work", "batch", "MB moved", "median ms", "TB/s", "copy ms", "vs copy"]))
    if result.get("gpu_time"):
        lines.append("")
        timed = [r for r in result["gpu_time"] if "error" not in r]
        lines.append(common.table(
            [[r["framework"], r["mode"], r["batch"], f"{r['median_ms']:.3f}",
              "-" if r["gpu_us_per_step"] is None else f"{r['gpu_us_per_step'] / 1e3:.3f}",
              "-" if r["kernels_per_step"] is None else f"{r['kernels_per_step']:g}"] for r in timed],
            ["AMP step", "mode", "batch", "wall ms (events)", "GPU ms (CUPTI)", "kernels"]))
        for r in result["gpu_time"]:
            if "error" in r:
                lines.append(f"  FAILED {r['framework']} {r['mode']} {r['batch']}: {r['error']}")
            elif r["kernels"]:
                top = ", ".join(f"{k[:48]} {v['us']:.0f}us" for k, v in list(r["kernels"].items())[:8])
                lines.append(f"  {r['framework']} {r['mode']} {r['batch']}: {top}")
    lines.append("")
    lines.append(common.table(
        [[t["target"], t.get("batch", t.get("n")), "-" if t["value"] is None else f"{t['value']:.3f}", t["goal"],
          {True: "yes", False: "NO", None: "-"}[t["met"]]] for t in result["targets"]],
        ["target", "batch/n", "value", "goal", "met"]))
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="where to write the results (default: "
                        "benchmarks/bench_gpu.json; none with --dry-run)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per case (after 5 warm-ups)")
    parser.add_argument("--batches", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--gemm-sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: check the script only")
    parser.add_argument("--standin", action="store_true",
                        help="the CUDA stand-in, tiny sizes: check the script, the CUDA graph row included")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch comparisons")
    parser.add_argument("--issue20", action="store_true",
                        help="only issue 20's sections: the kernels' bandwidth and the GPU time per step")
    parser.add_argument("--no-issue20", action="store_true",
                        help="all but issue 20's sections (run them apart with --issue20)")
    args = parser.parse_args(argv)
    if args.dry_run and args.standin:
        parser.error("--dry-run and --standin are two different checks; pick one")
    if args.issue20 and args.no_issue20:
        parser.error("--issue20 and --no-issue20 exclude each other")
    if args.standin:
        args.batches, args.hidden, args.gemm_sizes, args.repeats = [64], 128, [64], 3
        with backend.use_cuda_standin():  # the previous CUDA backend comes back afterwards
            return run(args, "cuda")
    elif args.dry_run:
        device, args.batches, args.hidden, args.gemm_sizes, args.repeats = "cpu", [64], 128, [64], 3
    elif not ta.cuda.is_available():
        raise SystemExit(f"bench_gpu: no usable CUDA GPU ({backend._cupy_error}); --dry-run checks the script "
                         f"on the CPU")
    else:
        device = "cuda"
    return run(args, device)


def run(args: argparse.Namespace, device: str) -> dict:
    """Measure, print the report, write the JSON (see the module docstring)."""
    torch = None if args.no_torch else load_torch(device)
    result = {"benchmark": "gpu", "dry_run": args.dry_run or args.standin, "standin": args.standin,
              "hidden": args.hidden,
              "environment": environment(device, torch)}
    result["gemm"] = [] if args.issue20 else bench_gemm(device, torch, args.gemm_sizes, args.repeats)
    result["mlp"] = [] if args.issue20 else bench_mlp(device, torch, args.batches, args.hidden, args.repeats)
    result["targets"] = [] if args.issue20 else targets(result["gemm"], result["mlp"])
    issue20 = device == "cuda" and not args.no_issue20
    result["kernels"] = bench_kernels(device, torch, args.batches, args.hidden, args.repeats) if issue20 else []
    result["gpu_time"] = bench_gpu_time(device, torch, args.batches, args.hidden, args.repeats) if issue20 else []
    if not args.no_issue20:
        result["targets"] += issue20_targets(result["kernels"], result["gpu_time"])
    print(report(result))
    path = args.json or (None if args.dry_run or args.standin
                         else os.path.join(os.path.dirname(__file__), "bench_gpu.json"))
    if path:
        common.write_json(path, result)
    failed = [r for r in result["gpu_time"] if "error" in r]
    if failed:  # after the report and the JSON: what was measured is kept, the exit status says what failed
        raise SystemExit(f"bench_gpu: {len(failed)} GPU-time case(s) failed: "
                         + "; ".join(f"{r['framework']} {r['mode']} {r['batch']}" for r in failed))
    return result


if __name__ == "__main__":
    main()
