"""Train a 784-hidden-10 MLP on MNIST with tinyamp's automatic mixed precision.

This reproduces the "mixed precision training from scratch" experiment: the same
MLP (hidden 8192 by default) in float32 (``--no-amp``) and with AMP (``--amp``,
the default; ``--level O1`` or ``O2``; ``--dtype float16`` or ``bfloat16``),
reporting the memory split, the time per step, the loss scale and skipped steps,
and the test accuracy. Without ``--data`` it trains on the 5,000-image MNIST
subset bundled with tinyamp (4,000 train / 1,000 test), so it needs no download:

    python examples/mnist_mlp.py --amp
    python examples/mnist_mlp.py --no-amp --hidden 1024 --out plots/
    python examples/mnist_mlp.py --device cuda --cuda-graph   # each step replayed as one CUDA graph
    python examples/mnist_mlp.py --fp8 --hidden 1024          # bfloat16, then its Linear GEMMs in fp8

``--fp8 [RECIPE]`` (``current`` when given alone; ``delayed``, ``block``,
``mxfp8``) trains the bfloat16 run and then the same run with both Linear
layers' GEMMs in fp8 (``ta.amp.fp8_autocast``), and reports the two test
accuracies.

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

DEFAULT_EPOCHS = 5
DEFAULT_LR = 0.05


def build_model(hidden: int) -> ta.nn.Module:
    """Linear(784, hidden) -> ReLU -> Linear(hidden, 10): the write-up's model."""
    nn = ta.nn
    return nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def forward(model: ta.nn.Module, x: ta.Tensor, y: ta.Tensor, prec: _common.Precision,
            fp8_recipe: "ta.amp.recipe.Recipe | None" = None) -> tuple:
    """The logits and the float32 loss at the run's precision (``fp8_recipe``: the Linear GEMMs in fp8)."""
    if prec.o2:
        # O2: the model itself is float16 (or bfloat16): cast the batch in and the logits
        # out, so the loss is computed in float32 (Apex's O2).
        logits = model(x.to(prec.low_dtype)).float()
        return logits, F.cross_entropy(logits, y)
    # O1: float32 weights; autocast runs the linear layers in float16 and the loss in
    # float32. With --no-amp the region is disabled and everything runs in float32.
    with ta.amp.autocast(device_type=x.device.type, dtype=prec.low_dtype, enabled=prec.amp):
        with ta.amp.fp8_autocast(enabled=fp8_recipe is not None, fp8_recipe=fp8_recipe):
            logits = model(x)
        loss = F.cross_entropy(logits, y)
    return logits, loss


def train(model: ta.nn.Module, optimizer: ta.optim.Optimizer, scaler: ta.amp.GradScaler, loader: ta.data.DataLoader,
          prec: _common.Precision, log: _common.RunLog, cuda_graph: bool = False,
          fp8_recipe: "ta.amp.recipe.Recipe | None" = None) -> None:
    """The AMP training loop; ``log`` only times, watches and reports."""

    def train_step(x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        optimizer.zero_grad()
        with log.trace_first_step():             # --trace: which op ran in which dtype
            logits, loss = forward(model, x, y, prec, fp8_recipe)
            log.measure_activations(loss)         # step 1: what backward will need
            # Backward from loss * scale, so small float16 gradients do not flush to zero.
            scaler.scale(loss).backward()
        log.gradient_histogram(scaler, optimizer)  # last step: unscale_, then histogram the gradients
        scaler.step(optimizer)   # unscale the gradients; skip the update if one is inf or NaN
        scaler.update()          # halve the scale after a skipped step, double it after 2000 good ones
        return loss

    step = train_step
    if cuda_graph:
        # --cuda-graph: the same step, run eagerly for the first calls, then captured once and replayed
        # as one CUDA graph per batch (the batch is copied into the graph's static inputs). The loss,
        # the scale and the skip decision stay on the GPU; step_done reads them after each step.
        step = ta.cuda.make_graphed_step(train_step, _common.sample_batch(loader))
    for x, y in log.batches(loader):
        loss = step(x, y)
        log.step_done(loss, scaler, model, optimizer)


def main(argv: "list[str] | None" = None, fp8_run: "bool | None" = None) -> dict:
    """Parse ``argv`` (default: the command line), train, print the report; return the JSON summary.

    With ``--fp8`` it trains twice, calling itself: the bfloat16 run (``fp8_run=False``), then the fp8 run.
    """
    parser = _common.build_parser(os.path.basename(__file__), __doc__.split("\n\n")[0],
                                  epochs=DEFAULT_EPOCHS, lr=DEFAULT_LR)
    parser.add_argument("--hidden", type=_common.positive_int, default=8192,
                        help="hidden units (8192: the write-up's model)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture the training step once and replay it as one CUDA graph per batch "
                             "(ta.cuda.make_graphed_step; needs --device cuda; drops each epoch's last, "
                             "smaller batch; no gradient histogram, the last step being a replay)")
    parser.add_argument("--fp8", nargs="?", const="current", default=None, choices=sorted(ta.amp.recipe.RECIPES),
                        help="train bfloat16, then with the Linear GEMMs in fp8 under this recipe (default "
                             "current scaling), and compare")
    args = _common.parse_args(parser, argv)          # every flag checked before anything trains
    if args.cuda_graph and args.device != "cuda":
        parser.error("--cuda-graph needs --device cuda (a CUDA graph replays GPU work)")
    if args.fp8 and (not args.amp or args.level != "O1" or args.dtype != "bfloat16"):
        if "--dtype" in (argv if argv is not None else sys.argv) or not args.amp or args.level != "O1":
            parser.error("--fp8 runs inside bfloat16 autocast: use it with --amp --level O1 (--dtype bfloat16)")
        args.dtype = "bfloat16"
    if args.fp8 and fp8_run is None:
        bf16, fp8 = main(argv, fp8_run=False), main(argv, fp8_run=True)
        gap = fp8["accuracy"] - bf16["accuracy"]
        print(f"fp8 ({fp8['fp8_recipe']}): test accuracy {fp8['accuracy']:.4f} against bfloat16's "
              f"{bf16['accuracy']:.4f} ({gap * 100:+.2f} points)")
        return {"bfloat16": bf16, "fp8": fp8, "accuracy_gap_points": gap * 100, "fp8_recipe": fp8["fp8_recipe"]}
    recipe = ta.amp.recipe.RECIPES[args.fp8]() if fp8_run else None  # the Linear GEMMs in fp8
    x_train, y_train, x_test, y_test = _common.load_data(args, flatten=True)
    device, prec = ta.device(args.device), _common.Precision(args)

    ta.manual_seed(args.seed)
    model = build_model(args.hidden).to(device)
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
    # A CUDA graph replays one batch shape: with --cuda-graph the last, smaller batch of an epoch is dropped.
    loader = ta.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, seed=args.seed,
                                drop_last=args.cuda_graph)

    title = f"MLP 784-{args.hidden}-10" + ("" if recipe is None else f", fp8 {type(recipe).__name__}")
    log = _common.RunLog(title, args, prec, device, loader, (x_train, y_train, x_test))
    train(model, optimizer, scaler, loader, prec, log, cuda_graph=args.cuda_graph, fp8_recipe=recipe)
    accuracy = _common.evaluate(model, lambda x, y: forward(model, x, y, prec, recipe), x_test, y_test, device)
    summary = log.finish(accuracy, scaler)
    if recipe is not None:
        summary["fp8_recipe"] = repr(recipe)
    return summary


if __name__ == "__main__":
    main()
