"""Plumbing shared by the examples: flags and their checks, data, progress, report, plots.

The training itself, the PyTorch AMP recipe written with tinyamp, is in each
example (``mnist_mlp.py``, ``mnist_cnn.py``) so a reader sees it where it runs;
each example is a complete script, so the two share their loop by copy, not by
import. What is here only prepares and watches:

- :func:`build_parser` / :func:`parse_args`: the shared flags, each checked
  before anything trains (positive counts, a positive finite learning rate,
  writable ``--out``/``--json``, a usable ``--device``); a bad one prints one
  line, ``<example>: error: ...``, and exits with status 2.
- :func:`load_data`: MNIST from ``--data`` (or the bundled subset); a missing,
  empty or broken folder is one such line too.
- :class:`Precision`: what ``--amp/--level/--dtype`` mean (O1: autocast with
  float32 weights; O2: a float16 model with float32 master weights; bfloat16
  needs no loss scaling).
- :class:`RunLog`: the loop's observer: step count and timing, the precision
  trace and memory split of the first step, the gradient exponent histogram of
  the last, progress lines (:class:`Progress`), and at the end the summary
  (printed; written as JSON under ``--json`` and as plots under ``--out``).
- :func:`evaluate`: test accuracy at the training precision.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import textwrap
import time
from typing import Any, Callable, Iterator, NoReturn, TextIO

import numpy as np

import tinyamp as ta
from tinyamp import memory
from tinyamp.amp import grad_stats

LOSS_SCALE_INIT = 2.0 ** 16  # GradScaler's default, as in PyTorch


# ------------------------------------------------------------------ flags
class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage block) and exits with status 2."""

    def error(self, message: str) -> NoReturn:
        if speaks():
            sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        stop(2)


def speaks() -> bool:
    """Whether this process reports: always, except the ranks other than 0 of a distributed job (``RANK``)."""
    return os.environ.get("RANK", "0") == "0"


def stop(status: int) -> NoReturn:
    """Exit with ``status``. A rank of a distributed job leaves MPI first, then exits without Python's exit hooks.

    Used for errors every rank finds alike (the same flags, the same files), so
    every rank gets here: leaving MPI together avoids the launcher's abort, whose
    MPICH notes (one per rank) would bury the one line that says what is wrong.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        sys.stdout.flush()
        sys.stderr.flush()
        mpi.Finalize()
        os._exit(status)
    raise SystemExit(status)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default once: not when its help already says it, nor when there is none (None)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def _integer(text: str, minimum: int, words: str) -> int:
    """``text`` as an integer >= ``minimum``, or argparse's error naming ``words``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {words}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a {words}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _integer(text, 1, "positive integer")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (a seed)."""
    return _integer(text, 0, "non-negative integer")


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An empty parser that reports a bad flag in one line and exits with status 2."""
    return _Parser(prog=prog, description=description, formatter_class=_HelpFormatter)


def build_parser(prog: str, description: str, *, epochs: int, lr: float,
                 batch_size: int = 128) -> argparse.ArgumentParser:
    """The flags the MNIST examples share; the example adds its model's own."""
    p = make_parser(prog, description)
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True,
                   help="mixed precision (autocast + loss scaling); --no-amp trains in float32")
    p.add_argument("--level", choices=["O1", "O2"], default="O1",
                   help="O1: float32 weights, autocast per op; O2: float16 model with float32 master weights")
    p.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16", help="low-precision dtype")
    p.add_argument("--epochs", type=positive_int, default=epochs, help="passes over the training set")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="stop after this many steps (default: all epochs)")
    p.add_argument("--batch-size", type=positive_int, default=batch_size)
    p.add_argument("--lr", type=positive_float, default=None,
                   help=f"learning rate (default {lr} for sgd, 1e-3 for adam)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd", help="sgd uses momentum 0.9")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--data", metavar="DIR", default=None,
                   help="folder with the four full MNIST files (default: $TINYAMP_DATA, else the bundled "
                        "5,000-image subset split 4,000/1,000)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write plots there: loss curve, loss scale, gradient exponent histogram")
    p.add_argument("--trace", action="store_true", help="print the precision report of the first step")
    p.add_argument("--json", metavar="PATH", default=None, help="write the JSON summary to this file (progress as plain lines)")
    p.add_argument("--log-every", type=positive_int, default=None, metavar="N",
                   help="a progress line every N steps (default: about 20 a run, and at least every "
                        f"{PROGRESS_INTERVAL_S:g} s); on a terminal a bar instead, unless --json")
    p.set_defaults(default_lr=lr)
    return p


