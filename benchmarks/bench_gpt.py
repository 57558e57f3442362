"""A nanoGPT-shaped training step, tinyamp against PyTorch: step time, tokens/s, peak memory (issue 28).

The step (``common.gpt_training``, one source for both libraries): token + position embeddings,
pre-norm blocks (nn.LayerNorm, one QKV nn.Linear, F.scaled_dot_product_attention(is_causal=True), a
projection, an nn.GELU() MLP of width 4C, residuals), a final LayerNorm, a head, F.cross_entropy,
AdamW and a GradScaler; float32, float16 autocast (with loss scaling) and bfloat16 autocast (PyTorch's
CPU autocast for both 16-bit cases).

Modes:

- default, the CPU: C=256, T=128, B=16, vocab 1024, 4 blocks, 8 heads. One thread each
  (``torch.set_num_threads(1)``, OMP/OPENBLAS_NUM_THREADS=1 set before NumPy loads), CPU time of the
  process (``time.process_time``: the machine is shared), every case in one process, in interleaved
  rounds; the ratios are taken per round and their median reported. Peak memory: each case in a
  fresh subprocess, the growth of the peak resident set (VmHWM) over the resident set before the first
  step (glibc's allocator pinned with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_, so freed blocks
  are reused, not returned: the peak is the live working set plus fragmentation, for both libraries).
  Targets: tinyamp float32 <= 1.0x PyTorch float32, tinyamp bf16 AMP <= 1.0x PyTorch bf16 autocast,
  tinyamp AMP <= 1.2x tinyamp float32.
- ``--standin``: tinyamp's float16 AMP step (C=128, T=64, B=4, 4 blocks, 4 heads, vocab 512) on the
  CUDA stand-in: kernel launches and bytes moved per phase against the step's floor
  (``bench_gpt_launches.py``, which this mode runs).
- ``--gpu``: GPT-2 small (12 blocks, C=768, 12 heads, T=1024, vocab 50304, ``--batch``) on a GPU:
  tinyamp eager and graphed (``ta.cuda.make_graphed_step``), PyTorch eager, captured (one CUDA graph,
  a static loss scale, capturable AdamW) and ``torch.compile``; float32 and float16 AMP; wall time per
  step (CUDA events), tokens/s, peak device memory. ``--small`` shrinks the shapes (2 blocks, C=64,
  T=32, vocab 256, batch 2) so the code runs on the stand-in (``TINYAMP_CUDA=standin``); PyTorch's
  cases need a real GPU and are listed as skipped without one.

    python benchmarks/bench_gpt.py [--json benchmarks/bench_gpt.json] [--rounds 5] [--steps 3]
    python benchmarks/bench_gpt.py --standin [--json ...]
    python benchmarks/bench_gpt.py --gpu [--batch 8] [--small]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy (and OpenBLAS) load: one thread

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import tinyamp as ta  # noqa: E402
import common  # noqa: E402
from common import machine, table, write_json  # noqa: E402

CPU = dict(batch=16, vocab=1024, seq=128, channels=256, heads=8, blocks=4)
GPU = dict(batch=8, vocab=50304, seq=1024, channels=768, heads=12, blocks=12)
GPU_SMALL = dict(batch=2, vocab=256, seq=32, channels=64, heads=4, blocks=2)
DTYPES = ("float32", "float16", "bfloat16")
TARGETS = {"tinyamp float32 / torch float32": 1.0, "tinyamp bfloat16 / torch bfloat16": 1.0,
           "tinyamp float16 / tinyamp float32": 1.2, "tinyamp bfloat16 / tinyamp float32": 1.2}


def load_torch() -> Any:
    try:
        import torch  # noqa: PLC0415 - the comparison is optional
    except ImportError:
        return None
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    return torch


def training(lib: Any, dtype: str, config: dict, device: str = "cpu") -> Any:
    """``common.gpt_training`` for a dtype name: float32, or float16/bfloat16 autocast."""
    amp = dtype != "float32"
    return common.gpt_training(lib, device=device, amp=amp, dtype=getattr(lib, dtype) if amp else None, **config)


# ------------------------------------------------------------------ CPU
def cpu_case(lib: Any, dtype: str, config: dict) -> Callable[[], Any]:
    run = training(lib, dtype, config)
    return lambda: run.step(run.idx, run.targets)


def cpu_times(cases: dict, rounds: int, steps: int, warmup: int) -> dict:
    """{case: [CPU seconds per step, one per round]}: each round times every case for ``steps`` steps."""
    for step in cases.values():
        for _ in range(warmup):
            step()
    out: dict = {name: [] for name in cases}
    for _ in range(rounds):
        for name, step in cases.items():
            start = time.process_time()
            for _ in range(steps):
                step()
            out[name].append((time.process_time() - start) / steps)
    return out


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def memory_of(case: str, config: dict, steps: int = 2) -> int:
    """Peak resident-set growth (bytes) over the steps of one case, measured in this process."""
    library, dtype = case.split()
    lib = ta if library == "tinyamp" else load_torch()
    step = cpu_case(lib, dtype, config)
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current resident set
        f.write("5")
    for _ in range(steps):
        step()
    return _status("VmHWM") - before


def cpu_memory(case: str, config: dict) -> "int | None":
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    cmd = [sys.executable, __file__, "--memory-case", case, "--config", json.dumps(config)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    try:
        return int(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        print(f"memory of {case}: failed ({done.stderr.strip()[-300:]})")
        return None


def run_cpu(args: argparse.Namespace) -> dict:
    torch = load_torch()
    config = dict(CPU, batch=args.batch or CPU["batch"])
    names = [f"{lib} {d}" for d in DTYPES for lib in ("tinyamp", "torch") if lib == "tinyamp" or torch is not None]
    if args.cases:
        names = [n for n in names if any(c in n for c in args.cases.split(","))]
    cases = {n: cpu_case(ta if n.startswith("tinyamp") else torch, n.split()[1], config) for n in names}
    times = cpu_times(cases, args.rounds, args.steps, args.warmup)
    memory = {n: cpu_memory(n, config) for n in names} if args.memory else {}
    tokens = config["batch"] * config["seq"]
    rows, results = [], {}
    for name in names:
        med = statistics.median(times[name])
        results[name] = {"median_s": med, "rounds_s": times[name], "tokens_per_s": tokens / med,
                         "peak_bytes": memory.get(name)}
        peak = memory.get(name)
        rows.append([name, f"{med * 1e3:.1f}", f"{min(times[name]) * 1e3:.1f}", f"{max(times[name]) * 1e3:.1f}",
                     f"{tokens / med:,.0f}", "-" if peak is None else f"{peak / 2 ** 20:.0f}"])
    ratios = {}
    for label in TARGETS:
        a, b = (part.strip() for part in label.split("/"))
        if a in times and b in times:
            per_round = [x / y for x, y in zip(times[a], times[b])]
            ratios[label] = {"median": statistics.median(per_round), "rounds": per_round, "target": TARGETS[label],
                             "met": statistics.median(per_round) <= TARGETS[label]}
    print(f"GPT step on the CPU, {config}, one thread, CPU time per step over {args.steps} steps, "
          f"{args.rounds} interleaved rounds:")
    print(table(rows, ["case", "median ms", "min", "max", "tokens/s", "peak MB"]))
    for label, r in ratios.items():
        print(f"  {label} = {r['median']:.3f} (rounds {', '.join(f'{x:.2f}' for x in r['rounds'])}; "
              f"target <= {r['target']}: {'met' if r['met'] else 'NOT met'})")
    return {"mode": "cpu", "machine": machine(), "config": config, "steps": args.steps, "rounds": args.rounds,
            "load_average": os.getloadavg(), "results": results, "ratios": ratios,
            "torch": None if torch is None else torch.__version__}


# ------------------------------------------------------------------ stand-in counts
def run_standin(args: argparse.Namespace) -> dict:
    import bench_gpt_launches  # noqa: PLC0415 - the stand-in's counts and floors of this step, written once

    return bench_gpt_launches.main([])


# ------------------------------------------------------------------ GPU
def torch_gpu_step(torch: Any, mode: str, dtype: str, config: dict) -> Callable[[], Any]:
    """PyTorch's step on cuda: "eager", "compile" (torch.compile of the model) or "captured" (one CUDA graph)."""
    run = training(torch, dtype, config, "cuda")
    amp, autocast_dtype = dtype != "float32", getattr(torch, dtype) if dtype != "float32" else torch.float16
    vocab = config["vocab"]
    if mode == "eager":
        return lambda: run.step(run.idx, run.targets)
    if mode == "compile":
        compiled = torch.compile(run.model)

        def step() -> Any:
            run.opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=autocast_dtype, enabled=amp):
                loss = torch.nn.functional.cross_entropy(compiled(run.idx).reshape(-1, vocab), run.targets.reshape(-1))
            run.scaler.scale(loss).backward()
            run.scaler.step(run.opt)
            run.scaler.update()
            return loss

        return step
    # captured: PyTorch's whole-network capture recipe (a static loss scale: GradScaler's skip needs the host)
    model = run.model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, capturable=True)
    scale = 2.0 ** 16 if dtype == "float16" else 1.0
    params = list(model.parameters())

    def body() -> None:
        with torch.autocast("cuda", dtype=autocast_dtype, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(run.idx).reshape(-1, vocab), run.targets.reshape(-1))
        (loss * scale).backward()
        if scale != 1.0:
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
    return graph.replay


