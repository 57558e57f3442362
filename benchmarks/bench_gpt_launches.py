"""Kernel launches and bytes per phase of the GPT AMP training step, on the CUDA stand-in (issue 28).

The step is ``common.gpt_training``'s nanoGPT shape at the stand-in size of the
issue (``GPT``: 4 blocks, C=128, 4 heads, T=64, batch 4, vocabulary 512), float16
autocast + GradScaler + AdamW, counted as ``bench_launches`` counts the MLP: in
steady state (after two steps), per phase, on the stand-in, which counts what a
GPU would be asked to do. Budgets (issue 28, asserted by
tests/benchmarks/test_gpt_budget.py): no host<->device copy and no synchronisation;
at most ``LAUNCH_BUDGET`` launches a step and ``BLOCK_LAUNCH_BUDGET`` a block (what
one more block adds: the step at 4 blocks against the step at 2, halved), at most
``BYTES_BUDGET`` times the step's floor in bytes (:func:`floor_rows`, derived in
benchmarks/RESULTS.md), and no more kernel launches than today (``REACHED``).

    python benchmarks/bench_gpt_launches.py [--json benchmarks/bench_gpt_launches.json] [--one-by-one]

``--one-by-one`` also counts the step with the fused CUDA kernels turned on one
dispatch at a time (``FUSED_ON_GPU`` of kernels/gelu.py, layer_norm.py,
attention.py, embedding.py), from none to all: what each kernel took off.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tinyamp as ta  # noqa: E402
from tinyamp.kernels import attention, embedding, gelu, layer_norm  # noqa: E402

import bench_launches  # noqa: E402
import common  # noqa: E402

PHASES = bench_launches.PHASES
GPT = dict(blocks=4, channels=128, heads=4, seq=64, batch=4, vocab=512)
LAUNCH_BUDGET = 250
BLOCK_LAUNCH_BUDGET = 50
BYTES_BUDGET = 1.3
# The kernels the step launches today, pointer-table writes aside (bench_launches.REACHED's rule): one more fails
# the budget test, so a regression shows before it reaches the budget.
REACHED = 234


def make_step(**sizes: int) -> Callable:
    """One AMP training step of the GPT on ``cuda``; ``step(phase)`` wraps each phase in ``phase(name)``."""
    g = common.gpt_training(ta, device="cuda", **dict(GPT, **sizes))

    def step(phase: Callable[[str], Any]) -> None:
        with phase("forward"):
            loss = g.forward(g.idx, g.targets)
        with phase("scale"):
            scaled = g.scaler.scale(loss)
        with phase("backward"):
            scaled.backward()
        with phase("unscale"):
            g.scaler.unscale_(g.opt)
        with phase("step"):
            g.scaler.step(g.opt)
        with phase("update"):
            g.scaler.update()
        with phase("zero_grad"):
            g.opt.zero_grad()

    return step


def count_step(*, extra: "Callable[[str], None] | None" = None, **sizes: int) -> dict:
    """``bench_launches.count_step``'s counts for the GPT step (``sizes`` override ``GPT``)."""
    return bench_launches.count_phases(lambda: make_step(**sizes), extra=extra)


def launches(counts: dict) -> int:
    """Every launch of the step (pointer-table writes included)."""
    return sum(counts[p]["launches"] for p in PHASES)


def block_launches(counts: dict, fewer: dict, blocks: int, fewer_blocks: int) -> float:
    """What one block adds to the step: the difference of two block counts' kernel launches, per block.

    Pointer-table writes are left out (``bench_launches.kernel_launches``): whether a step rewrites the
    optimizer's tables (8 launches here) depends on where the pool put the gradients, not on the blocks.
    """
    return (bench_launches.kernel_launches(counts) - bench_launches.kernel_launches(fewer)) / (blocks - fewer_blocks)


