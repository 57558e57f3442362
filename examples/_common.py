"""Shared code of the MNIST examples: the flags, the training loop, progress output, plots.

``mnist_mlp.py`` and ``mnist_cnn.py`` only build their model and parser; the
loop here is the PyTorch AMP recipe written with tinyamp, at three precisions:

- ``--no-amp``: float32 everywhere.
- ``--amp --level O1`` (default): float32 parameters; ``autocast`` runs the
  matmuls/convolutions in float16 (or bfloat16) and the softmax/loss in float32;
  ``GradScaler`` scales the loss so small float16 gradients do not flush to zero.
- ``--amp --level O2``: the model itself in float16 (normalization layers kept
  float32), float32 master weights in the optimizer, logits cast back to float32
  for the loss; also loss-scaled.

bfloat16 has float32's exponent range, so no loss scaling is used with it.
The run prints the device and precision, the memory split after the first step,
per-step loss and time (a bar on a terminal, plain lines otherwise), the loss
scale and skipped steps, the test accuracy and, last, a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, TextIO

import numpy as np

import tinyamp as ta
from tinyamp import memory
from tinyamp.amp import grad_stats

LOSS_SCALE_INIT = 2.0 ** 16  # GradScaler's default, as in PyTorch


def build_parser(description: str, *, epochs: int, lr: float, batch_size: int = 128) -> argparse.ArgumentParser:
    """The flags every example shares; the example adds its model's own."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True,
                   help="mixed precision (autocast + loss scaling); --no-amp trains in float32")
    p.add_argument("--level", choices=["O1", "O2"], default="O1",
                   help="O1: float32 weights, autocast per op; O2: float16 model with float32 master weights")
    p.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16", help="low-precision dtype")
    p.add_argument("--epochs", type=int, default=epochs, help="passes over the training set")
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: all epochs)")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--lr", type=float, default=None, help=f"learning rate (default {lr} for sgd, 1e-3 for adam)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd", help="sgd uses momentum 0.9")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", metavar="DIR", default=None,
                   help="folder with the four full MNIST files (default: $TINYAMP_DATA, else the bundled "
                        "5,000-image subset split 4,000/1,000)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write plots there: loss curve, loss scale, gradient exponent histogram")
    p.add_argument("--trace", action="store_true", help="print the precision report of the first step")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the JSON summary to this file")
    p.add_argument("--log-every", type=int, default=None, metavar="N",
                   help="print a line every N steps when not on a terminal (default: about 20 lines)")
    p.set_defaults(default_lr=lr)
    return p


def load_data(args: argparse.Namespace, flatten: bool) -> tuple[np.ndarray, ...]:
    """(train images, train labels, test images, test labels): float32 in [0, 1], int64."""
    x_train, y_train = ta.data.load_mnist(args.data, "train", flatten=flatten, normalize=True)
    x_test, y_test = ta.data.load_mnist(args.data, "test", flatten=flatten, normalize=True)
    if not flatten:  # (N, 28, 28) -> (N, 1, 28, 28): one input channel for Conv2d
        x_train, x_test = x_train[:, None], x_test[:, None]
    return x_train, y_train, x_test, y_test


class Precision:
    """What ``--amp/--level/--dtype`` mean for the loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.amp = bool(args.amp)
        self.level = args.level if self.amp else "float32"
        self.dtype = getattr(ta, args.dtype) if self.amp else ta.float32
        self.o2 = self.amp and args.level == "O2"
        self.scaled = self.amp and args.dtype == "float16"

    def describe(self) -> str:
        if not self.amp:
            return "float32 (no AMP)"
        name = ta.dtypes.dtype_name(self.dtype)
        how = (f"{name} model, float32 master weights" if self.o2
               else f"autocast to {name}, float32 weights")
        scale = f"dynamic loss scale from {LOSS_SCALE_INIT:g}" if self.scaled else "no loss scaling (bfloat16)"
        return f"AMP {self.level}: {how}, {scale}"


def forward_loss(model: Any, x: ta.Tensor, y: ta.Tensor, prec: Precision) -> tuple[ta.Tensor, ta.Tensor]:
    """Logits and the float32 loss at the run's precision."""
    if prec.o2:
        logits = model(x.to(prec.dtype)).float()  # the loss in float32, as Apex's O2
        return logits, ta.nn.functional.cross_entropy(logits, y)
    region = ta.amp.autocast(device_type=x.device.type, dtype=prec.dtype) if prec.amp else contextlib.nullcontext()
    with region:
        logits = model(x)
        loss = ta.nn.functional.cross_entropy(logits, y)  # FP32-tagged: autocast runs it in float32
    return logits, loss


