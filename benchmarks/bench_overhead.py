"""Per-op overhead, a float32 MLP step against hand-written NumPy, and the host time of a tiny AMP step.

Measures (CPU, one process, interleaved rounds):
  * a 1-element add: raw NumPy, tinyamp without and with requires_grad;
  * one SGD training step of an MLP 784-1024-1024-10 at batch 128 in float32:
    tinyamp (nn.Linear, ReLU, cross_entropy, backward, optim.SGD) against the same
    step written directly in NumPy. Target: tinyamp within 1.15x of NumPy.
  * host time of one training step of the MNIST MLP 784-16-10 at batch 4 (so small
    that the arithmetic is nothing and the framework's own work is everything):
    SGD with momentum, float32 and AMP (autocast float16 + GradScaler), tinyamp and
    PyTorch eager on the CPU (torch is optional: its rows are skipped when it is
    not importable; it runs with one intra-op thread, as NumPy's ufuncs do).
    Targets: tinyamp AMP <= 1.0x PyTorch's AMP step, tinyamp AMP <= 1.3x tinyamp
    float32.

    python benchmarks/bench_overhead.py [--json benchmarks/bench_overhead.json] [--no-torch]
"""

from __future__ import annotations

import argparse

import numpy as np

import tinyamp as ta
from common import interleaved, machine, table, write_json


def numpy_step_factory(sizes: list[int], batch: int, lr: float = 0.01):
    rng = np.random.default_rng(0)
    weights = [(rng.uniform(-1, 1, (o, i)) / np.sqrt(i)).astype(np.float32) for i, o in zip(sizes, sizes[1:])]
    biases = [np.zeros(o, np.float32) for o in sizes[1:]]
    x = rng.random((batch, sizes[0]), dtype=np.float32)
    y = rng.integers(0, sizes[-1], batch)

    def step() -> float:
        activations = [x]
        h = x
        for k, (w, b) in enumerate(zip(weights, biases)):
            h = h @ w.T + b
            if k < len(weights) - 1:
                np.maximum(h, 0, out=h)
            activations.append(h)
        logits = h
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = -log_probs[np.arange(batch), y].mean()
        grad = np.exp(log_probs)
        grad[np.arange(batch), y] -= 1
        grad /= batch
        for k in range(len(weights) - 1, -1, -1):
            a = activations[k]
            gw = grad.T @ a
            gb = grad.sum(axis=0)
            if k > 0:
                grad = grad @ weights[k]
                grad *= a > 0
            weights[k] -= lr * gw
            biases[k] -= lr * gb
        return float(loss)

    return step


def tinyamp_step_factory(sizes: list[int], batch: int, lr: float = 0.01):
    ta.manual_seed(0)
    layers = []
    for k, (i, o) in enumerate(zip(sizes, sizes[1:])):
        layers.append(ta.nn.Linear(i, o))
        if k < len(sizes) - 2:
            layers.append(ta.nn.ReLU())
    model = ta.nn.Sequential(*layers)
    optimizer = ta.optim.SGD(model.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.random((batch, sizes[0]), dtype=np.float32))
    y = ta.tensor(rng.integers(0, sizes[-1], batch))

    def step() -> float:
        optimizer.zero_grad()
        loss = ta.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


TINY = dict(batch=4, hidden=16)
TARGETS = {"tinyamp amp / torch amp": 1.0, "tinyamp amp / tinyamp float32": 1.3}


def tiny_tinyamp_step(amp: bool, batch: int, hidden: int):
    """One SGD-momentum step of MLP 784-hidden-10, with autocast float16 + GradScaler when ``amp``."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(784, hidden), ta.nn.ReLU(), ta.nn.Linear(hidden, 10))
    optimizer = ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = ta.amp.GradScaler(enabled=amp)
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.standard_normal((batch, 784)).astype(np.float32))
    y = ta.tensor(rng.integers(0, 10, batch))

    def step() -> None:
        optimizer.zero_grad()
        with ta.amp.autocast(enabled=amp, dtype=ta.float16):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def tiny_torch_step(torch, amp: bool, batch: int, hidden: int):
    """The same step in PyTorch eager on the CPU (``torch.autocast("cpu", float16)``, ``torch.amp.GradScaler``)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", enabled=amp)
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def import_torch(wanted: bool):
    """PyTorch with one intra-op thread, or None (not wanted or not installed)."""
    if not wanted:
        return None
    try:
        import torch  # noqa: PLC0415 - optional, for comparison only
    except ImportError:
        return None
    torch.set_num_threads(1)  # tiny tensors: threads only add synchronisation; NumPy's ufuncs use one
    return torch


