"""Train a small convolutional net on MNIST with tinyamp's automatic mixed precision.

conv(1->8, 3x3) -> ReLU -> max-pool 2 -> conv(8->16, 3x3) -> ReLU -> max-pool 2 ->
flatten -> linear(16*7*7 -> 10). Under ``--amp`` (the default) autocast runs the
convolutions (im2col + GEMM with float32 accumulation) and the linear layer in
float16, ReLU and max-pooling in whatever dtype arrives (float16), and the loss
in float32. Same flags as ``mnist_mlp.py``, plus ``--channels``:

    python examples/mnist_cnn.py --amp --epochs 1
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common, also when imported by tests

import tinyamp as ta  # noqa: E402
import _common  # noqa: E402

DEFAULT_EPOCHS = 2
DEFAULT_LR = 0.05


def build_model(channels: int = 8) -> ta.nn.Module:
    """Two conv-ReLU-pool stages (``channels`` then ``2 * channels``) and a linear classifier."""
    nn = ta.nn
    c1, c2 = channels, 2 * channels
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 28x28 -> 14x14
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 14x14 -> 7x7
        nn.Flatten(), nn.Linear(c2 * 7 * 7, 10),
    )


def main(argv: "list[str] | None" = None) -> dict:
    """Parse ``argv`` (default: the command line), train, print the report; return the JSON summary."""
    parser = _common.build_parser(__doc__.split("\n\n")[0], epochs=DEFAULT_EPOCHS, lr=DEFAULT_LR)
    parser.add_argument("--channels", type=int, default=8, help="channels of the first conv (the second has twice)")
    args = parser.parse_args(argv)
    data = _common.load_data(args, flatten=False)
    c = args.channels
    return _common.run(f"CNN conv{c}-conv{2 * c}-linear", lambda: build_model(c), args, data)


if __name__ == "__main__":
    main()
