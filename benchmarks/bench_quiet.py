"""What it costs to keep NumPy's floating-point warnings out of an AMP step, and where.

An overflowing float16 step makes NumPy print "overflow encountered" and
"invalid value encountered"; PyTorch prints nothing. tinyamp enters
``np.errstate(all="ignore")`` once per autocast region, per backward call and
per ``GradScaler.scale`` (the optimizer's masked step and the scaler's kernels
had theirs already). The alternative, an errstate around every op's forward,
is measured here by wrapping ``Function.__call__`` (CPU, one process,
interleaved rounds):

  * one ``np.errstate`` enter/exit;
  * how many ops one AMP step runs (MLP 784-16-10, batch 4: the host-bound case);
  * that AMP step as tinyamp runs it, and with an errstate around every op.

    python benchmarks/bench_quiet.py [--json benchmarks/bench_quiet.json]
"""

from __future__ import annotations

import argparse

import numpy as np

import tinyamp as ta
from common import interleaved, machine, table, write_json
from tinyamp.autograd.function import Function


def amp_step_factory():
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(784, 16), ta.nn.ReLU(), ta.nn.Linear(16, 10))
    optimizer = ta.optim.SGD(model.parameters(), lr=0.01)
    scaler = ta.amp.GradScaler("cpu")
    x, y = ta.randn(4, 784), ta.randint(0, 10, (4,))

    def step() -> None:
        optimizer.zero_grad()
        with ta.autocast("cpu", dtype=ta.float16):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def ops_per_step(step) -> int:
    count = [0]
    original = Function.__call__

    def counting(self, *args):
        count[0] += 1
        return original(self, *args)

    step()
    Function.__call__ = counting
    try:
        step()
    finally:
        Function.__call__ = original
    return count[0]


def per_op_step_factory():
    """The same step with every op's call inside its own np.errstate (the placement not chosen)."""
    step = amp_step_factory()
    original = Function.__call__

    def quiet_call(self, *args):
        with np.errstate(all="ignore"):
            return original(self, *args)

    def wrapped() -> None:
        Function.__call__ = quiet_call
        try:
            step()
        finally:
            Function.__call__ = original

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_quiet.json")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    def errstate() -> None:
        with np.errstate(all="ignore"):
            pass

    small = interleaved({"np.errstate enter/exit": errstate}, rounds=args.rounds, min_time=0.1)
    ops = ops_per_step(amp_step_factory())
    steps = interleaved({"AMP step (errstate per region/backward/scale)": amp_step_factory(),
                         "AMP step (errstate per op)": per_op_step_factory()},
                        rounds=args.rounds, min_time=0.3)

    rows = [[name, f"{r['median'] * 1e6:.2f} us", f"{r['min'] * 1e6:.2f}", f"{r['max'] * 1e6:.2f}"]
            for name, r in {**small, **steps}.items()]
    print(table(rows, ["case", "median", "min", "max"]))
    chosen, per_op = (steps[k]["median"] for k in steps)
    print(f"\n{ops} ops per AMP step (MLP 784-16-10, batch 4); an errstate per op would add "
          f"{(per_op - chosen) * 1e6:.1f} us ({(per_op / chosen - 1) * 100:.1f}%)")
    write_json(args.json, {"machine": machine(), "errstate": small, "ops_per_step": ops, "steps": steps})


if __name__ == "__main__":
    main()
