"""A guided study of mixed precision: six small experiments, each printing what happened and why.

Run it and read the output next to this file::

    python examples/autocast_tour.py               # all six sections
    python examples/autocast_tour.py --section 4   # one of them
    python examples/autocast_tour.py --table       # also print every op's precision tag

1. A cast recorded and reversed: autocast puts Cast nodes on the tape, and
   backward runs them the other way, so float32 weights get float32 gradients.
2. The weight cache: a float32 weight used twice in a region is converted once.
3. Accumulation: a float16 running sum stalls at 2048; gemm accumulates in
   float32 and rounds once.
4. Gradient underflow: small gradients flush to zero at the backward cast to
   float16, unless the loss is scaled first.
5. Swamping: float16 weights lose updates smaller than half an ulp; float32
   master weights keep them and let them add up.
6. The shadow run: a float32 twin of one step finds the first op where float16
   went wrong.
"""

from __future__ import annotations

import argparse
from typing import Callable

import numpy as np

import tinyamp as ta
import tinyamp.nn.functional as F
from tinyamp.kernels.gemm import gemm, gemm_fp16_accumulate

nn = ta.nn


def heading(number: int, title: str) -> None:
    print(f"\n{'=' * 78}\n{number}. {title}\n{'=' * 78}")


def tiny_model() -> nn.Module:
    ta.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def batch(n: int = 4) -> tuple[ta.Tensor, ta.Tensor]:
    rng = np.random.default_rng(0)
    return ta.tensor(rng.standard_normal((n, 8)), dtype=ta.float32), ta.tensor(rng.integers(0, 3, n))


# --------------------------------------------------------------------------
def cast_recorded_and_reversed(dtype: str) -> None:
    heading(1, "A cast recorded and reversed")
    model, (x, labels) = tiny_model(), batch()
    with ta.amp.trace() as report:
        with ta.amp.autocast(dtype=dtype):          # only forward and loss go inside (as in PyTorch)
            loss = F.cross_entropy(model(x), labels)
        loss.backward()                             # backward runs with autocast off
    print(report)
    print("\nWhat happened and why:")
    for cast in report.casts:
        print(f"  [{cast.phase:8}] {cast.source:>8} -> {cast.target:<8} {cast.rule}")
    print(f"- linear is LOWER: autocast inserted a Cast node per float32 input before linear recorded its inputs,\n"
          f"  so linear saved {dtype} tensors for backward (half the bytes).\n"
          f"- cross_entropy is FP32: its {dtype} logits were cast up.\n"
          f"- In backward each Cast ran the other way: the loss gradient went back down to {dtype}, and each\n"
          f"  weight's gradient came back up to float32. The parameters never changed dtype:")
    for name, p in model.named_parameters():
        print(f"    {name:9} {str(p.dtype):8} grad {str(p.grad.dtype):8}")


# --------------------------------------------------------------------------
def weight_cache(dtype: str) -> None:
    heading(2, "The weight cache")
    model, (x, _) = tiny_model(), batch()
    with ta.amp.trace() as report:
        with ta.amp.autocast(dtype=dtype):
            model(x[:2])                            # first use: each weight is converted
            model(x[2:])                            # second use: the converted arrays are reused
            info = ta.amp.autocast_cache_info()
            with ta.no_grad():
                model[0].weight.mul_(1.0)           # an in-place write bumps the weight's version ...
            model(x[:2])                            # ... so that weight is converted again
    t = report.totals()
    print(f"conversions that ran: {t['casts']}; cache misses {t['cache_misses']}, hits {t['cache_hits']}")
    print(f"cache after two forwards: {info['entries']} entries, {info['bytes']} bytes")
    print("What happened and why:\n"
          "- A float32 leaf that requires grad (a weight) is converted once per outermost autocast region and\n"
          "  kept, keyed on the weight and its version; each use still gets its own Cast node on the tape\n"
          "  (no conversion runs), so its gradient is summed in float32 at the weight.\n"
          "- The in-place write changed the version: the stale copy was not served, the weight was converted\n"
          f"  again: {t['cache_misses']} misses = 4 weights and biases + the rewritten weight; {t['cache_hits']} hits.\n"
          "- Activations (no grad, or not leaves) are converted at every use: they change every step.")