def parse_args(parser: argparse.ArgumentParser, argv: "list[str] | None") -> argparse.Namespace:
    """Parse ``argv`` and check what can only be checked against the machine, all before training."""
    args = parser.parse_args(argv)
    args.prog = parser.prog  # for errors found later (the data)
    if args.lr is None:
        args.lr = 1e-3 if args.optimizer == "adam" else args.default_lr
    del args.default_lr
    if args.device == "cuda" and not ta.cuda.is_available():
        parser.error("--device cuda: no usable CUDA GPU (install CuPy with a driver, or use --device cpu)")
    if args.data is not None and os.path.isfile(args.data):
        parser.error(f"--data {args.data}: is a file; give the folder that holds the four MNIST files")
    check_output_flags(parser, args)
    return args


def check_output_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--out`` and ``--json`` are written at the end of the run: find out now that they cannot be."""
    if args.out is not None:
        try:
            grad_stats.require_matplotlib()
        except ImportError as exc:
            parser.error(f"--out {args.out}: {exc}")
        problem = _folder_problem(args.out)
        if problem:
            parser.error(f"--out {args.out}: {problem}")
    if args.json is not None:
        problem = _file_problem(args.json)
        if problem:
            parser.error(f"--json {args.json}: {problem}")


def _folder_problem(folder: str) -> "str | None":
    """Why plots cannot be written into ``folder`` (created if missing), or None."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        return "exists and is not a folder"
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".tinyamp-write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None


def _file_problem(path: str) -> "str | None":
    """Why ``path`` cannot be written, or None (tried by opening it for appending, then undone)."""
    if os.path.isdir(path):
        return "is a folder; give a file name"
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc})"
    if not existed:
        os.remove(path)
    return None


def fail(args: argparse.Namespace, message: str) -> NoReturn:
    """Stop with one line, as a bad flag does (in a distributed job every rank stops, rank 0 says why)."""
    if speaks():
        print(f"{args.prog}: error: {message}", file=sys.stderr, flush=True)
    stop(2)


# ------------------------------------------------------------------ data
def load_data(args: argparse.Namespace, flatten: bool) -> tuple[np.ndarray, ...]:
    """(train images, train labels, test images, test labels): float32 in [0, 1], int64."""
    try:
        x_train, y_train = ta.data.load_mnist(args.data, "train", flatten=flatten, normalize=True)
        x_test, y_test = ta.data.load_mnist(args.data, "test", flatten=flatten, normalize=True)
    except (OSError, ValueError) as exc:  # missing or empty folder, IDXError, not MNIST
        fail(args, f"{_data_flag(args)}: {exc}")
    if len(x_train) == 0 or len(x_test) == 0:
        fail(args, f"{_data_flag(args)}: the MNIST files hold {len(x_train)} training and {len(x_test)} test "
                   f"images; both must hold some")
    if not flatten:  # (N, 28, 28) -> (N, 1, 28, 28): one input channel for Conv2d
        x_train, x_test = x_train[:, None], x_test[:, None]
    return x_train, y_train, x_test, y_test


