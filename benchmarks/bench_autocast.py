"""Autocast cost on the CPU: an MLP training step in float32 against autocast(float16).

Model 784-1024-1024-10 (Linear, ReLU, Linear, ReLU, Linear), batch 128,
cross-entropy, SGD: forward and loss (inside autocast for the AMP case),
backward, optimizer step. Both cases are timed in interleaved rounds (median
of round medians) and traced once with ``ta.amp.trace()`` for the bytes saved
for backward, the casts and the weight-cache hits.

Targets (issue 3): saved bytes under autocast <= 0.55x float32; CPU step time
<= 3x float32. Run with the malloc thresholds pinned for stable numbers::

    MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296 \\
        python benchmarks/bench_autocast.py --json benchmarks/bench_autocast.json

``--profile`` prints where the AMP step spends its time, per op class.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import tinyamp as ta  # noqa: E402


def build(sizes: list[int], seed: int = 0) -> tuple:
    ta.manual_seed(seed)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(ta.nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(ta.nn.ReLU())
    model = ta.nn.Sequential(*layers)
    return model, ta.optim.SGD(model.parameters(), lr=0.01)


def make_step(model: object, opt: object, x: ta.Tensor, y: ta.Tensor, amp: bool):
    loss_fn = ta.nn.CrossEntropyLoss()

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with ta.amp.autocast(enabled=amp):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def interleaved_steps(steps: dict, rounds: int, per_round: int, warmup: int = 3) -> dict:
    """Per case: wall and process-CPU seconds per step, median of interleaved round medians.

    CPU time is less disturbed by other processes on a shared machine; run with
    OPENBLAS_NUM_THREADS=1 for it to be meaningful (spinning BLAS threads count).
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    samples: dict = {name: {"wall": [], "cpu": []} for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            walls, cpus = [], []
            for _ in range(per_round):
                w0, c0 = time.perf_counter(), time.process_time()
                step()
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
            samples[name]["wall"].append(statistics.median(walls))
            samples[name]["cpu"].append(statistics.median(cpus))
    return {name: {"median": statistics.median(v["wall"]), "min": min(v["wall"]),
                   "cpu_median": statistics.median(v["cpu"]), "round_medians": v["wall"]}
            for name, v in samples.items()}


def traced(step) -> "ta.amp.Trace":
    with ta.amp.trace() as t:
        step()
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--sizes", type=int, nargs="+", default=[784, 1024, 1024, 10])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=10, help="steps per case per round")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--profile", action="store_true", help="profile 20 AMP steps")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = ta.tensor(rng.random((args.batch, args.sizes[0])), dtype=ta.float32)
    y = ta.tensor(rng.integers(0, args.sizes[-1], args.batch))
    model32, opt32 = build(args.sizes)
    model16, opt16 = build(args.sizes)
    steps = {"float32": make_step(model32, opt32, x, y, False),
             "autocast_fp16": make_step(model16, opt16, x, y, True)}

    if args.profile:
        steps["autocast_fp16"]()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            steps["autocast_fp16"]()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return

    traces = {name: traced(step) for name, step in steps.items()}
    timing = interleaved_steps(steps, rounds=args.rounds, per_round=args.steps)

    machine = dict(common.machine(), blas_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"))
    rows, result = [], {"machine": machine, "batch": args.batch, "sizes": args.sizes, "cases": {}}
    for name in steps:
        totals = traces[name].totals()
        saved = totals["saved_bytes"]["forward"]
        result["cases"][name] = {"step_s": timing[name], "saved_bytes": saved,
                                 "saved_bytes_total": sum(saved.values()),
                                 "casts": totals["casts_by_dtype"], "cache_hits": totals["cache_hits"],
                                 "cache_misses": totals["cache_misses"]}
        rows.append([name, f"{timing[name]['median'] * 1e3:.2f}", f"{timing[name]['min'] * 1e3:.2f}",
                     f"{timing[name]['cpu_median'] * 1e3:.2f}",
                     f"{sum(saved.values()) / 2**20:.2f}",
                     " ".join(f"{k}={v / 2**20:.2f}" for k, v in sorted(saved.items())),
                     str(sum(totals["casts_by_dtype"].values())), str(totals["cache_hits"])])
    base, amp = result["cases"]["float32"], result["cases"]["autocast_fp16"]
    result["step_time_ratio"] = amp["step_s"]["median"] / base["step_s"]["median"]
    result["cpu_time_ratio"] = amp["step_s"]["cpu_median"] / base["step_s"]["cpu_median"]
    result["saved_bytes_ratio"] = amp["saved_bytes_total"] / base["saved_bytes_total"]
    print(f"MLP {'-'.join(map(str, args.sizes))}, batch {args.batch}, {common.machine()['cpu']}")
    print(common.table(rows, ["case", "step ms (median)", "min", "cpu ms", "saved MiB", "per dtype (MiB)",
                              "casts", "cache hits"]))
    print(f"step time ratio autocast/float32: {result['step_time_ratio']:.2f} wall, "
          f"{result['cpu_time_ratio']:.2f} CPU time (target <= 3)")
    print(f"saved-bytes ratio autocast/float32: {result['saved_bytes_ratio']:.3f} (target <= 0.55)")
    if args.json:
        common.write_json(args.json, result)


if __name__ == "__main__":
    main()