def floor_rows(*, blocks: int, channels: int, heads: int, seq: int, batch: int, vocab: int
               ) -> list[tuple[str, int, int]]:
    """(what, bytes read, bytes written) of the fewest bytes one AMP step of the GPT must move.

    One node per op of PyTorch's AMP graph of this model (float16 autocast,
    float32 parameters), each reading every input once and writing every
    output once in the dtype autocast gives it (a = 2 bytes for float16, f = 4
    for float32, 8 for int64 indices): the float16 casts autocast inserts
    (each LayerNorm's float32 output before the Linear reading it, the logits
    before cross-entropy) and the casts of the gradients back to the dtypes of
    their inputs (PyTorch's engine makes them); a mixed-dtype residual add reads
    float16 and float32 directly (PyTorch's add has no Cast node); each residual
    junction adds its two gradients (autograd's accumulation). As in
    ``bench_launches.floor_rows``: the 16-bit weight copies are written once by
    the optimizer step and read by the forward and backward GEMMs; a float32
    weight's gradient is written once as float32; ``unscale_`` reads and writes
    every gradient; AdamW reads weight, gradient, m, v and writes weight, m, v
    and the 16-bit copy of each Linear weight. Attention reads q, k, v and writes
    its output and log-sum-exp (no T x T scores); its backward reads q, k, v,
    the output, its gradient and the log-sum-exp and writes dq, dk, dv.
    Scalars (the loss, the scale, found_inf, step counts) are left out.
    """
    n, c, t, v, lb = batch * seq, channels, seq, vocab, blocks
    a, f = 2, 4
    stats = 8 * n  # LayerNorm's float32 mean and rstd per row
    lse = 4 * n * heads
    linears = [("qkv", c, 3 * c), ("proj", c, c), ("fc", c, 4 * c), ("out", 4 * c, c)]
    block_params = sum(i * o + o for _, i, o in linears) + 4 * c
    linear_params = lb * sum(i * o + o for _, i, o in linears) + c * v + v
    params = v * c + t * c + lb * block_params + 2 * c + c * v + v

    def linear_rows(name: str, i: int, o: int, fwd: bool) -> list[tuple[str, int, int]]:
        if fwd:
            return [(f"forward: {name} linear", a * (n * i + i * o + o), a * n * o)]
        return [(f"backward: {name} dx = g @ W", a * (n * o + i * o), a * n * i),
                (f"backward: {name} dW = g^T @ x", a * (n * o + n * i), f * i * o),
                (f"backward: {name} db = sum g", a * n * o, f * o)]

    def ln_rows(name: str, fwd: bool) -> list[tuple[str, int, int]]:
        if fwd:
            return [(f"forward: {name} layer_norm", f * (n * c + 2 * c), f * n * c + stats),
                    (f"forward: {name} cast to float16", f * n * c, a * n * c)]
        return [(f"backward: {name} cast's gradient to float32", a * n * c, f * n * c),
                (f"backward: {name} layer_norm (dx, dw, db)", f * (2 * n * c + c) + stats, f * (n * c + 2 * c))]

    rows = [("forward: token embedding", 8 * n + f * n * c, f * n * c),
            ("forward: position embedding", 8 * t + f * t * c, f * t * c),
            ("forward: tokens + positions", f * (n * c + t * c), f * n * c)]
    block_forward = (ln_rows("ln1", True) + linear_rows("qkv", c, 3 * c, True)
                     + [("forward: attention (q, k, v -> y, lse)", a * 3 * n * c, a * n * c + lse)]
                     + linear_rows("proj", c, c, True)
                     + [("forward: residual add (x, float16 y)", (f + a) * n * c, f * n * c)]
                     + ln_rows("ln2", True) + linear_rows("fc", c, 4 * c, True)
                     + [("forward: gelu", a * 4 * n * c, a * 4 * n * c)]
                     + linear_rows("out", 4 * c, c, True)
                     + [("forward: residual add (x, float16 y)", (f + a) * n * c, f * n * c)])
    rows += [(f"{what} x{lb}", lb * r, lb * w) for what, r, w in block_forward]
    rows += ln_rows("final", True) + linear_rows("head", c, v, True)
    rows += [("forward: cast logits to float32", a * n * v, f * n * v),
             ("forward: cross_entropy (logits, targets -> loss, lse)", f * n * v + 8 * n, 4 * n),
             ("backward: cross_entropy (logits, targets, lse -> g)", f * n * v + 8 * n + 4 * n, f * n * v),
             ("backward: logits' gradient to float16", f * n * v, a * n * v)]
    rows += linear_rows("head", c, v, False) + ln_rows("final", False)
    block_backward = ([("backward: residual gradient to float16", f * n * c, a * n * c)]
                      + linear_rows("out", 4 * c, c, False)
                      + [("backward: gelu (gy, x -> dx)", 2 * a * 4 * n * c, a * 4 * n * c)]
                      + linear_rows("fc", c, 4 * c, False) + ln_rows("ln2", False)
                      + [("backward: residual junction (g + g')", 2 * f * n * c, f * n * c),
                         ("backward: residual gradient to float16", f * n * c, a * n * c)]
                      + linear_rows("proj", c, c, False)
                      + [("backward: attention (q, k, v, y, dy, lse -> dq, dk, dv)",
                          a * (3 * n * c + 2 * n * c) + lse, a * 3 * n * c)]
                      + linear_rows("qkv", c, 3 * c, False) + ln_rows("ln1", False)
                      + [("backward: residual junction (g + g')", 2 * f * n * c, f * n * c)])
    rows += [(f"{what} x{lb}", lb * r, lb * w) for what, r, w in block_backward]
    rows += [("backward: positions' gradient (sum over the batch)", f * n * c, f * t * c),
             ("backward: token embedding (scatter-add)", f * n * c + 8 * n, f * v * c),
             ("backward: position embedding (scatter-add)", f * t * c + 8 * t, f * t * c),
             ("unscale_: every gradient", f * params, f * params),
             ("step: adamw (weights, gradients, m, v -> weights, m, v, 16-bit Linear copies)",
              4 * f * params, 3 * f * params + a * linear_params)]
    return rows


