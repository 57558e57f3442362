"""Host CPU time of tinyamp's eager AMP step on the CUDA stand-in with its kernels switched off.

On a GPU the eager AMP step of a wide MLP is bound by the host's time to
issue it (Python, CuPy, the driver). Without a GPU, the CUDA stand-in runs
every CUDA code path of tinyamp on the CPU; with its kernels switched off
(``ElementwiseKernel.execute = RawKernel.execute = False``: each launch is
checked and counted, nothing runs) and small sizes (its cuBLAS emulation
still multiplies, on the host), the step's CPU time is mostly tinyamp's own
per-op Python on the CUDA path plus the stand-in's bookkeeping. That is a
proxy: the stand-in's costs are not CuPy's, and CuPy's and the driver's own
per-call costs on a GPU are not measured here.

MLP I-H-10, SGD momentum 0.9, float16 autocast + GradScaler, the batch on the
"device". Reported: CPU time of this thread per step (``time.thread_time``)
and wall time, medians of rounds; then one cProfile pass attributing the
step's time and its function calls to files (a built-in function's go to
the file that called it): tinyamp's CUDA path, the rest of tinyamp, the
stand-in, NumPy. The calls are a count, steady on a loaded machine.

    python benchmarks/bench_standin_host.py [--inputs 98 --hidden 128 --batch 64] [--json out.json]
    python benchmarks/bench_standin_host.py --against DIR [--rounds 7]

``--against DIR`` times another checkout (DIR holds its ``tinyamp``) and this
one in alternating subprocesses, ``--rounds`` pairs, and reports both medians,
the median of the pairs' ratios and the ratio of the best rounds (the
machine's load drifts; a pair runs back to back, so its ratio sees one load).
``--root DIR`` measures the checkout in DIR in this process.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any, Callable


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402


def _import_tinyamp(root: str) -> Any:
    """tinyamp from checkout ``root``, on the CUDA stand-in with its kernels switched off."""
    os.environ["TINYAMP_CUDA"] = "standin"
    sys.path.insert(0, root)
    import tinyamp  # noqa: PLC0415 - the checkout is chosen at run time
    from cupy_standin import kernels  # noqa: PLC0415
    kernels.RawKernel.execute = False
    kernels.ElementwiseKernel.execute = False
    return tinyamp


def make_step(ta: Any, inputs: int, hidden: int, batch: int) -> Callable[[], None]:
    """One eager AMP training step of MLP inputs-hidden-10 on the stand-in, as a closure (warmed up)."""
    run = common.mlp_training(ta, batch, hidden, "cuda", inputs=inputs)

    def step() -> None:
        run.step(run.x, run.y)

    for _ in range(5):
        step()
    return step


def time_steps(step: Callable[[], None], steps: int, rounds: int) -> dict:
    """Median (and min) thread CPU and wall microseconds per step over ``rounds`` rounds of ``steps``."""
    cpu, wall = [], []
    for _ in range(rounds):
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(steps):
            step()
        cpu.append((time.thread_time() - c0) / steps * 1e6)
        wall.append((time.perf_counter() - w0) / steps * 1e6)
    return {"cpu_us": statistics.median(cpu), "cpu_us_min": min(cpu), "wall_us": statistics.median(wall),
            "wall_us_min": min(wall), "steps": steps, "rounds": rounds}


def _bucket(filename: str, caller: "str | None" = None) -> str:
    """Where a profiled function's time is counted: a file of tinyamp, the stand-in, NumPy or other."""
    name = filename.replace("\\", "/")
    if "/cupy_standin/" in name:
        return "stand-in (cupy_standin)"
    if "/tinyamp/" in name:
        return "tinyamp/" + name.split("/tinyamp/", 1)[1]
    if "/numpy/" in name:
        return "numpy (Python)"
    if name == "~" and caller is not None:  # a built-in: the caller's file
        return _bucket(caller)
    return "other"


def profile(step: Callable[[], None], steps: int) -> tuple[float, dict[str, float], dict[str, float]]:
    """cProfile of ``steps`` steps: (profiled us per step, us per step by bucket, function calls per step by
    bucket: a count, steadier than times on a loaded machine)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    by: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, ncalls, tottime, _, callers) in stats.items():
        if filename == "~" and callers:
            for (caller_file, _, _), edge in callers.items():
                by[_bucket(filename, caller_file)] += edge[2]
                calls[_bucket(filename, caller_file)] += edge[1]
        else:
            by[_bucket(filename)] += tottime
            calls[_bucket(filename)] += ncalls
    per_step = {k: v / steps * 1e6 for k, v in by.items()}
    return sum(per_step.values()), per_step, {k: v / steps for k, v in calls.items()}


def group(per_file: dict[str, float]) -> dict[str, float]:
    """Buckets summed: tinyamp's CUDA path (kernels/cuda), the rest of tinyamp, the stand-in, NumPy, other."""
    out: collections.Counter = collections.Counter()
    for name, us in per_file.items():
        if name.startswith("tinyamp/kernels/cuda/"):
            out["tinyamp: kernels/cuda (the CUDA path's kernels)"] += us
        elif name.startswith("tinyamp/"):
            out["tinyamp: the rest (autograd, ops, amp, optim, ...)"] += us
        else:
            out[name] += us
    return dict(out)


