"""Train a 784-hidden-10 MLP on MNIST with tinyamp's automatic mixed precision.

This reproduces the "mixed precision training from scratch" experiment: the same
MLP (hidden 8192 by default) in float32 (``--no-amp``) and with AMP (``--amp``,
the default; ``--level O1`` or ``O2``; ``--dtype float16`` or ``bfloat16``),
reporting the memory split, the time per step, the loss scale and skipped steps,
and the test accuracy. Without ``--data`` it trains on the 5,000-image MNIST
subset bundled with tinyamp (4,000 train / 1,000 test), so it needs no download:

    python examples/mnist_mlp.py --amp
    python examples/mnist_mlp.py --no-amp --hidden 1024 --out plots/
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common, also when imported by tests

import tinyamp as ta  # noqa: E402
import _common  # noqa: E402

DEFAULT_EPOCHS = 5
DEFAULT_LR = 0.05


def build_model(hidden: int) -> ta.nn.Module:
    """Linear(784, hidden) -> ReLU -> Linear(hidden, 10): the write-up's model."""
    nn = ta.nn
    return nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def main(argv: "list[str] | None" = None) -> dict:
    """Parse ``argv`` (default: the command line), train, print the report; return the JSON summary."""
    parser = _common.build_parser(__doc__.split("\n\n")[0], epochs=DEFAULT_EPOCHS, lr=DEFAULT_LR)
    parser.add_argument("--hidden", type=int, default=8192, help="hidden units (8192: the write-up's model)")
    args = parser.parse_args(argv)
    data = _common.load_data(args, flatten=True)
    return _common.run(f"MLP 784-{args.hidden}-10", lambda: build_model(args.hidden), args, data)


if __name__ == "__main__":
    main()