def floor_bytes(**sizes: int) -> int:
    """The step's floor in bytes: :func:`floor_rows` summed."""
    return sum(read + written for _, read, written in floor_rows(**dict(GPT, **sizes)))


def bytes_ratio(counts: dict, **sizes: int) -> float:
    return bench_launches.step_bytes(counts) / floor_bytes(**sizes)


def over_budget(counts: dict, per_block: float) -> list[str]:
    """What exceeds the GPT step's budgets (empty when within)."""
    total = bench_launches.totals(counts)
    problems = [f"gpt: {total[kind]} {kind} > 0" for kind in ("h2d", "d2h", "syncs") if total[kind]]
    if launches(counts) > LAUNCH_BUDGET:
        problems.append(f"gpt: {launches(counts)} launches > {LAUNCH_BUDGET}")
    if per_block > BLOCK_LAUNCH_BUDGET:
        problems.append(f"gpt: {per_block:g} launches per block > {BLOCK_LAUNCH_BUDGET}")
    if bench_launches.kernel_launches(counts) > REACHED:
        problems.append(f"gpt: {bench_launches.kernel_launches(counts)} kernel launches (besides pointer-table "
                        f"writes) > {REACHED} today")
    ratio = bytes_ratio(counts)
    if ratio > BYTES_BUDGET:
        problems.append(f"gpt: {bench_launches.step_bytes(counts)} bytes = {ratio:.3f}x the floor "
                        f"{floor_bytes()} > {BYTES_BUDGET}x")
    return problems


FUSED = (("gelu", gelu), ("layer_norm", layer_norm), ("attention", attention), ("embedding", embedding))


def one_by_one() -> list[tuple[str, int, int]]:
    """(kernels on, launches, bytes) of the step with no fused CUDA kernel, then each one added in turn."""
    saved = [module.FUSED_ON_GPU for _, module in FUSED]
    rows = []
    try:
        for on in range(len(FUSED) + 1):
            for k, (_, module) in enumerate(FUSED):
                module.FUSED_ON_GPU = k < on
            counts = count_step()
            rows.append(("+".join(name for name, _ in FUSED[:on]) or "none", launches(counts),
                         bench_launches.step_bytes(counts)))
    finally:
        for (_, module), value in zip(FUSED, saved):
            module.FUSED_ON_GPU = value
    return rows


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_gpt_launches.json")
    parser.add_argument("--one-by-one", action="store_true", help="also count with each fused kernel added in turn")
    args = parser.parse_args(argv)
    steps = one_by_one() if args.one_by_one else []
    for name, n, moved in steps:
        print(f"  fused kernels on: {name:40s} {n:5d} launches {moved:14d} bytes ({moved / floor_bytes():.3f}x)")
    counts = count_step()
    fewer = count_step(blocks=2)
    per_block = block_launches(counts, fewer, GPT["blocks"], 2)
    print(bench_launches.table("gpt", counts))
    print(f"  launches {launches(counts)} (budget {LAUNCH_BUDGET}), per block {per_block:g} "
          f"(budget {BLOCK_LAUNCH_BUDGET})")
    merged = bench_launches.bytes_by_kernel(counts)
    print(f"  {'phase/kernel':56s} {'read':>12s} {'written':>12s}")
    for name, (read, written) in sorted(merged.items(), key=lambda item: -sum(item[1]))[:25]:
        print(f"  {name:56s} {read:12d} {written:12d}")
    rows = floor_rows(**GPT)
    total, least = bench_launches.step_bytes(counts), floor_bytes()
    print(f"  floor ({len(rows)} rows): {least} bytes; the step {total}: {total / least:.3f}x "
          f"(budget {BYTES_BUDGET}x)")
    problems = over_budget(counts, per_block)
    print("  budget: " + ("met" if not problems else "; ".join(problems)))
    common.write_json(args.json, {"machine": common.machine(), "sizes": GPT, "phases": counts,
                                  "launches": launches(counts), "launches_per_block": per_block,
                                  "bytes_per_step": total, "floor_bytes": least, "bytes_over_floor": total / least,
                                  "floor_rows": rows, "over_budget": problems, "one_by_one": steps})
    return counts


if __name__ == "__main__":
    main()
