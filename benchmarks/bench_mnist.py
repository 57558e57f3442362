"""One MLP training step (784-hidden-10), tinyamp against PyTorch, float32 and mixed precision.

Cases, same shapes, device and data (uniform [0, 1) inputs, random labels, the
same batch every step; SGD lr 0.01, no momentum; softmax cross-entropy):

  tinyamp fp32            float32 everywhere
  tinyamp O1 fp16         autocast(float16) + GradScaler
  tinyamp O1 bf16         autocast(bfloat16), no scaler (bfloat16 needs none)
  tinyamp O2 fp16         float16 model, float32 master weights, GradScaler
  torch fp32              eager float32                      } when ``import torch``
  torch autocast fp16     torch.autocast(device, float16) + torch.amp.GradScaler   } works
  torch autocast bf16     torch.autocast(device, bfloat16)   }

Timing: every case is timed in interleaved rounds (benchmarks/common.py), the
median of the round medians is reported with min, max and the round medians.
Compare ratios measured within one run only. Memory: the bytes saved for backward
(tinyamp: ``tinyamp.memory.saved_tensor_bytes``; torch: ``saved_tensors_hooks``
counting unique storages, the parameters' storages excluded) and the step's peak: the rise
of the process's resident high-water mark over one step (``/proc/self/status``
VmHWM after resetting it through ``/proc/self/clear_refs``; Linux only), plus
tracemalloc's peak for tinyamp (NumPy reports its buffers to tracemalloc).

    python benchmarks/bench_mnist.py --batch 128 --hidden 1024 8192 [--json PATH]

The script re-executes itself with glibc's malloc thresholds pinned
(``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``), so large buffers are not
returned to the OS and faulted in again every step (see benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Callable

import numpy as np

import tinyamp as ta
from common import interleaved, machine, table, write_json

PIN = "4294967296"
LR = 0.01


# ------------------------------------------------------------ tinyamp
def tinyamp_case(mode: str, batch: int, hidden: int, device: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(step, forward-only loss) for one tinyamp mode: fp32, o1_fp16, o1_bf16, o2_fp16."""
    ta.manual_seed(0)
    nn = ta.nn
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    o2 = mode == "o2_fp16"
    if o2:
        model.half()
    opt = ta.optim.SGD(model.parameters(), lr=LR, master_weights=o2)
    scaler = ta.amp.GradScaler(enabled=mode in ("o1_fp16", "o2_fp16"))
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.random((batch, 784), dtype=np.float32), device=device)
    y = ta.tensor(rng.integers(0, 10, batch), device=device)
    low = ta.bfloat16 if mode == "o1_bf16" else ta.float16

    def forward() -> Any:
        if mode == "fp32":
            return ta.nn.functional.cross_entropy(model(x), y)
        if o2:
            return ta.nn.functional.cross_entropy(model(x.half()).float(), y)
        with ta.amp.autocast(device_type=device, dtype=low):
            return ta.nn.functional.cross_entropy(model(x), y)

    def step() -> Any:
        opt.zero_grad()
        loss = forward()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return step, forward