def _data_flag(args: argparse.Namespace) -> str:
    """Where the data came from, as the user gave it: ``--data DIR`` or ``TINYAMP_DATA=DIR``."""
    env = ta.data.mnist.ENV_VAR
    return f"--data {args.data}" if args.data else f"{env}={os.environ.get(env)}"


# ------------------------------------------------------------------ precision
class Precision:
    """What ``--amp/--level/--dtype`` mean for the loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.amp = bool(args.amp)
        self.level = args.level if self.amp else "float32"
        self.low_dtype = getattr(ta, args.dtype)  # what autocast (O1) or the model (O2) runs in
        self.o2 = self.amp and args.level == "O2"
        self.scaled = self.amp and args.dtype == "float16"

    def describe(self) -> str:
        if not self.amp:
            return "float32 (no AMP)"
        name = ta.dtypes.dtype_name(self.low_dtype)
        how = (f"{name} model, float32 master weights" if self.o2
               else f"autocast to {name}, float32 weights")
        scale = f"dynamic loss scale from {LOSS_SCALE_INIT:g}" if self.scaled else "no loss scaling (bfloat16)"
        return f"AMP {self.level}: {how}, {scale}"


def evaluate(model: Any, forward: Callable[[ta.Tensor, ta.Tensor], tuple], x: np.ndarray, y: np.ndarray,
             device: Any, batch: int = 500) -> float:
    """Test accuracy of ``forward(x, y) -> (logits, loss)`` at the training precision, without a graph."""
    model.eval()
    correct = 0
    with ta.no_grad():
        for start in range(0, len(x), batch):
            xb = ta.tensor(x[start:start + batch], device=device)
            yb = ta.tensor(y[start:start + batch], device=device)
            logits, _ = forward(xb, yb)
            correct += int((logits.argmax(1).numpy() == y[start:start + batch]).sum())
    model.train()
    return correct / len(x)


# ------------------------------------------------------------------ watching the loop
STANDIN_NOTE = "CUDA stand-in on the CPU: slow; for checking code paths, not speed"
PROGRESS_INTERVAL_S = 5.0  # a progress line at least this often (the CI machine's slowest steps are ~4 s)


def device_note(device: Any) -> "str | None":
    """What a reader must know about ``device`` before a long run: the CUDA stand-in is NumPy, not a GPU."""
    if device.type == "cuda" and ta.backend.standin_active():
        return STANDIN_NOTE
    return None


class Progress:
    """Training progress: loss, loss scale, skipped steps and elapsed time.

    Plain lines (the ecosystem's other convention besides a bar, and what a log
    file wants): at step 1, every ``every`` steps (default about 20 lines a
    run), at each epoch's end, at the last step, and whenever
    ``PROGRESS_INTERVAL_S`` seconds passed since the last line, so a slow run
    (the CUDA stand-in, a big model) is never silent for long. On a terminal,
    and not under ``--json``, one line redrawn in place instead.
    """

    def __init__(self, total: int, stream: TextIO, every: "int | None" = None, *, per_epoch: "int | None" = None,
                 bar: bool = True, label: str = "", interval: float = PROGRESS_INTERVAL_S) -> None:
        self.total, self.stream, self.per_epoch, self.label, self.interval = total, stream, per_epoch, label, interval
        self.tty = bar and bool(getattr(stream, "isatty", lambda: False)())
        self.every = every or max(1, total // 20)
        self.started = self.last_line = time.perf_counter()

    def line(self, step: int, loss: float, scale: "float | None", skipped: int, epoch: "str | None" = None,
             ms: "float | None" = None) -> str:
        """``step 40/160  epoch 2/5  loss 0.3121  scale 65536  skipped 0  12.3 s  95.1 ms/step``."""
        parts = [f"{self.label}  " if self.label else "", f"step {step:>5}/{self.total}"]
        if epoch is not None:
            parts.append(f"  epoch {epoch}")
        parts.append(f"  loss {loss:.4f}")
        if scale is not None:
            parts.append(f"  scale {scale:g}  skipped {skipped}")
        parts.append(f"  {time.perf_counter() - self.started:6.1f} s")
        if ms is not None:
            parts.append(f"  {ms:7.1f} ms/step")
        return "".join(parts)

    def update(self, step: int, loss: float, scale: "float | None", skipped: int, epoch: "str | None" = None,
               ms: "float | None" = None) -> None:
        text = self.line(step, loss, scale, skipped, epoch, ms)
        now = time.perf_counter()
        if self.tty:
            filled = int(30 * step / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}  ")
            self.stream.flush()
            return
        epoch_end = self.per_epoch is not None and step % self.per_epoch == 0
        if step == 1 or step % self.every == 0 or step == self.total or epoch_end or now - self.last_line >= self.interval:
            print(text, file=self.stream, flush=True)
            self.last_line = now

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def sample_batch(loader: Any) -> tuple:
    """Zero tensors shaped and typed like one full batch of ``loader`` (a graphed step's sample inputs),
    made without iterating it (which would draw a shuffle)."""
    first = loader.dataset[0]
    return tuple(ta.zeros((loader.batch_size, *t.shape), dtype=t.dtype, device=t.device) for t in first)


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


class RunLog:
    """Watches the example's training loop and reports on it; it never changes what the loop computes.

    The loop calls, in order: :meth:`batches` (the batches, stopping after
    ``--steps``; each step timed), :meth:`trace_first_step` around the forward
    and backward, :meth:`measure_activations` before backward,
    :meth:`gradient_histogram` before ``scaler.step`` and :meth:`step_done`
    after ``scaler.update``. :meth:`finish` prints and writes the summary.
    """

    def __init__(self, title: str, args: argparse.Namespace, prec: Precision, device: Any, loader: Any,
                 data: tuple, stream: "TextIO | None" = None) -> None:
        self.title, self.args, self.prec, self.device = title, args, prec, device
        self.stream = sys.stdout if stream is None else stream  # read at call time (tests redirect it)
        self.steps_per_epoch = len(loader)
        total = self.steps_per_epoch * args.epochs
        self.total = total if args.steps is None else min(args.steps, total)
        self.n_test = len(data[2])
        self.step, self.epoch = 0, 0
        self.losses: list[float] = []
        self.scales: list[float] = []
        self.skipped_at: list[int] = []
        self.times: list[float] = []
        self.split = self.hist = self.activations = None
        self.trace_text: "str | None" = None
        source = args.data or os.environ.get(ta.data.mnist.ENV_VAR) or "the bundled MNIST subset"
        self.say(f"tinyamp {title} | device {device} | {prec.describe()}")
        if device_note(device):
            self.say(device_note(device))
        self.say(f"data: {len(data[0])} train / {self.n_test} test images from {source}; batch {args.batch_size}, "
                 f"{args.optimizer} lr {args.lr:g}, {plan(self.total, args.epochs, self.steps_per_epoch)}")
        self.progress = Progress(self.total, self.stream, args.log_every, per_epoch=self.steps_per_epoch,
                                 bar=args.json is None)

    def say(self, *parts: Any) -> None:
        print(*parts, file=self.stream, flush=True)

    @property
    def last_step(self) -> bool:
        return self.step == self.total

    def batches(self, loader: Any) -> Iterator[tuple]:
        """``(x, y)`` batches epoch after epoch, ``--steps`` of them at most; times each step."""
        self.started = self.progress.started = self.progress.last_line = time.perf_counter()
        try:
            for self.epoch in range(self.args.epochs):
                for xb, yb in loader:
                    if self.step == self.total:
                        return
                    self.step += 1
                    self.t0 = time.perf_counter()
                    yield xb, yb
                if self.step == self.total:
                    return
        finally:
            self.train_time = time.perf_counter() - self.started

    def trace_first_step(self) -> Any:
        """The precision trace of step 1 under ``--trace``; nothing otherwise."""
        if not (self.args.trace and self.step == 1):
            return contextlib.nullcontext()
        return self._tracing()

    @contextlib.contextmanager
    def _tracing(self) -> Iterator[None]:
        with ta.amp.trace() as tracer:
            yield
        self.trace_text = str(tracer)

    def measure_activations(self, loss: ta.Tensor) -> None:
        """At step 1, what the graph keeps for backward (measured before backward frees it)."""
        if self.step == 1:
            self.activations = memory.saved_tensor_bytes(loss)

    def gradient_histogram(self, scaler: Any, optimizer: Any) -> None:
        """At the last step: unscale the gradients and histogram their exponents against float16's range.

        Not under ``--cuda-graph``: the last step is a replay of a captured
        one, and reading gradients on the host inside a capture is refused.
        """
        if self.last_step and not getattr(self.args, "cuda_graph", False):
            scale_now = scaler.get_scale()
            scaler.unscale_(optimizer)
            self.hist = grad_stats.exponent_histogram(_grads_for_histogram(optimizer), scale=scale_now)

    def step_done(self, loss: ta.Tensor, scaler: Any, model: Any, optimizer: Any) -> None:
        loss_value = loss.item()
        if self.device.type == "cuda":
            ta.cuda.synchronize()
        self.times.append(time.perf_counter() - self.t0)
        self.losses.append(loss_value)
        scale = scaler.get_scale() if self.prec.scaled else None
        self.scales.append(scale if scale is not None else 1.0)
        if self.prec.scaled and scaler.last_step.skipped:
            self.skipped_at.append(self.step)
        if self.step == 1:
            self.split = memory.memory_split(model, optimizer, activations=self.activations)
            if self.trace_text is not None:
                self.say(self.trace_text)
            self.say("memory after the first step:\n" + memory.format_split(self.split))
        self.progress.update(self.step, loss_value, scale, len(self.skipped_at),
                             epoch=f"{self.epoch + 1}/{self.args.epochs}", ms=self.times[-1] * 1e3)

    def finish(self, accuracy: float, scaler: Any) -> dict:
        """Print the run's summary, write ``--out`` plots and the ``--json`` file; return the summary."""
        self.progress.close()
        train_time = self.train_time
        args, prec, hist, losses, times = self.args, self.prec, self.hist, self.losses, self.times
        steady = times[1:] or times  # the first step pays for warm-up (allocation, caches)
        summary = {
            "example": self.title, "accuracy": accuracy, "final_loss": losses[-1] if losses else None,
            "time_per_step_ms": statistics.median(steady) * 1e3, "first_step_ms": times[0] * 1e3 if times else None,
            "train_time_s": train_time, "steps": self.step,
            "memory": self.split, "skipped_steps": len(self.skipped_at), "skipped_at": self.skipped_at[:50],
            "final_scale": scaler.get_scale() if prec.scaled else None,
            "grad_underflow": None if hist is None else {"scale": hist["scale"], "unscaled": hist["unscaled"],
                                                         "scaled": hist["scaled"], "zeros": hist["zeros"]},
            "device": str(self.device), "precision": prec.describe(),
            "cuda_graph": bool(getattr(args, "cuda_graph", False)),
            "config": {k: v for k, v in vars(args).items() if k != "prog"},
        }
        skipped_at = self.skipped_at
        if prec.scaled:
            self.say(f"loss scale: {scale_finding(self.scales)}; skipped steps: {len(skipped_at)} of "
                     f"{self.step}" + (f" (at {', '.join(map(str, skipped_at[:10]))}"
                                       f"{' ...' if len(skipped_at) > 10 else ''})" if skipped_at else ""))
        if hist is not None:
            u, s = hist["unscaled"], hist["scaled"]
            line = f"gradients at the last step: {u['below_subnormal']:.2%} of non-zero values below float16's 2^-24"
            if prec.scaled:
                line += (f" unscaled, {s['below_subnormal']:.2%} after scaling by {hist['scale']:g}; "
                         f"{s['above_max']:.2%} above 65504 scaled")
            else:
                line += " (this run uses no loss scaling)"
            self.say(line)
        self.say(f"test accuracy: {accuracy:.4f}")
        self.say(f"time per step: median {summary['time_per_step_ms']:.1f} ms (first step "
                 f"{summary['first_step_ms']:.1f} ms); training took {train_time:.1f} s")
        if args.out:
            summary["plots"] = write_plots(args.out, losses, self.scales if prec.scaled else None, skipped_at, hist,
                                           self.title, self.say)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2)
            self.say(f"summary: {args.json}")
        return summary


