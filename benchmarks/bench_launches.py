"""Kernel launches, allocations, copies, syncs and bytes moved per phase of one training step, on the CUDA stand-in.

Counts, not times: the stand-in (cupy_standin) runs every CuPy code path
of tinyamp on the CPU and counts what a GPU would be asked to do, per phase of
the step, deterministically. Case: the MNIST MLP 784-H-10 with the batch already
on the device, in steady state (the third step; the first two fill the caches):

- ``float32``: plain float32, SGD with momentum;
- ``amp-sgd``: autocast float16 + GradScaler + SGD with momentum;
- ``amp-adam``: autocast float16 + GradScaler + Adam.

Phases, in the order they run: forward (autocast region, model, loss), scale,
backward, unscale, step, update, zero_grad. Budgets (issue 10, asserted by
tests/cuda/test_launch_budget.py): no host<->device copy and no synchronisation at
all; at most 30 launches and 30 allocations for amp-sgd, 25 launches for
float32, 35 launches for amp-adam.

Bytes: every launch's device reads and writes (``bytes_read``/``bytes_written``,
per kernel), summed per step and set against the step's floor
(:func:`floor_bytes`: each input, weight, activation and gradient read and
written the fewest times the math needs, one node per op; the derivation is in
benchmarks/RESULTS.md). The ``wide`` cases are the H200 reference run's MLP
784-8192-10 at batch 8192 scaled by 1/8 in every size but the classes
(98-1024-10, batch 1024), so that, as there, the batch x hidden activations
dominate; tests/cuda/test_launch_budget.py holds the AMP step there to
``BYTES_BUDGET`` times its floor.

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
BYTES = ("bytes_read", "bytes_written")
CASES = {"float32": dict(amp=False, optimizer="sgd"), "amp-sgd": dict(amp=True, optimizer="sgd"),
         "amp-adam": dict(amp=True, optimizer="adam")}
BUDGETS = {"float32": {"launches": 25}, "amp-sgd": {"launches": 30, "allocations": 30},
           "amp-adam": {"launches": 35}}
NO_TRANSFERS = {"h2d": 0, "d2h": 0, "syncs": 0}
# The kernels a step launches today, without the pointer-table writes (a new set of gradient
# addresses costs one launch per table; whether a step sees one depends on where the pool puts
# the gradients, i.e. on what ran before). tests/cuda/test_launch_budget.py holds the step to these:
# one launch more than today fails, so a regression shows before it reaches the budget.
REACHED = {"float32": 15, "amp-sgd": 25, "amp-adam": 25}
TABLE_WRITES = "tinyamp_fill_pointers"
WIDE = dict(inputs=98, hidden=1024, batch=1024)  # 784-8192-10 at batch 8192, every size but C over 8
BYTES_BUDGET = 1.1  # the AMP step of the wide MLP moves at most this many times its floor (the issue: 1.3)
CLASSES = 10


def make_step(amp: bool, optimizer: str, hidden: int = 64, batch: int = 32, seed: int = 0,
              inputs: int = 784) -> Callable:
    """One training step of the MLP inputs-hidden-10 on ``cuda``; ``step(phase)`` wraps each phase in
    ``phase(name)``."""
    ta.manual_seed(seed)
    model = ta.nn.Sequential(ta.nn.Linear(inputs, hidden), ta.nn.ReLU(), ta.nn.Linear(hidden, CLASSES)).to("cuda")
    opt = (ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else ta.optim.Adam(model.parameters(), lr=1e-3))
    scaler = ta.amp.GradScaler("cuda", enabled=amp)
    rng = np.random.default_rng(seed)
    x = ta.tensor(rng.standard_normal((batch, inputs)).astype(np.float32), device="cuda")
    y = ta.tensor(rng.integers(0, CLASSES, batch), device="cuda")

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
               extra: "Callable[[str], None] | None" = None, inputs: int = 784) -> dict:
    """{phase: {kind: n, "kernels": {name: n}, "bytes": {name: {"read": n, "written": n}}}} for the step
    after ``warmup`` steps, on the stand-in.

    ``extra(phase)`` runs at the end of each phase of the counted step (the
    budget test adds a launch or a copy there to see the budget fail).
    """
    return count_phases(lambda: make_step(amp, optimizer, hidden, batch, inputs=inputs), warmup=warmup, extra=extra)


def count_phases(make: Callable[[], Callable], *, warmup: int = 2,
                 extra: "Callable[[str], None] | None" = None) -> dict:
    """:func:`count_step`'s counts for any ``step(phase)`` that ``make()`` builds on ``cuda`` (the stand-in)."""
    with backend.use_cuda_standin():  # a fresh activation: device caches and tables start empty
        # Start from an empty pool too, so that which addresses come back (and so which pointer
        # tables are new) depends on this step's allocations alone, not on what ran before.
        backend.cupy().get_default_memory_pool().free_all_blocks()
        ta.amp.clear_autocast_cache()
        counters = ta.cuda.standin_counters()
        step = make()
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
    return {name: snapshot.get(name, dict(dict.fromkeys(KINDS + BYTES, 0), kernels={}, bytes={}))
            for name in PHASES}


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
    return {kind: sum(counts[p][kind] for p in PHASES) for kind in KINDS + BYTES}