# --------------------------------------------------------------------------
def accumulation() -> None:
    heading(3, "float16 accumulation stalls at 2048; gemm accumulates in float32")
    for k in (1024, 2048, 4096, 8192):
        ones_row, ones_col = np.ones((1, k), np.float16), np.ones((k, 1), np.float16)
        slow = float(gemm_fp16_accumulate(ones_row, ones_col)[0, 0])
        fast = float(gemm(ones_row, ones_col)[0, 0])
        print(f"  sum of {k:5} ones:  float16 running sum {slow:7.0f}   gemm (float32 accumulator) {fast:7.0f}")
    print("What happened and why:\n"
          "- float16 has 11 significant bits: from 2048 up its spacing is 2, so 2048 + 1 rounds back to 2048\n"
          "  and the running sum stops growing, however many ones follow.\n"
          "- gemm (every LOWER contraction: linear, matmul, conv) adds the exact float16 products in float32\n"
          "  and rounds once at the end, as cuBLAS does with CUBLAS_COMPUTE_32F: 4096 and 8192 are exact.")


# --------------------------------------------------------------------------
def gradient_underflow(dtype: str) -> None:
    heading(4, "Gradient underflow, with and without loss scaling")
    model, (x, labels) = tiny_model(), batch(64)

    def backward_losses(scale: float) -> dict:
        with ta.amp.trace() as report:
            with ta.amp.autocast(dtype=dtype):
                # A loss weighted 1e-6 (as one small term of a sum of losses might be): its logit
                # gradients, (softmax - onehot) / 64 * 1e-6, are below half of float16's smallest
                # subnormal (2^-25 = 3e-8), where rounding gives zero.
                loss = F.cross_entropy(model(x), labels) * 1e-6
            (loss * scale).backward()
        model.zero_grad()
        down = [c for c in report.casts if c.phase == "backward" and c.target == dtype and c.rounding]
        return {"values": sum(c.rounding.elements for c in down), "zero": sum(c.rounding.underflow for c in down),
                "subnormal": sum(c.rounding.subnormal for c in down)}

    for scale in (1.0, 2.0 ** 16):
        r = backward_losses(scale)
        print(f"  loss scale {scale:>7g}: the float32 -> {dtype} gradient cast of the logits: {r['values']} values, "
              f"{r['zero']} became zero, {r['subnormal']} subnormal")
    print("What happened and why:\n"
          "- cross_entropy is FP32, so its logit gradient is float32, and the cast in front of it (a Cast node,\n"
          f"  or cross_entropy's own rounding where it reads {dtype} logits itself) rounds that gradient to\n"
          f"  {dtype} on its way back into the LOWER linear layer: the trace counts what it lost.\n"
          "- Unscaled, most of these gradients are below 2^-25 and flush to zero: the weights below learn\n"
          "  nothing from them. Multiplying the loss by 2^16 shifts every gradient 16 binades up, into\n"
          "  float16's normal range; GradScaler divides the float32 weight gradients by 2^16 afterwards.")
    if dtype == "bfloat16":
        print("- (bfloat16 has float32's exponent range: nothing underflows, which is why it needs no scaler.)")