def plan(total: int, epochs: int, per_epoch: int) -> str:
    """The run's length in words: "160 steps (5 epochs of 32)", or "1 step (--steps; an epoch is 32 steps)"."""
    steps = f"{total} step{'' if total == 1 else 's'}"
    if total < epochs * per_epoch:
        return f"{steps} (--steps; an epoch is {per_epoch} step{'' if per_epoch == 1 else 's'})"
    return f"{steps} ({epochs} epoch{'' if epochs == 1 else 's'} of {per_epoch})"


# ------------------------------------------------------------------ plots
def scale_finding(scales: list, growth_interval: int = 2000) -> str:
    """What the loss-scale curve shows, in words: why it is flat, or how often it moved."""
    if not scales:
        return "no steps"
    halved = sum(1 for a, b in zip(scales, scales[1:]) if b < a) + (scales[0] < LOSS_SCALE_INIT)
    grown = sum(1 for a, b in zip(scales, scales[1:]) if b > a) + (scales[0] > LOSS_SCALE_INIT)
    if not halved and not grown:
        return (f"flat at {scales[-1]:g}: no gradient overflowed float16 in {len(scales)} steps, and the scale "
                f"doubles only after {growth_interval} good steps in a row")
    moves = [f"halved {halved} time(s) at skipped steps (inf/NaN gradients)" if halved else "no step skipped",
             f"doubled {grown} time(s), each after {growth_interval} good steps in a row" if grown else "never grown"]
    return f"{scales[-1]:g} at the end: " + "; ".join(moves)


