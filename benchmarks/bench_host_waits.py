"""Host time of each phase of tinyamp's eager AMP step on a GPU, and whether any phase waits for the GPU.

A spin kernel keeps the GPU busy (about 30 ms) before each step, so a phase
that synchronises with the device (a host read, a pageable copy, a blocking
allocation) shows up as a phase lasting about that long; the others measure
the host's own cost of issuing the work (Python, CuPy, the driver). MLP
784-H-10, SGD momentum, float16 autocast + GradScaler, the batch on the GPU.

    python benchmarks/bench_host_waits.py [--batch 4096] [--hidden 8192] [--json out.json]
    python benchmarks/bench_host_waits.py --against OTHER_CHECKOUT [--pairs 4]

``--against`` times this checkout's tinyamp and another's (a directory
holding a ``tinyamp`` package, e.g. an older tree) in alternating
subprocesses, so that two trees' host times come from one machine and one
run, interleaved (the order of two runs in one process changes them).
``TINYAMP_ROOT`` names the checkout a process imports tinyamp from.

``TINYAMP_CUDA=standin`` runs it on the CUDA stand-in without the spin kernel,
to check the script: the times are the stand-in's host emulation, and its
"waits" column means nothing there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("TINYAMP_ROOT") or REPO)
import tinyamp as ta  # noqa: E402
from tinyamp import backend  # noqa: E402

import common  # noqa: E402

WAIT_MS = 5.0  # a phase longer than this waited for the spin kernel


def phases(batch: int, hidden: int, steps: int) -> dict[str, list[float]]:
    """Host milliseconds of each phase, per step (after three warm-up steps)."""
    cp = backend.cupy()
    run = common.mlp_training(ta, batch, hidden, "cuda")
    model, opt, scaler, x, y = run.model, run.opt, run.scaler, run.x, run.y
    out: dict[str, list[float]] = {}
    for i in range(steps + 3):
        cp.cuda.Device().synchronize()
        if not backend.standin_active():  # the stand-in has no clock to spin on
            common.gpu_spin(cp, 60_000_000)
        marks = [("start", time.perf_counter())]
        opt.zero_grad()
        marks.append(("zero_grad", time.perf_counter()))
        with ta.amp.autocast(device_type="cuda", dtype=ta.float16):
            h = model[0](x)
            marks.append(("linear 1", time.perf_counter()))
            h = model[1](h)
            marks.append(("relu", time.perf_counter()))
            z = model[2](h)
            marks.append(("linear 2", time.perf_counter()))
            loss = ta.nn.functional.cross_entropy(z, y)
            marks.append(("cross_entropy", time.perf_counter()))
        scaled = scaler.scale(loss)
        marks.append(("scale", time.perf_counter()))
        scaled.backward()
        marks.append(("backward", time.perf_counter()))
        scaler.unscale_(opt)
        marks.append(("unscale_", time.perf_counter()))
        scaler.step(opt)
        marks.append(("step", time.perf_counter()))
        scaler.update()
        marks.append(("update", time.perf_counter()))
        if i >= 3:
            for (_, before), (name, after) in zip(marks, marks[1:]):
                out.setdefault(name, []).append((after - before) * 1e3)
    cp.cuda.Device().synchronize()
    return out


def measure(batch: int, hidden: int, steps: int) -> dict:
    """Each phase's median and max host ms, and their medians' sum: the host time to issue one step."""
    measured = phases(batch, hidden, steps)
    rows = [{"phase": name, "median_ms": statistics.median(v), "max_ms": max(v), "waits": max(v) > WAIT_MS}
            for name, v in measured.items()]
    return {"rows": rows, "host_ms_per_step": sum(r["median_ms"] for r in rows)}


def compare(args: argparse.Namespace) -> dict:
    """This checkout and ``args.against`` in alternating subprocesses (the order flips every pair)."""
    trees = {"this": REPO, "against": os.path.abspath(args.against)}
    if not os.path.isdir(os.path.join(trees["against"], "tinyamp")):
        raise SystemExit(f"bench_host_waits: {trees['against']} holds no tinyamp package")
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for pair in range(args.pairs):
        for name in (("this", "against") if pair % 2 == 0 else ("against", "this")):
            command = [sys.executable, os.path.abspath(__file__), "--child", "--batch", str(args.batch),
                       "--hidden", str(args.hidden), "--steps", str(args.steps)]
            done = subprocess.run(command, check=True, capture_output=True, text=True,
                                  env={**os.environ, "TINYAMP_ROOT": trees[name]})
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    phase_names = [r["phase"] for r in runs["this"][0]["rows"]]

    def median_of(name: str, phase: str) -> float:
        return statistics.median(next(r["median_ms"] for r in run["rows"] if r["phase"] == phase)
                                 for run in runs[name])

    rows = [[phase, f"{median_of('against', phase):.3f}", f"{median_of('this', phase):.3f}"] for phase in phase_names]
    totals = {name: statistics.median(run["host_ms_per_step"] for run in runs[name]) for name in trees}
    rows.append(["whole step", f"{totals['against']:.3f}", f"{totals['this']:.3f}"])
    print(common.table(rows, ["phase", f"against ({trees['against']})", f"this ({trees['this']})"]))
    ratios = [t["host_ms_per_step"] / a["host_ms_per_step"] for t, a in zip(runs["this"], runs["against"])]
    print(f"host ms per step, medians of {args.pairs} alternating subprocesses each; this / against: "
          f"{statistics.median(ratios):.3f} (median of the pairs' ratios)")
    return {"benchmark": "host_waits_against", "machine": common.machine(), "batch": args.batch,
            "hidden": args.hidden, "trees": trees, "runs": runs, "host_ms_per_step": totals,
            "this_over_against": statistics.median(ratios), "standin": backend.standin_active()}


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--against", default=None, help="another checkout, timed alternately with this one")
    parser.add_argument("--pairs", type=int, default=4, help="subprocess pairs with --against")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not ta.cuda.is_available():
        raise SystemExit("bench_host_waits: needs a CUDA GPU (or TINYAMP_CUDA=standin to check the script)")
    if args.child:
        result = measure(args.batch, args.hidden, args.steps)
        print(json.dumps(result))
        return result
    if args.against:
        result = compare(args)
    else:
        result = {"benchmark": "host_waits", "machine": common.machine(), "batch": args.batch,
                  "hidden": args.hidden, **measure(args.batch, args.hidden, args.steps),
                  "standin": backend.standin_active()}
        rows = result["rows"]
        print(common.table([[r["phase"], f"{r['median_ms']:.3f}", f"{r['max_ms']:.3f}",
                             "YES" if r["waits"] else "no"] for r in rows],
                           ["phase", "median host ms", "max host ms", "waits for the GPU"]))
        print(f"host time to issue one step: {result['host_ms_per_step']:.3f} ms "
              f"(batch {args.batch}, hidden {args.hidden})")
    if args.json:
        common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
