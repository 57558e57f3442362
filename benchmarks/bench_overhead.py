"""Per-op overhead and one float32 MLP training step against hand-written NumPy.

Measures (CPU, one process, interleaved rounds):
  * a 1-element add: raw NumPy, tinyamp without and with requires_grad;
  * one SGD training step of an MLP 784-1024-1024-10 at batch 128 in float32:
    tinyamp (nn.Linear, ReLU, cross_entropy, backward, optim.SGD) against the same
    step written directly in NumPy. Target: tinyamp within 1.15x of NumPy.

    python benchmarks/bench_overhead.py [--json benchmarks/bench_overhead.json]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_overhead.json")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

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
    write_json(args.json, {"machine": machine(), "ops": ops, "steps": steps, "step_ratio": ratio})


if __name__ == "__main__":
    main()
