"""What a reader steps through at run time: the tinyamp functions and files of one autocast ``nn.Linear``.

One warm autocast ``nn.Linear(784, 16)`` forward on the CPU (the first layer of
the README's MLP, float32 weights, a float32 batch, the weight-cast cache warm)
and the backward of that one node, counted with ``sys.setprofile``: every
Python function of the ``tinyamp`` package entered, by (file, name, first
line), numba kernels included (numba reports a jitted call under its Python
code). The CUDA stand-in (``cupy_standin/``) is not tinyamp and is not counted.
Counts, not timings: they do not change from run to run. Issue 27's budget:
forward <= 42 functions in <= 14 files, backward <= 42 in <= 13
(``tests/benchmarks/test_count_calls.py``). The review's figures before the
layout change (main at a84f59a): 50 functions in 16 files, and 49 in 14.

    python benchmarks/count_calls.py [--json PATH] [-v]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tinyamp as ta  # noqa: E402
from benchmarks.common import machine, table, write_json  # noqa: E402

PACKAGE = os.path.dirname(os.path.abspath(ta.__file__)) + os.sep


def count(fn: Callable[[], Any]) -> tuple[Any, dict]:
    """Run ``fn`` under a profiler; (its result, {"calls", "functions", "files", "list"})."""
    calls: list[tuple[str, str, int]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(PACKAGE):
                calls.append((os.path.relpath(code.co_filename, os.path.dirname(PACKAGE[:-1])), code.co_name,
                              code.co_firstlineno))

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    distinct = collections.Counter(calls)
    return out, {"calls": len(calls), "functions": len(distinct), "files": len({c[0] for c in calls}),
                 "list": [f"{f}:{line} {name} x{n}" for (f, name, line), n in distinct.items()]}


def measure() -> dict:
    """The counts of one warm autocast Linear forward and of its node's backward (a fresh model, seed 0)."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(784, 16), ta.nn.ReLU(), ta.nn.Linear(16, 10))
    opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = ta.amp.GradScaler()
    x = ta.randn(4, 784)
    y = ta.randint(0, 10, (4,))
    for _ in range(3):  # warm: kernels compiled, plans and caches filled
        opt.zero_grad()
        with ta.amp.autocast():
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    opt.zero_grad()
    first = model[0]
    with ta.amp.autocast():
        h, forward = count(lambda: first(x))
        ta.nn.functional.cross_entropy(model[2](model[1](h)), y)  # the rest of the step, as in training
    seed = ta.ones_like(h)
    _, backward = count(lambda: h.backward(seed))
    return {"forward": forward, "backward": backward}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "count_calls.json"))
    ap.add_argument("-v", "--verbose", action="store_true", help="list every function counted")
    args = ap.parse_args()
    counts = measure()
    rows = [[phase, str(c["calls"]), str(c["functions"]), str(c["files"])] for phase, c in counts.items()]
    print("one warm autocast nn.Linear(784, 16) on the CPU (tinyamp functions only)")
    print(table(rows, ["phase", "calls", "functions", "files"]))
    if args.verbose:
        for phase, c in counts.items():
            print(f"\n{phase}:\n  " + "\n  ".join(c["list"]))
    write_json(args.json, {"machine": machine(), **counts})


if __name__ == "__main__":
    main()