def write_plots(out: str, losses: list, scales: "list | None", skipped_at: list, hist: "dict | None", title: str,
                say: Callable[..., None]) -> list[str]:
    """loss.png, loss_scale.png (``scales`` None: no loss scaling, none drawn) and grad_exponents.png in ``out``.

    Each title states its finding (a flat scale says why it is flat); a message instead without matplotlib.
    """
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
    finding = f"{losses[0]:.3g} -> {losses[-1]:.3g} in {len(losses)} steps" if losses else "no steps"
    ax.set(xlabel="step", ylabel="training loss", title=f"{title}: loss {finding}", yscale="log")
    paths.append(os.path.join(out, "loss.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    if scales is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.step(steps, scales, where="post", label="loss scale")
        if skipped_at:
            ax.plot(skipped_at, [scales[s - 1] for s in skipped_at], "rx", label="skipped step (inf/nan)")
        ax.set(xlabel="step (grad_exponents.png: how far the gradients are from float16's limits)",
               ylabel="loss scale", yscale="log")
        ax.set_title(f"{title}: loss scale\n" + textwrap.fill(scale_finding(scales), 90), fontsize=9)
        ax.legend()
        paths.append(os.path.join(out, "loss_scale.png"))
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    else:
        say("no loss_scale.png: this run uses no loss scaling (--no-amp, or bfloat16)")

    if hist is not None:
        paths.append(os.path.join(out, "grad_exponents.png"))
        grad_stats.plot_exponent_histogram(hist, paths[-1], title=f"{title}: weight gradients")
    say("plots: " + ", ".join(paths))
    return paths
