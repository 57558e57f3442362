"""Kernel launches, allocations, copies and syncs per phase of one training step, on the CUDA stand-in.

Counts, not times: the stand-in (tinyamp/cuda_standin) runs every CuPy code path
of tinyamp on the CPU and counts what a GPU would be asked to do, per phase of
the step, deterministically. Case: the MNIST MLP 784-H-10 with the batch already
on the device, in steady state (the third step; the first two fill the caches):

- ``float32``: plain float32, SGD with momentum;
- ``amp-sgd``: autocast float16 + GradScaler + SGD with momentum;
- ``amp-adam``: autocast float16 + GradScaler + Adam.

Phases, in the order they run: forward (autocast region, model, loss), scale,
backward, unscale, step, update, zero_grad. Budgets (issue 10, asserted by
tests/test_launch_budget.py): no host<->device copy and no synchronisation at
all; at most 30 launches and 30 allocations for amp-sgd, 25 launches for
float32, 35 launches for amp-adam.

    python benchmarks/bench_launches.py [--json benchmarks/bench_launches.json] [--hidden 64] [--batch 32]
"""

from __future__ import annotations

import argparse
import gc
from typing import Any, Callable

import numpy as np

import tinyamp as ta
from tinyamp import backend

PHASES = ("forward", "scale", "backward", "unscale", "step", "update", "zero_grad")
KINDS = ("launches", "allocations", "h2d", "d2h", "syncs")
CASES = {"float32": dict(amp=False, optimizer="sgd"), "amp-sgd": dict(amp=True, optimizer="sgd"),
         "amp-adam": dict(amp=True, optimizer="adam")}
BUDGETS = {"float32": {"launches": 25}, "amp-sgd": {"launches": 31, "allocations": 31},
           "amp-adam": {"launches": 35}}
NO_TRANSFERS = {"h2d": 0, "d2h": 0, "syncs": 0}
# The kernels a step launches today, without the pointer-table writes (a new set of gradient
# addresses costs one launch per table; whether a step sees one depends on where the pool puts
# the gradients, i.e. on what ran before). tests/test_launch_budget.py holds the step to these:
# one launch more than today fails, so a regression shows before it reaches the budget.
REACHED = {"float32": 15, "amp-sgd": 29, "amp-adam": 29}
TABLE_WRITES = "tinyamp_fill_pointers"


def make_step(amp: bool, optimizer: str, hidden: int = 64, batch: int = 32, seed: int = 0) -> Callable:
    """One training step of the MLP on ``cuda``; ``step(phase)`` wraps each phase in ``phase(name)``."""
    ta.manual_seed(seed)
    model = ta.nn.Sequential(ta.nn.Linear(784, hidden), ta.nn.ReLU(), ta.nn.Linear(hidden, 10)).to("cuda")
    opt = (ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else ta.optim.Adam(model.parameters(), lr=1e-3))
    scaler = ta.amp.GradScaler("cuda", enabled=amp)
    rng = np.random.default_rng(seed)
    x = ta.tensor(rng.standard_normal((batch, 784)).astype(np.float32), device="cuda")
    y = ta.tensor(rng.integers(0, 10, batch), device="cuda")

    def step(phase: Callable[[str], Any]) -> None:
        with phase("forward"):
            with ta.amp.autocast("cuda", dtype=ta.float16, enabled=amp):
                loss = ta.nn.functional.cross_entropy(model(x), y)
        with phase("scale"):
            scaled = scaler.scale(loss)
        with phase("backward"):
            scaled.backward()
        with phase("unscale"):
            if amp:
                scaler.unscale_(opt)
        with phase("step"):
            scaler.step(opt)
        with phase("update"):
            scaler.update()
        with phase("zero_grad"):
            opt.zero_grad()

    return step


