"""A tour of autocast: one forward/backward of a tiny model, with the precision report.

Run it and read the output next to this file::

    python examples/autocast_tour.py            # float16 (the default)
    python examples/autocast_tour.py --dtype bfloat16

What to look for:

1. Which ops ran in float16 and which in float32, and the cast that autocast
   inserted in front of each op that needed one, with the rule that made it
   ("LOWER: float32 -> float16 for linear").
2. The weight-cast cache: the model's weights are float32; each is cast to
   float16 once per region, however many ops use it.
3. The backward pass: every forward cast has a backward cast that turns the
   gradient back into its source dtype, so the float32 weights receive
   float32 ``.grad`` while the products ran in float16.
4. Memory: what the tape keeps for backward, in float16 and float32 bytes.
"""

from __future__ import annotations

import argparse

import numpy as np

import tinyamp as ta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"],
                        help="the low-precision dtype autocast lowers to")
    parser.add_argument("--table", action="store_true", help="also print every op's precision tag")
    args = parser.parse_args()

    if args.table:
        # The tags live on the op classes; this is the same table autocast reads.
        print(ta.amp.op_table(), end="\n\n")

    ta.manual_seed(0)
    # A tiny classifier: Linear -> ReLU -> Linear. Its parameters are float32.
    model = ta.nn.Sequential(ta.nn.Linear(8, 16), ta.nn.ReLU(), ta.nn.Linear(16, 3))
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.standard_normal((4, 8)), dtype=ta.float32)
    labels = ta.tensor([0, 2, 1, 0])

    with ta.amp.trace() as report:
        # Only the forward pass and the loss go inside autocast (as in PyTorch).
        with ta.amp.autocast(dtype=args.dtype):
            # Two half-batches through the same model: each weight is cast to
            # float16 on its first use and taken from the cache on the second.
            losses = []
            for part in (slice(0, 2), slice(2, 4)):
                logits = model(x[part])                # linear is LOWER: runs in float16
                losses.append(ta.nn.functional.cross_entropy(logits, labels[part]))  # FP32
            loss = (losses[0] + losses[1]) / 2
        # Backward runs with autocast off; the recorded casts restore the dtypes.
        loss.backward()

    print(f"logits: {logits.dtype}, loss: {loss.dtype} = {loss.item():.4f}\n")
    print(report)

    print("\ncasts, in order (what autocast inserted, and what backward undid):")
    for cast in report.casts:
        print(f"  [{cast.phase:8}] {cast.source:>8} -> {cast.target:<8} {cast.rule}")

    print("\nparameters and their gradients (both float32):")
    for name, p in model.named_parameters():
        print(f"  {name:10} {str(p.dtype):8} grad {str(p.grad.dtype):8} shape {list(p.grad.shape)}")


if __name__ == "__main__":
    main()