def step_bytes(counts: dict) -> int:
    """Bytes the step reads and writes, over every phase."""
    return sum(counts[p]["bytes_read"] + counts[p]["bytes_written"] for p in PHASES)


def floor_rows(amp: bool, optimizer: str, *, inputs: int = 784, hidden: int = 64, batch: int = 32,
               classes: int = CLASSES) -> list[tuple[str, int, int]]:
    """(what, bytes read, bytes written) of the fewest bytes one step of the MLP must move.

    One node per op (as PyTorch's graph has them), each reading every input
    once and writing every output once, in the dtype autocast gives it:
    activations ``a`` bytes an element (2 under AMP, else 4), master weights,
    their gradients and optimizer state 4, labels 8 (int64). Under AMP the
    16-bit weight copies are written once by the optimizer step (they change
    only there) and read by forward and backward; the input batch is rounded
    to float16 once and that copy read by both GEMMs that need it; a float32
    weight's gradient is written once as float32 (the 16-bit product widened);
    ``unscale_`` reads and writes every gradient once (it leaves them
    unscaled for the user, as PyTorch's does). Scalars (the loss, the scale,
    found_inf, step counters, hyper-parameters) are left out: under a hundred
    bytes. ``x`` needs no gradient, so no dx is computed for it.
    """
    b, k, h, c = batch, inputs, hidden, classes
    a, f = (2, 4) if amp else (4, 4)
    params = h * k + h + c * h + c
    states = 1 if optimizer == "sgd" else 2  # momentum buffer; or Adam's m and v
    rows = []
    if amp:
        rows.append(("forward: round x to float16", f * b * k, a * b * k))
    rows += [
        ("forward: linear 1 (x, W1, b1 -> z1)", a * (b * k + h * k + h), a * b * h),
        ("forward: relu (z1 -> h)", a * b * h, a * b * h),
        ("forward: linear 2 (h, W2, b2 -> z2)", a * (b * h + c * h + c), a * b * c),
        ("forward: cross_entropy (z2, y -> loss, row log-sum-exp)", a * b * c + 8 * b, 4 * b),
        ("backward: cross_entropy (z2, y, lse -> g2)", a * b * c + 8 * b + 4 * b, a * b * c),
        ("backward: linear 2 dh = g2 @ W2", a * (b * c + c * h), a * b * h),
        ("backward: linear 2 dW2 = g2^T @ h", a * (b * c + b * h), f * c * h),
        ("backward: linear 2 db2 = sum g2", a * b * c, f * c),
        ("backward: relu (dh, h -> g1)", 2 * a * b * h, a * b * h),
        ("backward: linear 1 dW1 = g1^T @ x", a * (b * h + b * k), f * h * k),
        ("backward: linear 1 db1 = sum g1", a * b * h, f * h),
    ]
    if amp:
        rows.append(("unscale_: every gradient", f * params, f * params))
    rows.append((f"step: {optimizer} (weights, gradients, state -> weights, state"
                 + (", 16-bit copies)" if amp else ")"),
                 f * params * (2 + states), f * params * (1 + states) + (2 * params if amp else 0)))
    return rows


def floor_bytes(amp: bool, optimizer: str, **sizes: int) -> int:
    """The step's floor in bytes: :func:`floor_rows` summed."""
    return sum(read + written for _, read, written in floor_rows(amp, optimizer, **sizes))


def bytes_ratio(case: str, counts: dict, **sizes: int) -> float:
    """Bytes the counted step moved over its floor."""
    spec = CASES[case]
    return step_bytes(counts) / floor_bytes(spec["amp"], spec["optimizer"], **sizes)