# ------------------------------------------------------------ PyTorch
def torch_case(mode: str, batch: int, hidden: int, device: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(step, forward-only loss) for one torch mode: fp32, autocast_fp16, autocast_bf16."""
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler(device, enabled=mode == "autocast_fp16")
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.random((batch, 784), dtype=np.float32), device=device)
    y = torch.tensor(rng.integers(0, 10, batch), device=device)
    low = torch.bfloat16 if mode == "autocast_bf16" else torch.float16

    def forward() -> Any:
        with torch.autocast(device, dtype=low, enabled=mode != "fp32"):
            return nn.functional.cross_entropy(model(x), y)

    # Parameter storages, so saved views of the weights (linear's W.t()) count as the model.
    forward.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = forward()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device == "cuda":
            torch.cuda.synchronize()
        return loss

    return step, forward


def torch_saved_bytes(forward: Callable[[], Any]) -> int:
    """Bytes of the unique storages autograd saves in one forward, parameters (and views of them) excluded."""
    import torch

    storages: dict[int, int] = {}
    params = forward.param_storages

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    del loss
    return sum(storages.values())


# ------------------------------------------------------------ memory
def _status_kib(field: str) -> "int | None":
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_peak_rise(step: Callable[[], Any]) -> "int | None":
    """Bytes the resident high-water mark rises over one step (None where not measurable)."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        return None
    before = _status_kib("VmRSS")
    step()
    peak = _status_kib("VmHWM")
    return None if before is None or peak is None else max(peak - before, 0) * 1024


def tracemalloc_peak(step: Callable[[], Any]) -> int:
    """tracemalloc's peak over one step above the allocations live before it."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


# ------------------------------------------------------------ main
TINYAMP_MODES = {"fp32": "tinyamp fp32", "o1_fp16": "tinyamp O1 fp16", "o1_bf16": "tinyamp O1 bf16",
                 "o2_fp16": "tinyamp O2 fp16"}
TORCH_MODES = {"fp32": "torch fp32", "autocast_fp16": "torch autocast fp16", "autocast_bf16": "torch autocast bf16"}
RATIOS = [("tinyamp fp32", "torch fp32"), ("tinyamp O1 fp16", "torch autocast fp16"),
          ("tinyamp O1 bf16", "torch autocast bf16"), ("tinyamp O2 fp16", "torch autocast fp16"),
          ("tinyamp O1 fp16", "tinyamp fp32"), ("tinyamp O1 bf16", "tinyamp fp32"),
          ("tinyamp O2 fp16", "tinyamp fp32"), ("torch autocast fp16", "torch fp32"),
          ("torch autocast bf16", "torch fp32")]


def measure(framework: str, batch: int, hidden: int, device: str, with_memory: bool) -> dict:
    """One round of one framework's cases (interleaved within the process): timings and memory."""
    if framework == "tinyamp":
        cases = {name: tinyamp_case(mode, batch, hidden, device) for mode, name in TINYAMP_MODES.items()}
    else:
        cases = {name: torch_case(mode, batch, hidden, device) for mode, name in TORCH_MODES.items()}
    memory: dict[str, dict] = {}
    for name, (step, forward) in cases.items():
        step()  # warm: optimizer state, caches
        if not with_memory:
            continue
        entry: dict[str, Any] = {}
        if framework == "tinyamp":
            loss = forward()
            entry["saved_bytes"] = ta.memory.saved_tensor_bytes(loss)["total"]
            del loss
            if device == "cpu":
                entry["tracemalloc_peak_bytes"] = tracemalloc_peak(step)
        else:
            entry["saved_bytes"] = torch_saved_bytes(forward)
        if device == "cpu":
            entry["rss_peak_rise_bytes"] = rss_peak_rise(step)
        memory[name] = entry
    # About 0.3-1 s per repeat, 5 repeats (the slow torch float16 steps take one call each).
    timings = interleaved({name: step for name, (step, _) in cases.items()}, rounds=1,
                          repeats=5, warmup=1, min_time=0.3)
    return {"timings": timings, "memory": memory}


def _run_worker(command: list[str], env: dict) -> dict:
    """Run one worker; retry once (another process may be mid-edit in a shared checkout)."""
    for attempt in range(2):
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
        if attempt == 0:
            time.sleep(10)
    raise SystemExit(f"worker failed: {' '.join(command)}\n{done.stderr}")


def bench_config(batch: int, hidden: int, device: str, rounds: int, frameworks: list[str], threads: int) -> dict:
    """Interleaved rounds; each round runs each framework in a fresh process, so PyTorch's
    OpenMP pool and OpenBLAS's threads never share (and fight over) the cores."""
    per_case: dict[str, list] = {}
    memory: dict[str, dict] = {}
    for r in range(rounds):
        for framework in frameworks:
            command = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--batch", str(batch),
                       "--hidden", str(hidden), "--device", device, "--threads", str(threads)]
            if r == 0:
                command.append("--with-memory")
            # Pool sizes must be set before NumPy/PyTorch start their thread pools.
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                       MKL_NUM_THREADS=str(threads))
            result = _run_worker(command, env)
            memory.update(result["memory"])
            for name, t in result["timings"].items():
                per_case.setdefault(name, []).append(t)
    timings = {name: {"median": statistics.median(t["median"] for t in ts), "min": min(t["min"] for t in ts),
                      "max": max(t["max"] for t in ts), "round_medians": [t["median"] for t in ts]}
               for name, ts in per_case.items()}
    ratios = {f"{a} / {b}": timings[a]["median"] / timings[b]["median"]
              for a, b in RATIOS if a in timings and b in timings}
    return {"batch": batch, "hidden": hidden, "device": device, "threads": threads, "timings": timings,
            "memory": memory, "ratios": ratios}