def measure(root: str, inputs: int, hidden: int, batch: int, steps: int, rounds: int,
            profile_steps: int) -> dict:
    ta = _import_tinyamp(root)
    step = make_step(ta, inputs, hidden, batch)
    result = {"root": os.path.abspath(root), "inputs": inputs, "hidden": hidden, "batch": batch,
              **time_steps(step, steps, rounds)}
    if profile_steps:
        total, per_file, calls = profile(step, profile_steps)
        result.update(profiled_us=total, by_file=per_file, by_group=group(per_file), calls_by_file=calls,
                      calls_by_group=group(calls))
    return result


def _child(root: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--root", root, "--child",
               "--inputs", str(args.inputs), "--hidden", str(args.hidden), "--batch", str(args.batch),
               "--steps", str(args.steps), "--per-child-rounds", str(args.per_child_rounds)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace) -> dict:
    """This checkout against ``args.against`` in alternating subprocesses."""
    here = os.path.dirname(HERE)
    trees = {"against": args.against, "this": here}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for name in order:
            runs[name].append(_child(trees[name], args))
    summary = {name: {"root": os.path.abspath(trees[name]),
                      "cpu_us": statistics.median(x["cpu_us"] for x in rs),
                      "wall_us": statistics.median(x["wall_us"] for x in rs),
                      "cpu_us_per_round": [round(x["cpu_us"], 1) for x in rs]} for name, rs in runs.items()}
    for name, rs in runs.items():
        summary[name]["cpu_us_min"] = min(x["cpu_us_min"] for x in rs)
    # Each pair ran back to back, so its ratio sees one load; their median shrugs off a busy pair.
    pair_ratio = statistics.median(t["cpu_us"] / a["cpu_us"] for t, a in zip(runs["this"], runs["against"]))
    print(f"MLP {args.inputs}-{args.hidden}-10, batch {args.batch}, stand-in kernels off; "
          f"{args.rounds} alternating subprocess pairs, {args.steps} steps x {args.per_child_rounds} rounds each")
    print(common.table([[name, s["root"], f"{s['cpu_us']:.1f}", f"{s['cpu_us_min']:.1f}", f"{s['wall_us']:.1f}",
                         " ".join(f"{v:.0f}" for v in s["cpu_us_per_round"])] for name, s in summary.items()],
                       ["tree", "root", "CPU us/step", "min", "wall us/step", "CPU us per pair"]))
    print(f"this / against (CPU time): median of the pairs' ratios {pair_ratio:.3f}; "
          f"of the minima {summary['this']['cpu_us_min'] / summary['against']['cpu_us_min']:.3f}")
    return {"benchmark": "standin_host_compare", "machine": common.machine(), "inputs": args.inputs,
            "hidden": args.hidden, "batch": args.batch, "trees": summary, "cpu_ratio_pairs_median": pair_ratio,
            "cpu_ratio_minima": summary["this"]["cpu_us_min"] / summary["against"]["cpu_us_min"]}


def report(result: dict) -> None:
    print(f"MLP {result['inputs']}-{result['hidden']}-10, batch {result['batch']}, eager AMP step on the CUDA "
          f"stand-in, kernels off ({result['root']})")
    print(f"host CPU time per step: {result['cpu_us']:.1f} us (min {result['cpu_us_min']:.1f}); "
          f"wall {result['wall_us']:.1f} us; median of {result['rounds']} rounds of {result['steps']} steps")
    if "by_file" in result:
        total = result["profiled_us"]
        print(f"\ncProfile attribution (profiled step: {total:.0f} us; the profiler inflates call-heavy code)")
        rows = [[name, f"{us:.1f}", f"{us / total:.1%}", f"{result['calls_by_group'].get(name, 0):.0f}"]
                for name, us in sorted(result["by_group"].items(), key=lambda kv: -kv[1])]
        print(common.table(rows, ["where", "us/step", "share", "calls/step"]))
        print()
        rows = [[name, f"{us:.1f}", f"{us / total:.1%}", f"{result['calls_by_file'].get(name, 0):.0f}"]
                for name, us in sorted(result["by_file"].items(), key=lambda kv: -kv[1])
                if name.startswith("tinyamp/")][:20]
        print(common.table(rows, ["tinyamp file (stand-in excluded)", "us/step", "share", "calls/step"]))


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=98)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (with --against: subprocess pairs)")
    parser.add_argument("--profile-steps", type=int, default=200, help="steps under cProfile (0: none)")
    parser.add_argument("--root", default=os.path.dirname(HERE), help="the checkout to measure")
    parser.add_argument("--against", default=None, help="another checkout, timed alternately with this one")
    parser.add_argument("--per-child-rounds", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.against:
        result = compare(args)
    elif args.child:
        result = measure(args.root, args.inputs, args.hidden, args.batch, args.steps, args.per_child_rounds, 0)
        print(json.dumps(result))
        return result
    else:
        result = {"benchmark": "standin_host", "machine": common.machine(),
                  **measure(args.root, args.inputs, args.hidden, args.batch, args.steps, args.rounds,
                            args.profile_steps)}
        report(result)
    if args.json:
        common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
