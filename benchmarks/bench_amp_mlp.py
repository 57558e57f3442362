"""The AMP step against float32 at a realistic size: MLP 784-1024-10, batch 128, SGD momentum, CPU.

The same step as the README's (``nn.Linear`` -> ReLU -> ``nn.Linear``, cross-entropy,
``GradScaler``), float32 and under ``autocast(float16)``, timed in interleaved
rounds in one process so the ratio is read on one machine state. Target (issue 18):
AMP step at most 1.0x tinyamp float32, with numba installed.

    python benchmarks/bench_amp_mlp.py [--json benchmarks/bench_amp_mlp.json] [--rounds 7]
"""

from __future__ import annotations

import argparse

import tinyamp as ta
from bench_overhead import tiny_tinyamp_step as mlp_step  # the same MLP step, at a realistic size here
from common import interleaved, machine, table, write_json

CONFIG = dict(batch=128, hidden=1024)
TARGET = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_amp_mlp.json")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    cases = {"tinyamp float32": mlp_step(False, **CONFIG), "tinyamp amp": mlp_step(True, **CONFIG)}
    timings = interleaved(cases, rounds=args.rounds, min_time=0.3, warmup=5)
    per_round = [a / f for a, f in zip(timings["tinyamp amp"]["round_medians"],
                                       timings["tinyamp float32"]["round_medians"])]
    ratio = timings["tinyamp amp"]["median"] / timings["tinyamp float32"]["median"]
    rows = [[name, f"{r['median'] * 1e3:.3f} ms", f"{r['min'] * 1e3:.3f}", f"{r['max'] * 1e3:.3f}"]
            for name, r in timings.items()]
    print(f"MLP 784-{CONFIG['hidden']}-10, batch {CONFIG['batch']}, SGD momentum, CPU, numba "
          f"{ta.kernels.cpu.cpu_path.numba_default()}:")
    print(table(rows, ["case", "median", "min", "max"]))
    print(f"  amp / float32 = {ratio:.3f} (per round min {min(per_round):.3f}, max {max(per_round):.3f}; "
          f"target <= {TARGET})")
    write_json(args.json, {"machine": machine(), "config": CONFIG, "timings": timings,
                           "ratio": ratio, "round_ratios": per_round, "target": TARGET, "met": ratio <= TARGET})


if __name__ == "__main__":
    main()