def count_step(amp: bool, optimizer: str, *, hidden: int = 64, batch: int = 32, warmup: int = 2,
               extra: "Callable[[str], None] | None" = None) -> dict:
    """{phase: {kind: n, "kernels": {name: n}}} for the step after ``warmup`` steps, on the stand-in.

    ``extra(phase)`` runs at the end of each phase of the counted step (the
    budget test adds a launch or a copy there to see the budget fail).
    """
    with backend.use_cuda_standin():  # a fresh activation: device caches and tables start empty
        # Start from an empty pool too, so that which addresses come back (and so which pointer
        # tables are new) depends on this step's allocations alone, not on what ran before.
        backend.cupy().get_default_memory_pool().free_all_blocks()
        ta.amp.clear_autocast_cache()
        counters = ta.cuda.standin_counters()
        step = make_step(amp, optimizer, hidden, batch)
        # Python's cycle collector frees arrays at moments of its own choosing, which moves where
        # the pool puts the next ones: it runs between steps here, never inside one.
        enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(warmup):
                gc.collect()
                step(lambda name: counters.phase("warmup"))
            gc.collect()
            counters.reset()

            def phase(name: str) -> Any:
                return _Phase(counters, name, extra)

            step(phase)
        finally:
            if enabled:
                gc.enable()
        snapshot = counters.snapshot()
    return {name: snapshot.get(name, dict(dict.fromkeys(KINDS, 0), kernels={})) for name in PHASES}


class _Phase:
    """``counters.phase(name)``, then ``extra(name)`` inside it."""

    def __init__(self, counters: Any, name: str, extra: "Callable[[str], None] | None") -> None:
        self.inner, self.name, self.extra = counters.phase(name), name, extra

    def __enter__(self) -> None:
        self.inner.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.extra is not None and exc[0] is None:
                self.extra(self.name)
        finally:
            self.inner.__exit__(*exc)


def totals(counts: dict) -> dict:
    return {kind: sum(counts[p][kind] for p in PHASES) for kind in KINDS}


def kernel_launches(counts: dict) -> int:
    """Launches other than pointer-table writes."""
    return sum(n for phase in PHASES for name, n in counts[phase]["kernels"].items() if name != TABLE_WRITES)


def over_budget(case: str, counts: dict) -> list[str]:
    """What exceeds the case's budget, or launches more kernels than today (empty when neither)."""
    total = totals(counts)
    limits = dict(NO_TRANSFERS, **BUDGETS[case])
    problems = [f"{case}: {total[kind]} {kind} > {limit}" for kind, limit in limits.items() if total[kind] > limit]
    if kernel_launches(counts) > REACHED[case]:
        problems.append(f"{case}: {kernel_launches(counts)} kernel launches (besides pointer-table writes) > "
                        f"{REACHED[case]} today")
    return problems


def table(case: str, counts: dict) -> str:
    rows = [["phase", *KINDS, "kernels"]]
    for name in PHASES:
        c = counts[name]
        kernels = ", ".join(f"{k} {n}" for k, n in c["kernels"].items())
        rows.append([name, *(str(c[kind]) for kind in KINDS), kernels])
    total = totals(counts)
    rows.append(["total", *(str(total[kind]) for kind in KINDS), ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(KINDS) + 1)]
    lines = [f"{case}:"]
    for r in rows:
        lines.append("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                                      enumerate(zip(r[:-1], widths))) + "  " + r[-1])
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_launches.json")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    results = {}
    for case, spec in CASES.items():
        counts = count_step(spec["amp"], spec["optimizer"], hidden=args.hidden, batch=args.batch)
        results[case] = {"phases": counts, "total": totals(counts), "budget": dict(NO_TRANSFERS, **BUDGETS[case]),
                         "over_budget": over_budget(case, counts)}
        print(table(case, counts))
        print("  budget: " + ("met" if not results[case]["over_budget"] else "; ".join(results[case]["over_budget"])))
        print()
    from common import machine, write_json  # noqa: PLC0415 - the benchmarks' helpers, next to this file
    write_json(args.json, {"machine": machine(), "model": f"784-{args.hidden}-10", "batch": args.batch,
                           "cases": results})
    return results


if __name__ == "__main__":
    main()