def host_time(rounds: int, with_torch: bool) -> dict:
    """Interleaved rounds of the tiny MLP step; medians and the target ratios."""
    torch = import_torch(with_torch)
    cases = {"tinyamp float32": tiny_tinyamp_step(False, **TINY), "tinyamp amp": tiny_tinyamp_step(True, **TINY)}
    if torch is not None:
        cases["torch float32"] = tiny_torch_step(torch, False, **TINY)
        cases["torch amp"] = tiny_torch_step(torch, True, **TINY)
    timings = interleaved(cases, rounds=rounds, min_time=0.2, warmup=20)
    ratios = {"tinyamp amp / tinyamp float32": timings["tinyamp amp"]["median"] / timings["tinyamp float32"]["median"]}
    if torch is not None:
        ratios["tinyamp amp / torch amp"] = timings["tinyamp amp"]["median"] / timings["torch amp"]["median"]
        ratios["torch amp / torch float32"] = timings["torch amp"]["median"] / timings["torch float32"]["median"]
    return {"config": dict(TINY, model=f"784-{TINY['hidden']}-10", optimizer="SGD momentum 0.9",
                           torch=None if torch is None else torch.__version__),
            "timings": timings, "ratios": ratios,
            "targets": {name: {"target": limit, "value": ratios.get(name), "met": None if name not in ratios
                               else ratios[name] <= limit} for name, limit in TARGETS.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_overhead.json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch rows")
    parser.add_argument("--only-host-time", action="store_true", help="only the tiny MLP step (item 4)")
    args = parser.parse_args()

    tiny = host_time(max(args.rounds, 7), not args.no_torch)
    rows = [[name, f"{r['median'] * 1e6:.1f} us", f"{r['min'] * 1e6:.1f}", f"{r['max'] * 1e6:.1f}"]
            for name, r in tiny["timings"].items()]
    print(f"MLP 784-{TINY['hidden']}-10, batch {TINY['batch']}, SGD momentum, host time per step:")
    print(table(rows, ["case", "median", "min", "max"]))
    for name, ratio in tiny["ratios"].items():
        target = TARGETS.get(name)
        print(f"  {name} = {ratio:.3f}" + ("" if target is None else f" (target <= {target})"))
    if args.only_host_time:
        write_json(args.json, {"machine": machine(), "host_time": tiny})
        return

    a_np, b_np = np.ones(1, np.float32), np.ones(1, np.float32)
    a, b = ta.tensor([1.0]), ta.tensor([1.0])
    a_grad = ta.tensor([1.0], requires_grad=True)
    ops = interleaved({
        "numpy add": lambda: a_np + b_np,
        "tinyamp add": lambda: a + b,
        "tinyamp add, requires_grad": lambda: a_grad + b,
    }, rounds=args.rounds, min_time=0.1)

    sizes, batch = [784, 1024, 1024, 10], 128
    steps = interleaved({
        "numpy step": numpy_step_factory(sizes, batch),
        "tinyamp step": tinyamp_step_factory(sizes, batch),
    }, rounds=args.rounds, min_time=0.3)

    rows = [[name, f"{r['median'] * 1e6:.2f} us", f"{r['min'] * 1e6:.2f}", f"{r['max'] * 1e6:.2f}"]
            for name, r in ops.items()]
    rows += [[name, f"{r['median'] * 1e3:.3f} ms", f"{r['min'] * 1e3:.3f}", f"{r['max'] * 1e3:.3f}"]
             for name, r in steps.items()]
    print(table(rows, ["case", "median", "min", "max"]))
    ratio = steps["tinyamp step"]["median"] / steps["numpy step"]["median"]
    print(f"\nMLP 784-1024-1024-10, batch 128, float32: tinyamp / NumPy = {ratio:.3f} (target <= 1.15)")
    write_json(args.json, {"machine": machine(), "ops": ops, "steps": steps, "step_ratio": ratio,
                           "host_time": tiny})


if __name__ == "__main__":
    main()
