"""Host time of each phase of tinyamp's eager AMP step on a GPU, and whether any phase waits for the GPU.

A spin kernel keeps the GPU busy (about 30 ms) before each step, so a phase
that synchronises with the device (a host read, a pageable copy, a blocking
allocation) shows up as a phase lasting about that long; the others measure
the host's own cost of issuing the work (Python, CuPy, the driver). MLP
784-H-10, SGD momentum, float16 autocast + GradScaler, the batch on the GPU.

    python benchmarks/bench_host_waits.py [--batch 4096] [--hidden 8192] [--json out.json]

``TINYAMP_CUDA=standin`` runs it on the CUDA stand-in without the spin kernel,
to check the script: the times are the stand-in's host emulation, and its
"waits" column means nothing there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not ta.cuda.is_available():
        raise SystemExit("bench_host_waits: needs a CUDA GPU (or TINYAMP_CUDA=standin to check the script)")
    measured = phases(args.batch, args.hidden, args.steps)
    rows = [{"phase": name, "median_ms": statistics.median(v), "max_ms": max(v), "waits": max(v) > WAIT_MS}
            for name, v in measured.items()]
    total = sum(r["median_ms"] for r in rows)
    print(common.table([[r["phase"], f"{r['median_ms']:.3f}", f"{r['max_ms']:.3f}", "YES" if r["waits"] else "no"]
                        for r in rows], ["phase", "median host ms", "max host ms", "waits for the GPU"]))
    print(f"host time to issue one step: {total:.3f} ms (batch {args.batch}, hidden {args.hidden})")
    result = {"benchmark": "host_waits", "machine": common.machine(), "batch": args.batch, "hidden": args.hidden,
              "rows": rows, "host_ms_per_step": total, "standin": backend.standin_active()}
    if args.json:
        common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