def tinyamp_gpu_step(mode: str, dtype: str, config: dict) -> Callable[[], Any]:
    """tinyamp's step on cuda: "eager", or "graphed" (the whole step replayed as one CUDA graph)."""
    run = training(ta, dtype, config, "cuda")
    if mode == "eager":
        return lambda: run.step(run.idx, run.targets)
    graphed = ta.cuda.make_graphed_step(run.step, (run.idx, run.targets))
    return lambda: graphed(run.idx, run.targets)


def run_gpu(args: argparse.Namespace) -> dict:
    from bench_gpu import Timer, summary  # noqa: PLC0415 - the GPU timing, shared

    config = dict(GPU_SMALL if args.small else GPU)
    if args.batch:
        config["batch"] = args.batch
    torch = load_torch()
    torch = torch if torch is not None and torch.cuda.is_available() else None
    tokens = config["batch"] * config["seq"]
    rows, results = [], {}
    cases = [("tinyamp", m, d) for d in ("float32", "float16") for m in ("eager", "graphed")]
    cases += [("torch", m, d) for d in ("float32", "float16") for m in ("eager", "captured", "compile")]
    for library, mode, dtype in cases:
        name = f"{library} {mode} {dtype}"
        if library == "torch" and torch is None:
            rows.append([name, "skipped: no CUDA PyTorch", "", "", ""])
            continue
        try:
            if library == "tinyamp":
                step = tinyamp_gpu_step(mode, dtype, config)
                timer = Timer("cuda")
                ta.cuda.reset_peak_memory_stats()
            else:
                step = torch_gpu_step(torch, mode, dtype, config)
                timer = Timer("cuda", torch)
                torch.cuda.reset_peak_memory_stats()
            s = summary(timer.samples(step, args.rounds * args.steps, args.warmup))
            peak = ta.cuda.max_memory_allocated() if library == "tinyamp" else torch.cuda.max_memory_allocated()
        except Exception as exc:  # a failing case is recorded; the others still run
            rows.append([name, f"failed: {type(exc).__name__}: {str(exc)[:60]}", "", "", ""])
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        results[name] = dict(s, tokens_per_s=tokens / (s["median_ms"] / 1e3), peak_bytes=peak)
        rows.append([name, f"{s['median_ms']:.2f}", f"{s['min_ms']:.2f}", f"{tokens / (s['median_ms'] / 1e3):,.0f}",
                     f"{peak / 2 ** 20:.0f}"])
        del step
    print(f"GPT step on {'the stand-in' if ta.backend.standin_active() else 'a GPU'}, {config}: wall ms per step")
    print(table(rows, ["case", "median ms", "min", "tokens/s", "peak MB"]))
    return {"mode": "gpu", "machine": machine(), "config": config, "results": results,
            "standin": ta.backend.standin_active()}


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_gpt.json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--cases", default="", help="comma-separated substrings of the case names to run")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory subprocesses")
    parser.add_argument("--standin", action="store_true")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--small", action="store_true", help="--gpu at a tiny size (runs on the stand-in)")
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_case:  # the subprocess of cpu_memory
        print(memory_of(args.memory_case, json.loads(args.config)))
        return {}
    if args.standin:
        return run_standin(args)
    result = run_gpu(args) if args.gpu else run_cpu(args)
    if args.json:
        path = Path(args.json)
        if path.name == "bench_gpt.json" and result["mode"] != "cpu":
            path = path.with_name(f"bench_gpt_{result['mode']}.json")
        write_json(str(path), result)
    return result


if __name__ == "__main__":
    main()