def evaluate(model: Any, x: np.ndarray, y: np.ndarray, prec: Precision, device: Any, batch: int = 500) -> float:
    """Test accuracy at the training precision, without recording a graph."""
    model.eval()
    correct = 0
    with ta.no_grad():
        for start in range(0, len(x), batch):
            xb = ta.tensor(x[start:start + batch], device=device)
            yb = ta.tensor(y[start:start + batch], device=device)
            logits, _ = forward_loss(model, xb, yb, prec)
            correct += int((logits.argmax(1).numpy() == y[start:start + batch]).sum())
    model.train()
    return correct / len(x)


class Progress:
    """A one-line bar on a terminal; plain lines every ``every`` steps otherwise."""

    def __init__(self, total: int, stream: TextIO, every: "int | None") -> None:
        self.total, self.stream = total, stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.every = every or max(1, total // 20)

    def update(self, step: int, epoch: str, loss: float, ms: float, scale: "float | None", skipped: int) -> None:
        tail = f"loss {loss:.4f}  {ms:7.1f} ms/step" + (f"  scale {scale:g}  skipped {skipped}" if scale else "")
        if self.tty:
            filled = int(30 * step / self.total)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\r[{bar}] {step}/{self.total}  epoch {epoch}  {tail}  ")
            self.stream.flush()
        elif step == 1 or step % self.every == 0 or step == self.total:
            print(f"step {step:>5}/{self.total}  epoch {epoch}  {tail}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _grads_for_histogram(optimizer: Any) -> list:
    """Unscaled gradients after ``scaler.unscale_``: masters' under O2, the parameters' otherwise."""
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            master = optimizer.state.get(p, {}).get("master_param")
            g = master.grad if master is not None and master.grad is not None else p.grad
            if g is not None:
                grads.append(g)
    return grads


def run(title: str, make_model: Callable[[], Any], args: argparse.Namespace, data: tuple,
        stream: "TextIO | None" = None) -> dict:
    """Train ``make_model()`` on ``data``, report as the write-up does, return the summary dict."""
    stream = sys.stdout if stream is None else stream  # read at call time (tests redirect it)
    say = lambda *parts: print(*parts, file=stream, flush=True)  # noqa: E731
    if args.device == "cuda" and not ta.cuda.is_available():
        raise SystemExit("--device cuda: no usable CUDA GPU (install CuPy with a driver, or use --device cpu)")
    device = ta.device(args.device)
    prec = Precision(args)
    ta.manual_seed(args.seed)
    model = make_model().to(device)
    if prec.o2:
        model.half(keep_norm_fp32=True) if prec.dtype == ta.float16 else model.bfloat16(keep_norm_fp32=True)
    lr = args.lr if args.lr is not None else (1e-3 if args.optimizer == "adam" else args.default_lr)
    if args.optimizer == "adam":
        opt = ta.optim.Adam(model.parameters(), lr=lr, master_weights=prec.o2)
    else:
        opt = ta.optim.SGD(model.parameters(), lr=lr, momentum=0.9, master_weights=prec.o2)
    scaler = ta.amp.GradScaler(init_scale=LOSS_SCALE_INIT, enabled=prec.scaled)

    x_train, y_train, x_test, y_test = data
    loader = ta.data.DataLoader(ta.data.TensorDataset(ta.tensor(x_train, device=device),
                                                      ta.tensor(y_train, device=device)),
                                batch_size=args.batch_size, shuffle=True, seed=args.seed)
    total = len(loader) * args.epochs if args.steps is None else min(args.steps, len(loader) * args.epochs)
    source = args.data or os.environ.get("TINYAMP_DATA") or "the bundled MNIST subset"
    say(f"tinyamp {title} | device {device} | {prec.describe()}")
    say(f"data: {len(x_train)} train / {len(x_test)} test images from {source}; batch {args.batch_size}, "
        f"{args.optimizer} lr {lr:g}, {total} steps ({args.epochs} epochs of {len(loader)})")

    losses, scales, skipped_at, times = [], [], [], []
    split, hist, trace_text = None, None, None
    progress = Progress(total, stream, args.log_every)
    step = 0
    started = time.perf_counter()
    for epoch in range(args.epochs):
        for xb, yb in loader:
            if step == total:
                break
            step += 1
            t0 = time.perf_counter()
            opt.zero_grad()
            tracing = args.trace and step == 1
            with ta.amp.trace() if tracing else contextlib.nullcontext() as tracer:
                logits, loss = forward_loss(model, xb, yb, prec)
                if step == 1:  # what the graph keeps for backward: measured before backward frees it
                    activations = memory.saved_tensor_bytes(loss)
                scaler.scale(loss).backward()
            if tracing:
                trace_text = str(tracer)
            if step == total:  # the gradient exponent histogram, from the true (unscaled) gradients
                scale_now = scaler.get_scale()
                scaler.unscale_(opt)
                hist = grad_stats.exponent_histogram(_grads_for_histogram(opt), scale=scale_now)
            scaler.step(opt)
            scaler.update()
            loss_value = loss.item()
            if device.type == "cuda":
                ta.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            losses.append(loss_value)
            scale = scaler.get_scale() if prec.scaled else None
            scales.append(scale if scale is not None else 1.0)
            if prec.scaled and scaler.last_step.skipped:
                skipped_at.append(step)
            if step == 1:
                split = memory.memory_split(model, opt, activations=activations)
                if trace_text is not None:
                    say(trace_text)
                say("memory after the first step:\n" + memory.format_split(split))
            progress.update(step, f"{epoch + 1}/{args.epochs}", loss_value, times[-1] * 1e3, scale,
                            len(skipped_at))
        if step == total:
            break
    progress.close()
    train_time = time.perf_counter() - started
    accuracy = evaluate(model, x_test, y_test, prec, device)
    steady = times[1:] or times  # the first step pays for warm-up (allocation, caches)
    summary = {
        "example": title, "accuracy": accuracy, "final_loss": losses[-1] if losses else None,
        "time_per_step_ms": statistics.median(steady) * 1e3, "first_step_ms": times[0] * 1e3 if times else None,
        "train_time_s": train_time, "steps": step,
        "memory": split, "skipped_steps": len(skipped_at), "skipped_at": skipped_at[:50],
        "final_scale": scaler.get_scale() if prec.scaled else None,
        "grad_underflow": None if hist is None else {"scale": hist["scale"], "unscaled": hist["unscaled"],
                                                     "scaled": hist["scaled"], "zeros": hist["zeros"]},
        "device": str(device), "precision": prec.describe(),
        "config": {k: v for k, v in vars(args).items() if k != "default_lr"} | {"lr": lr},
    }
    if prec.scaled:
        say(f"loss scale: {summary['final_scale']:g} at the end; skipped steps: {len(skipped_at)} of {step}"
            + (f" (at {', '.join(map(str, skipped_at[:10]))}{' ...' if len(skipped_at) > 10 else ''})"
               if skipped_at else ""))
    if hist is not None:
        u, s = hist["unscaled"], hist["scaled"]
        line = f"gradients at the last step: {u['below_subnormal']:.2%} of non-zero values below float16's 2^-24"
        if prec.scaled:
            line += (f" unscaled, {s['below_subnormal']:.2%} after scaling by {hist['scale']:g}; "
                     f"{s['above_max']:.2%} above 65504 scaled")
        else:
            line += " (this run uses no loss scaling)"
        say(line)
    say(f"test accuracy: {accuracy:.4f}")
    say(f"time per step: median {summary['time_per_step_ms']:.1f} ms (first step {summary['first_step_ms']:.1f} ms); "
        f"training took {train_time:.1f} s")
    if args.out:
        summary["plots"] = write_plots(args.out, losses, scales, skipped_at, hist, title, say)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    say(json.dumps(summary))
    return summary


def write_plots(out: str, losses: list, scales: list, skipped_at: list, hist: "dict | None", title: str,
                say: Callable[..., None]) -> list[str]:
    """loss.png, loss_scale.png and grad_exponents.png in ``out``; a message instead without matplotlib."""
    try:
        plt = grad_stats.require_matplotlib()
    except ImportError as exc:
        say(f"no plots written: {exc}")
        return []
    os.makedirs(out, exist_ok=True)
    steps = np.arange(1, len(losses) + 1)
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, linewidth=1)
    ax.set(xlabel="step", ylabel="training loss", title=f"{title}: loss", yscale="log")
    paths.append(os.path.join(out, "loss.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step(steps, scales, where="post", label="loss scale")
    if skipped_at:
        ax.plot(skipped_at, [scales[s - 1] for s in skipped_at], "rx", label="skipped step (inf/nan)")
    ax.set(xlabel="step", ylabel="loss scale", title=f"{title}: loss scale", yscale="log")
    ax.legend()
    paths.append(os.path.join(out, "loss_scale.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    if hist is not None:
        paths.append(os.path.join(out, "grad_exponents.png"))
        grad_stats.plot_exponent_histogram(hist, paths[-1], title=f"{title}: weight gradients")
    say("plots: " + ", ".join(paths))
    return paths
