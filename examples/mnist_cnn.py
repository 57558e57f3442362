"""Train a small convolutional net on MNIST with tinyamp's automatic mixed precision.

conv(1->8, 3x3) -> ReLU -> max-pool 2 -> conv(8->16, 3x3) -> ReLU -> max-pool 2 ->
flatten -> linear(16*7*7 -> 10). Under ``--amp`` (the default) autocast runs the
convolutions (im2col + GEMM with float32 accumulation) and the linear layer in
float16, ReLU and max-pooling in whatever dtype arrives (float16), and the loss
in float32. Same flags as ``mnist_mlp.py``, plus ``--channels``:

    python examples/mnist_cnn.py --amp --epochs 1

The training loop below is PyTorch's AMP recipe with ``import tinyamp as ta``;
``_common.py`` holds the flags, data loading and reporting around it.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common, also when imported by tests

import tinyamp as ta  # noqa: E402
import tinyamp.nn.functional as F  # noqa: E402
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


def forward(model: ta.nn.Module, x: ta.Tensor, y: ta.Tensor, prec: _common.Precision) -> tuple:
    """The logits and the float32 loss at the run's precision."""
    if prec.o2:
        # O2: the model itself is float16 (or bfloat16): cast the batch in and the logits
        # out, so the loss is computed in float32 (Apex's O2).
        logits = model(x.to(prec.low_dtype)).float()
        return logits, F.cross_entropy(logits, y)
    # O1: float32 weights; autocast runs the convolutions and the linear layer in float16
    # and the loss in float32. With --no-amp the region is disabled: all float32.
    with ta.amp.autocast(device_type=x.device.type, dtype=prec.low_dtype, enabled=prec.amp):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    return logits, loss


def train(model: ta.nn.Module, optimizer: ta.optim.Optimizer, scaler: ta.amp.GradScaler, loader: ta.data.DataLoader,
          prec: _common.Precision, log: _common.RunLog) -> None:
    """The AMP training loop; ``log`` only times, watches and reports."""
    for x, y in log.batches(loader):
        optimizer.zero_grad()
        with log.trace_first_step():             # --trace: which op ran in which dtype
            logits, loss = forward(model, x, y, prec)
            log.measure_activations(loss)         # step 1: what backward will need
            # Backward from loss * scale, so small float16 gradients do not flush to zero.
            scaler.scale(loss).backward()
        log.gradient_histogram(scaler, optimizer)  # last step: unscale_, then histogram the gradients
        scaler.step(optimizer)   # unscale the gradients; skip the update if one is inf or NaN
        scaler.update()          # halve the scale after a skipped step, double it after 2000 good ones
        log.step_done(loss, scaler, model, optimizer)


def main(argv: "list[str] | None" = None) -> dict:
    """Parse ``argv`` (default: the command line), train, print the report; return the JSON summary."""
    parser = _common.build_parser(os.path.basename(__file__), __doc__.split("\n\n")[0],
                                  epochs=DEFAULT_EPOCHS, lr=DEFAULT_LR)
    parser.add_argument("--channels", type=_common.positive_int, default=8,
                        help="channels of the first conv (the second has twice)")
    args = _common.parse_args(parser, argv)          # every flag checked before anything trains
    x_train, y_train, x_test, y_test = _common.load_data(args, flatten=False)
    device, prec = ta.device(args.device), _common.Precision(args)

    ta.manual_seed(args.seed)
    model = build_model(args.channels).to(device)
    if prec.o2:  # the model in float16/bfloat16; normalization layers (none here) would stay float32
        model.half(keep_norm_fp32=True) if prec.low_dtype == ta.float16 else model.bfloat16(keep_norm_fp32=True)
    # Under O2 the optimizer keeps float32 master weights and updates those.
    if args.optimizer == "adam":
        optimizer = ta.optim.Adam(model.parameters(), lr=args.lr, master_weights=prec.o2)
    else:
        optimizer = ta.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, master_weights=prec.o2)
    # Loss scaling only for float16: bfloat16 has float32's exponent range.
    scaler = ta.amp.GradScaler(init_scale=_common.LOSS_SCALE_INIT, enabled=prec.scaled)
    dataset = ta.data.TensorDataset(ta.tensor(x_train, device=device), ta.tensor(y_train, device=device))
    loader = ta.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, seed=args.seed)

    c = args.channels
    log = _common.RunLog(f"CNN conv{c}-conv{2 * c}-linear", args, prec, device, loader, (x_train, y_train, x_test))
    train(model, optimizer, scaler, loader, prec, log)
    accuracy = _common.evaluate(model, lambda x, y: forward(model, x, y, prec), x_test, y_test, device)
    return log.finish(accuracy, scaler)


if __name__ == "__main__":
    main()