# --------------------------------------------------------------------------
def swamping() -> None:
    heading(5, "Swamping, with and without float32 master weights")
    rng = np.random.default_rng(0)
    grads = rng.uniform(-1, 1, 1000).astype(np.float32)
    results = {}
    for master in (False, True):
        p = nn.Parameter(ta.ones(1000, dtype=ta.float16))
        optimizer = ta.optim.SGD([p], lr=2e-4, master_weights=master)
        optimizer.track_swamping(names={"w": p})
        for _ in range(10):
            p.grad = ta.tensor(grads, dtype=ta.float16)
            optimizer.step()
        results[master] = (p, optimizer.swamping()["w"])
    plain, with_master = results[False][0], results[True][0]
    row = results[True][1]
    print(f"  weights 1.0 in float16, 10 SGD steps of lr 2e-4 * g, |g| < 1 (updates up to 2e-4; half an ulp of 1.0 "
          f"is 2^-11 = 4.9e-4 above, 2.4e-4 below)")
    print(f"  float16 weights, no master: {int((plain != 1.0).sum()):4} of 1000 weights ever moved")
    print(f"  float32 master weights:     {int((with_master != 1.0).sum()):4} of 1000 float16 copies moved")
    print(f"  last step, with masters: {row.kept_fp32} update elements kept in float32, {row.vanished_fp16} of them "
          f"would vanish on float16 weights, {row.held_by_master} held in the master (not yet in the copy)")
    print("What happened and why:\n"
          "- Each update is below half an ulp of 1.0 in float16, so w16 + u rounds back to w16: ten steps,\n"
          "  no movement (the mixed-precision paper's first argument for master weights).\n"
          "- With master_weights=True the step updates a float32 copy (24 bits) and writes the rounded value\n"
          "  back: the small updates add up in the master until they cross half an ulp and move the copy.")


# --------------------------------------------------------------------------
def shadow_run() -> None:
    heading(6, "The shadow run finds the first bad op")
    ta.manual_seed(0)  # the same weights whether this section runs alone or after the others
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x, _ = batch(32)

    def step(m: nn.Module, x: ta.Tensor, lower_exp: bool) -> ta.Tensor:
        with ta.amp.autocast(lower_ops={"exp"} if lower_exp else None):
            z = ta.tanh(m(x)) * 0.25 + 12.0           # values near 12
            return ta.exp(z).mean() * 1e-5

    for lower in (False, True):
        with np.errstate(over="ignore", invalid="ignore"):
            report = ta.amp.shadow_run(lambda m, x: step(m, x, lower), model, x, scaler=ta.amp.GradScaler())
        if lower:
            print(report)
        bad = report.first_bad_forward
        where = "none" if bad is None else f"#{bad.index} {bad.name} ({bad.tag}, output {bad.outputs[0]})"
        print(f"  exp {'overridden to LOWER' if lower else 'with its FP32 tag'}: first bad op {where}")
    print("What happened and why:\n"
          "- shadow_run ran the step twice from the same state: under autocast, and as a float32 twin (every\n"
          "  autocast region disabled), then compared every op's output and input gradients.\n"
          "- exp(12) = 162755 does not fit float16 (max 65504): with exp forced to LOWER its output is inf, and\n"
          "  the report points at exp, not at the linear layers before it (their errors are ~5e-4, rounding).\n"
          "- With exp's FP32 tag the float16 input is cast up first and exp runs in float32: nothing overflows.")


SECTIONS: dict[int, Callable[[str], None]] = {
    1: cast_recorded_and_reversed, 2: weight_cache, 3: lambda dtype: accumulation(),
    4: gradient_underflow, 5: lambda dtype: swamping(), 6: lambda dtype: shadow_run(),
}


def main(argv: "list[str] | None" = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"],
                        help="the low-precision dtype autocast lowers to (sections 1, 2, 4)")
    parser.add_argument("--section", type=int, choices=sorted(SECTIONS), default=None, help="run only this one")
    parser.add_argument("--table", action="store_true", help="also print every op's precision tag")
    args = parser.parse_args(argv)
    if args.table:
        print(ta.amp.op_table(), end="\n\n")  # the tags live on the op classes: the table autocast reads
    for number in ([args.section] if args.section else sorted(SECTIONS)):
        SECTIONS[number](args.dtype)


if __name__ == "__main__":
    main()