def _mb(n: "int | None") -> str:
    return "-" if n is None else f"{n / 1e6:.2f}"


def report(result: dict) -> str:
    rows = []
    fp32 = result["memory"]["tinyamp fp32"]["saved_bytes"]
    torch32 = result["memory"].get("torch fp32", {}).get("saved_bytes")
    for name, t in result["timings"].items():
        mem = result["memory"][name]
        ref = torch32 if name.startswith("torch") else fp32
        rows.append([name, f"{t['median'] * 1e3:.1f}", f"{t['min'] * 1e3:.1f}", f"{t['max'] * 1e3:.1f}",
                     " ".join(f"{r * 1e3:.3g}" for r in t["round_medians"]),
                     _mb(mem["saved_bytes"]), f"{mem['saved_bytes'] / ref:.3f}" if ref else "-",
                     _mb(mem.get("rss_peak_rise_bytes")), _mb(mem.get("tracemalloc_peak_bytes"))])
    head = f"batch {result['batch']}, 784-{result['hidden']}-10, {result['device']} (ms per step; MB)"
    body = table(rows, ["case", "median", "min", "max", "round medians", "saved", "saved/fp32",
                        "RSS peak rise", "tracemalloc peak"])
    ratios = "\n".join(f"  {k}: {v:.2f}" for k, v in result["ratios"].items())
    return f"{head}\n{body}\nratios of medians:\n{ratios}"


def _simd_flags() -> list[str]:
    """The CPU flags that matter for float16/bfloat16 arithmetic (Linux; empty elsewhere)."""
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "avx_vnni")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in wanted if flag in present]
    except OSError:
        pass
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[128])
    parser.add_argument("--hidden", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="BLAS/OpenMP threads per process")
    parser.add_argument("--no-torch", action="store_true", help="tinyamp cases only")
    parser.add_argument("--json", default="benchmarks/bench_mnist.json")
    parser.add_argument("--worker", choices=["tinyamp", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--with-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:  # pin glibc's thresholds, then start again
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=PIN, MALLOC_TRIM_THRESHOLD_=PIN)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if args.worker:
        if args.worker == "torch":
            import torch

            torch.set_num_threads(args.threads)
        print(json.dumps(measure(args.worker, args.batch[0], args.hidden[0], args.device, args.with_memory)))
        return
    frameworks = ["tinyamp"]
    info = machine()
    info["threads"] = args.threads
    info["simd"] = _simd_flags()  # AVX512-BF16 decides how fast PyTorch's CPU bfloat16 autocast is
    if not args.no_torch:
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            frameworks.append("torch")
            info["torch"] = probe.stdout.strip()
        else:
            print("PyTorch is not installed: tinyamp cases only (pip install torch for the comparison)")
    print(f"machine: {info}")
    results = []
    for batch in args.batch:
        for hidden in args.hidden:
            result = bench_config(batch, hidden, args.device, args.rounds, frameworks, args.threads)
            print(report(result) + "\n", flush=True)
            results.append(result)
    write_json(args.json, {"machine": info, "lr": LR, "results": results})


if __name__ == "__main__":
    main()