def over_bytes_budget(counts: dict) -> list[str]:
    """The AMP SGD step of the ``WIDE`` MLP over ``BYTES_BUDGET`` times its floor (empty when within)."""
    ratio = bytes_ratio("amp-sgd", counts, **WIDE)
    if ratio > BYTES_BUDGET:
        return [f"amp-sgd wide: {step_bytes(counts)} bytes = {ratio:.3f}x the floor "
                f"{floor_bytes(True, 'sgd', **WIDE)} > {BYTES_BUDGET}x"]
    return []


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


COLUMNS = KINDS + BYTES


def table(case: str, counts: dict) -> str:
    rows = [["phase", *COLUMNS, "kernels"]]
    for name in PHASES:
        c = counts[name]
        kernels = ", ".join(f"{k} {n}" for k, n in c["kernels"].items())
        rows.append([name, *(str(c[kind]) for kind in COLUMNS), kernels])
    total = totals(counts)
    rows.append(["total", *(str(total[kind]) for kind in COLUMNS), ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) + 1)]
    lines = [f"{case}:"]
    for r in rows:
        lines.append("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                                      enumerate(zip(r[:-1], widths))) + "  " + r[-1])
    return "\n".join(lines)


def bytes_by_kernel(counts: dict) -> dict[str, list[int]]:
    """{"phase/kernel": [read, written]} over the step."""
    merged: dict[str, list[int]] = {}
    for phase in PHASES:
        for kernel, moved in counts[phase]["bytes"].items():
            pair = merged.setdefault(f"{phase}/{kernel}", [0, 0])
            pair[0] += moved["read"]
            pair[1] += moved["written"]
    return merged


def bytes_table(case: str, counts: dict, sizes: dict) -> str:
    """Bytes per kernel over the step, the step's total and its floor (with the floor's rows)."""
    spec = CASES[case]
    merged = bytes_by_kernel(counts)
    lines = [f"{case} bytes, MLP {sizes['inputs']}-{sizes['hidden']}-{CLASSES}, batch {sizes['batch']}:",
             f"  {'phase/kernel':48s} {'read':>12s} {'written':>12s}"]
    for name, (read, written) in sorted(merged.items(), key=lambda item: -sum(item[1])):
        lines.append(f"  {name:48s} {read:12d} {written:12d}")
    floor = floor_rows(spec["amp"], spec["optimizer"], **sizes)
    lines.append(f"  floor ({len(floor)} ops):")
    for what, read, written in floor:
        lines.append(f"    {what:62s} {read:12d} {written:12d}")
    total, least = step_bytes(counts), floor_bytes(spec["amp"], spec["optimizer"], **sizes)
    lines.append(f"  bytes per step {total}, floor {least}: {total / least:.3f}x")
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_launches.json")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    results = {}
    small = dict(inputs=784, hidden=args.hidden, batch=args.batch)
    for case, spec in CASES.items():
        counts = count_step(spec["amp"], spec["optimizer"], hidden=args.hidden, batch=args.batch)
        least = floor_bytes(spec["amp"], spec["optimizer"], **small)
        results[case] = {"phases": counts, "total": totals(counts), "budget": dict(NO_TRANSFERS, **BUDGETS[case]),
                         "over_budget": over_budget(case, counts), "bytes_per_step": step_bytes(counts),
                         "floor_bytes": least, "bytes_over_floor": step_bytes(counts) / least}
        print(table(case, counts))
        print("  budget: " + ("met" if not results[case]["over_budget"] else "; ".join(results[case]["over_budget"])))
        print(f"  bytes per step {step_bytes(counts)}, floor {least}: {step_bytes(counts) / least:.3f}x")
        print()
    wide = {}
    for case, spec in CASES.items():
        counts = count_step(spec["amp"], spec["optimizer"], **WIDE)
        least = floor_bytes(spec["amp"], spec["optimizer"], **WIDE)
        wide[case] = {"phases": counts, "bytes_per_step": step_bytes(counts), "floor_bytes": least,
                      "bytes_over_floor": step_bytes(counts) / least,
                      "floor_rows": floor_rows(spec["amp"], spec["optimizer"], **WIDE)}
        print(bytes_table(case, counts, WIDE))
        if case == "amp-sgd":
            problems = over_bytes_budget(counts)
            print(f"  bytes budget ({BYTES_BUDGET}x the floor): " + ("met" if not problems else "; ".join(problems)))
        print()
    from common import machine, write_json  # noqa: PLC0415 - the benchmarks' helpers, next to this file
    write_json(args.json, {"machine": machine(), "model": f"784-{args.hidden}-10", "batch": args.batch,
                           "cases": results, "wide": {"sizes": WIDE, "cases": wide}})
    return results


if __name__ == "__main__":
    main()
