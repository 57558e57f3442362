"""The MNIST examples end to end (issue 5's acceptance), their flags, and the gradient statistics they plot.

The MLP example is run in-process (hidden 256, 160 steps on the bundled
4,000/1,000 split) in float32, AMP O1 and AMP O2: each must reach 0.90 test
accuracy, AMP within one point of float32, and AMP's activations saved for
backward at most 0.55x float32's. The O1 run also writes the three plots and the
JSON summary. The CNN example runs a few steps under autocast. Each example's own
file holds its AMP loop, which trains exactly as PyTorch's recipe written out
here; every bad flag stops the example before training with one line. Timing is
printed by the examples but never asserted.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import struct
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp import grad_stats
from tests.support import REPO

ROOT = str(REPO)
EXAMPLES = os.path.join(ROOT, "examples")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Small enough for the test budget, large enough to learn MNIST: 784-256-10,
# SGD momentum 0.9, lr 0.1, batch 128, 5 epochs of 32 steps (160 steps).
MLP_FLAGS = ["--hidden", "256", "--lr", "0.1", "--batch-size", "128", "--epochs", "5", "--seed", "0"]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name: str, argv: list[str]) -> tuple[dict, str]:
    """main(argv) of an example with its printed output captured."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summary = _load(name).main(argv)
    return summary, out.getvalue()


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def mlp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The three precisions, each trained once for the whole module."""
    out = tmp_path_factory.mktemp("mlp")
    runs = {}
    runs["float32"] = _run("mnist_mlp", MLP_FLAGS + ["--no-amp"])
    runs["O1"] = _run("mnist_mlp", MLP_FLAGS + ["--amp", "--level", "O1", "--out", str(out / "plots"),
                                                "--json", str(out / "summary.json")])
    runs["O2"] = _run("mnist_mlp", MLP_FLAGS + ["--amp", "--level", "O2"])
    runs["dir"] = out
    return runs


# ------------------------------------------------------------ accuracy
@pytest.mark.slow
@pytest.mark.parametrize("level", ["float32", "O1", "O2"])
def test_mlp_reaches_90_percent_test_accuracy(mlp_runs: dict, level: str) -> None:
    summary, _ = mlp_runs[level]
    assert summary["steps"] == 160
    assert summary["accuracy"] >= 0.90


@pytest.mark.slow
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_amp_accuracy_is_within_one_point_of_float32(mlp_runs: dict, level: str) -> None:
    amp, fp32 = mlp_runs[level][0]["accuracy"], mlp_runs["float32"][0]["accuracy"]
    assert abs(amp - fp32) <= 0.01


@pytest.mark.slow
def test_float16_runs_used_loss_scaling_and_float32_did_not(mlp_runs: dict) -> None:
    assert mlp_runs["float32"][0]["final_scale"] is None
    for level in ("O1", "O2"):
        summary = mlp_runs[level][0]
        assert summary["final_scale"] >= 1.0
        assert summary["skipped_steps"] < summary["steps"] // 10  # a healthy run skips few steps


# ------------------------------------------------------------ memory
@pytest.mark.slow
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_amp_saves_at_most_055x_the_float32_activations(mlp_runs: dict, level: str) -> None:
    fp32 = mlp_runs["float32"][0]["memory"]
    amp = mlp_runs[level][0]["memory"]
    by_dtype = fp32["activations_by_dtype"]
    assert "float16" not in by_dtype and by_dtype["float32"] > 0.99 * fp32["activations"]
    # Under AMP the big activations are float16; only the logits' float32 copy for the loss remains.
    assert amp["activations_by_dtype"]["float16"] > 10 * amp["activations_by_dtype"].get("float32", 0)
    assert amp["activations"] <= 0.55 * fp32["activations"]


@pytest.mark.slow
def test_memory_split_is_reported(mlp_runs: dict) -> None:
    hidden, n_params = 256, 784 * 256 + 256 + 256 * 10 + 10
    fp32, o2 = mlp_runs["float32"][0]["memory"], mlp_runs["O2"][0]["memory"]
    assert fp32["model"] == 4 * n_params and fp32["gradients"] == 4 * n_params
    assert o2["model"] == 2 * n_params                      # float16 model...
    assert o2["optimizer_state"] >= 2 * 4 * n_params        # ...float32 masters and momentum
    # float32 activations: the batch (128 x 784), the ReLU output (128 x hidden), the logits.
    assert fp32["activations"] >= 4 * 128 * (784 + hidden + 10)
    text = mlp_runs["O1"][1]
    assert "memory after the first step:" in text
    for label in ("model (parameters + buffers)", "gradients", "optimizer state", "activations saved for backward"):
        assert label in text


# ------------------------------------------------------------ output
@pytest.mark.slow
def test_the_json_summary_goes_to_the_json_file_only(mlp_runs: dict) -> None:
    summary, text = mlp_runs["O1"]
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())  # no JSON line on stdout
    assert text.strip().splitlines()[-1] == f"summary: {mlp_runs['dir'] / 'summary.json'}"
    with open(mlp_runs["dir"] / "summary.json") as f:
        written = json.load(f)
    for key in ("accuracy", "time_per_step_ms", "memory", "skipped_steps", "final_scale", "config"):
        assert key in written
    assert written["accuracy"] == summary["accuracy"] and written["time_per_step_ms"] > 0
    assert set(written["memory"]) >= {"model", "gradients", "optimizer_state", "activations", "total"}
    assert written["config"]["hidden"] == 256 and written["config"]["level"] == "O1"
    assert not any(line.lstrip().startswith("{") for line in mlp_runs["float32"][1].splitlines())


@pytest.mark.slow
def test_plain_progress_lines_when_not_a_terminal(mlp_runs: dict) -> None:
    text = mlp_runs["O1"][1]
    assert "\r" not in text
    steps = [line for line in text.splitlines() if line.startswith("step ")]
    assert 5 <= len(steps) <= 25 and steps[0].startswith("step     1/160") and "160/160" in steps[-1]
    assert re.fullmatch(r"step     1/160  epoch 1/5  loss \d\.\d{4}  scale 65536  skipped 0 +\d+\.\d s +\d+\.\d ms/step",
                        steps[0]), steps[0]
    assert any(line.startswith("step    32/160  epoch 1/5") for line in steps)  # each epoch's end
    assert "loss scale: flat at 65536: no gradient overflowed float16 in 160 steps" in text
    assert "AMP O1" in text.splitlines()[0] and "device cpu" in text.splitlines()[0]
    assert "test accuracy:" in text and "skipped steps:" in text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal() -> None:
    _common = _load("_common")
    stream = _Terminal()
    progress = _common.Progress(4, stream, None)
    for step in range(1, 5):
        progress.update(step, 0.5, 1024.0, 0, epoch="1/1", ms=12.0)
    progress.close()
    text = stream.getvalue()
    assert text.count("\r") == 4 and text.endswith("\n") and "[" + "#" * 30 + "] step     4/4" in text


def test_no_bar_under_json_even_on_a_terminal() -> None:
    _common = _load("_common")
    stream = _Terminal()
    progress = _common.Progress(4, stream, 2, bar=False)
    for step in range(1, 5):
        progress.update(step, 0.5, None, 0)
    progress.close()
    assert "\r" not in stream.getvalue() and stream.getvalue().count("\n") == 3  # steps 1, 2, 4


def test_a_slow_run_prints_a_line_at_least_every_interval() -> None:
    _common = _load("_common")
    stream = io.StringIO()
    progress = _common.Progress(1000, stream, 500, interval=0.0)  # every line is "late": each step prints
    for step in range(1, 6):
        progress.update(step, 0.5, 65536.0, 1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5 and all(re.search(r"loss 0\.5000  scale 65536  skipped 1 +\d+\.\d s$", line) for line in lines)
    quiet = io.StringIO()
    slow_enough = _common.Progress(1000, quiet, 500, interval=3600.0)
    for step in range(1, 6):
        slow_enough.update(step, 0.5, 65536.0, 1)
    assert len(quiet.getvalue().splitlines()) == 1  # step 1 only


@pytest.mark.slow
def test_three_plots_are_non_empty_pngs(mlp_runs: dict) -> None:
    summary, text = mlp_runs["O1"]
    assert _has_matplotlib(), "matplotlib is a tinyamp dependency (pyproject.toml): pip install -e ."
    names = sorted(os.path.basename(p) for p in summary["plots"])
    assert names == ["grad_exponents.png", "loss.png", "loss_scale.png"]
    for path in summary["plots"]:
        with open(path, "rb") as f:
            head = f.read(24)
        assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR"
        width, height = struct.unpack(">II", head[16:24])
        assert width >= 300 and height >= 200
        assert os.path.getsize(path) > 5000
        import matplotlib.image

        pixels = matplotlib.image.imread(path)
        assert pixels.std() > 0.01  # something was drawn


def test_missing_matplotlib_gives_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        grad_stats.require_matplotlib()


# ------------------------------------------------------------ other runs
@pytest.mark.slow
def test_cnn_runs_under_autocast_with_float16_convolutions() -> None:
    summary, text = _run("mnist_cnn", ["--steps", "3", "--batch-size", "32", "--trace"])
    assert summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    assert summary["memory"]["activations_by_dtype"]["float16"] > 0
    ops_table = text.split("information lost at casts")[0]  # the op rows, before the per-cast section
    conv_rows = [line for line in ops_table.splitlines() if " conv2d " in line and "forward" in line]
    assert len(conv_rows) == 2 and all("LOWER" in row and "float16[" in row for row in conv_rows)
    pool_rows = [line for line in ops_table.splitlines() if " max_pool2d " in line and "forward" in line]
    assert len(pool_rows) == 2 and all("NEUTRAL" in row and "float16[" in row for row in pool_rows)
    assert summary["memory"]["activations_by_dtype"]["int64"] > 0  # max-pool's argmax indices


def test_bfloat16_runs_without_loss_scaling() -> None:
    summary, text = _run("mnist_mlp", ["--hidden", "64", "--steps", "4", "--dtype", "bfloat16"])
    assert summary["final_scale"] is None and summary["skipped_steps"] == 0
    assert "no loss scaling (bfloat16)" in text
    assert set(summary["memory"]["activations_by_dtype"]) >= {"bfloat16"}


@pytest.mark.parametrize("name", ["mnist_mlp", "mnist_cnn"])
def test_help_lists_the_flags(name: str) -> None:
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{name}.py"), "--help"],
                            capture_output=True, text=True, timeout=300)  # a hang guard only
    assert result.returncode == 0, result.stderr
    for flag in ("--amp", "--no-amp", "--level", "--dtype", "--epochs", "--steps", "--batch-size", "--lr",
                 "--optimizer", "--device", "--seed", "--data", "--out", "--trace", "--json"):
        assert flag in result.stdout
    assert ("--hidden" in result.stdout) == (name == "mnist_mlp")
    # each flag's help states its default once, and never "(default: None)"
    entries = re.split(r"\n  (?=-)", result.stdout.split("options:", 1)[1])
    assert all(" ".join(entry.split()).count("default") <= 1 for entry in entries), entries
    assert "(default: None)" not in result.stdout and "--steps STEPS         stop after this many steps " \
        "(default: all epochs)\n" in result.stdout


def test_the_run_length_line_says_what_steps_and_epochs_mean() -> None:
    common = _load("_common")
    assert common.plan(1, 5, 32) == "1 step (--steps; an epoch is 32 steps)"
    assert common.plan(40, 5, 32) == "40 steps (--steps; an epoch is 32 steps)"
    assert common.plan(160, 5, 32) == "160 steps (5 epochs of 32)"
    assert common.plan(32, 1, 32) == "32 steps (1 epoch of 32)"
    _, text = _run("mnist_mlp", ["--hidden", "16", "--steps", "1"])
    assert "sgd lr 0.05, 1 step (--steps; an epoch is 32 steps)" in text


@pytest.mark.parametrize("name, argv", [
    ("mnist_mlp", ["--hidden", "16", "--steps", "2", "--amp"]),
    ("mnist_mlp", ["--hidden", "16", "--steps", "2", "--amp", "--level", "O2", "--optimizer", "adam"]),
    ("mnist_cnn", ["--steps", "2", "--amp"]),
], ids=["mlp-O1", "mlp-O2-adam", "cnn"])
def test_device_cuda_trains(cuda_backend, name, argv) -> None:
    summary, text = _run(name, argv + ["--device", "cuda"])
    assert summary["device"].startswith("cuda") and "gpu_pool" in summary["memory"]
    # The stand-in says what it is in the second line; a GPU run does not.
    note = "CUDA stand-in on the CPU: slow; for checking code paths, not speed"
    assert (text.splitlines()[1] == note) == ta.backend.standin_active() and text.count(note) <= 1


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_cuda_graph_training_is_the_eager_training(cuda_backend, level) -> None:
    """--cuda-graph replays the same step: the same losses, scale, skipped steps and accuracy."""
    argv = ["--hidden", "16", "--steps", "12", "--batch-size", "64", "--level", level, "--device", "cuda"]
    (eager, _), (graphed, text) = _run("mnist_mlp", argv), _run("mnist_mlp", argv + ["--cuda-graph"])
    assert graphed["cuda_graph"] and not eager["cuda_graph"]
    for key in ("final_loss", "accuracy", "final_scale", "skipped_steps", "steps"):
        assert graphed[key] == eager[key], key
    assert graphed["grad_underflow"] is None and eager["grad_underflow"] is not None  # no histogram of a replay


def test_cuda_graph_needs_the_cuda_device(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        _load("mnist_mlp").main(["--hidden", "16", "--steps", "2", "--cuda-graph"])
    assert info.value.code == 2
    assert capsys.readouterr().err == ("mnist_mlp.py: error: --cuda-graph needs --device cuda (a CUDA graph "
                                       "replays GPU work) (see --help)\n")


@pytest.mark.skipif(ta.cuda.is_available(), reason="checks the machine without CUDA")
def test_device_cuda_without_a_gpu_says_why_not(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        _load("mnist_mlp").main(["--hidden", "16", "--steps", "2", "--device", "cuda"])
    assert info.value.code == 2
    assert capsys.readouterr().err == ("mnist_mlp.py: error: --device cuda: no usable CUDA GPU (install CuPy "
                                       "with a driver, or use --device cpu) (see --help)\n")


# ------------------------------------------------------------ gradient statistics
def test_exponent_histogram_fractions_against_float16_limits() -> None:
    grads = [ta.tensor(np.array([2.0 ** -30, 2.0 ** -20, 2.0 ** -10, 0.0], dtype=np.float32)),
             np.array([1e5, np.inf])]
    hist = grad_stats.exponent_histogram(grads, scale=2.0 ** 16)
    assert hist["total"] == 6 and hist["zeros"] == 1 and hist["nonfinite"] == 1
    # Non-zero finite values: 2^-30, 2^-20, 2^-10, 1e5.
    assert hist["unscaled"] == {"below_subnormal": 0.25, "below_normal": 0.5, "above_max": 0.25}
    # Scaled by 2^16: 2^-14 (exactly the smallest normal), 2^-4, 2^6, 6.6e9.
    assert hist["scaled"] == {"below_subnormal": 0.0, "below_normal": 0.0, "above_max": 0.25}
    edges = np.asarray(hist["edges"])
    counts, scaled = np.asarray(hist["counts"]), np.asarray(hist["scaled_counts"])
    assert counts.sum() == scaled.sum() == 4
    for exponent in (-30, -20, -10):
        assert counts[np.searchsorted(edges, exponent, side="right") - 1] == 1
        assert scaled[np.searchsorted(edges, exponent + 16, side="right") - 1] == 1
    assert scaled[-1] == 1  # 2^32.6 is clipped into the last bin


def test_exponent_histogram_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="scale must be a positive finite"):
        grad_stats.exponent_histogram([np.ones(3)], scale=0.0)
    with pytest.raises(ValueError, match="bins must be increasing"):
        grad_stats.exponent_histogram([np.ones(3)], bins=[0.0, -1.0])
    empty = grad_stats.exponent_histogram([None])
    assert empty["total"] == 0 and empty["unscaled"]["below_subnormal"] == 0.0


def test_exponent_histogram_plot_is_a_png(tmp_path: Any) -> None:
    assert _has_matplotlib(), "matplotlib is a tinyamp dependency (pyproject.toml): pip install -e ."
    rng = np.random.default_rng(0)
    grads = [np.exp2(rng.uniform(-30, 0, 1000)).astype(np.float32)]
    path = tmp_path / "h.png"
    grad_stats.plot_exponent_histogram(grad_stats.exponent_histogram(grads, scale=1024.0), str(path))
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert os.path.getsize(path) > 5000


# ------------------------------------------------------------ the loop in the example's own file
def _calls_in(tree: ast.AST) -> set[str]:
    """Dotted names of the calls in ``tree``: ``scaler.scale(loss).backward`` -> 'scaler.scale().backward'."""
    def name(node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{name(node.value)}.{node.attr}"
        if isinstance(node, ast.Call):
            return f"{name(node.func)}()"
        return "?"
    return {name(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


@pytest.mark.parametrize("name", ["mnist_mlp", "mnist_cnn"])
def test_the_amp_loop_is_in_the_example_file(name: str) -> None:
    with open(os.path.join(EXAMPLES, f"{name}.py")) as f:
        example = ast.parse(f.read())
    functions = {node.name: node for node in example.body if isinstance(node, ast.FunctionDef)}
    loop = _calls_in(functions["train"])
    assert {"optimizer.zero_grad", "scaler.scale().backward", "scaler.step", "scaler.update"} <= loop
    assert "ta.amp.autocast" in _calls_in(functions["forward"]) and "F.cross_entropy" in _calls_in(functions["forward"])
    setup = _calls_in(functions["main"])
    assert {"ta.amp.GradScaler", "ta.manual_seed", "train"} <= setup
    # The shared helper prepares and reports only: no training step hides there.
    with open(os.path.join(EXAMPLES, "_common.py")) as f:
        helper = _calls_in(ast.parse(f.read()))
    assert not {c for c in helper if c.endswith((".backward", "scaler.step", "scaler.update", "zero_grad",
                                                 "GradScaler", "autocast"))}


@pytest.mark.parametrize("level", ["O1", "O2", "float32"])
def test_the_example_trains_exactly_as_the_pytorch_recipe(level: str) -> None:
    # PyTorch's AMP recipe written out here, independently of the example's code: the same
    # model, seed, data order and optimizer must give the same losses and scale bit for bit.
    steps, hidden, lr = 6, 32, 0.05
    flags = ["--hidden", str(hidden), "--steps", str(steps), "--batch-size", "64", "--lr", str(lr), "--seed", "1"]
    flags += ["--no-amp"] if level == "float32" else ["--level", level]
    losses: list[float] = []
    summary, _ = _run("mnist_mlp", flags)

    mlp = _load("mnist_mlp")
    x_train, y_train = ta.data.load_mnist(split="train", flatten=True, normalize=True)
    ta.manual_seed(1)
    model = mlp.build_model(hidden)
    if level == "O2":
        model.half(keep_norm_fp32=True)
    opt = ta.optim.SGD(model.parameters(), lr=lr, momentum=0.9, master_weights=level == "O2")
    scaler = ta.amp.GradScaler(enabled=level != "float32")  # PyTorch's default initial scale, 2**16
    loader = ta.data.DataLoader(ta.data.TensorDataset(ta.tensor(x_train), ta.tensor(y_train)), batch_size=64,
                                shuffle=True, seed=1)
    for step, (x, y) in zip(range(steps), loader):
        opt.zero_grad()
        if level == "O2":
            loss = ta.nn.functional.cross_entropy(model(x.half()).float(), y)
        else:
            with ta.amp.autocast(enabled=level == "O1"):
                loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if step == steps - 1:
            scaler.unscale_(opt)  # the example unscales at its last step to histogram the gradients
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert summary["steps"] == steps and summary["final_loss"] == losses[-1]
    assert summary["final_scale"] == (None if level == "float32" else scaler.get_scale())


# ------------------------------------------------------------ every flag checked before training
def _fails_before_training(name: str, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run main(argv); it must exit with status 2 and one line on stderr, having trained nothing."""
    with pytest.raises(SystemExit) as info:
        _load(name).main(argv)
    captured = capsys.readouterr()
    assert info.value.code == 2
    assert "tinyamp " not in captured.out and "step " not in captured.out and "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}.py: error: "), captured.err
    return lines[0]


BAD_FLAGS = [
    (["--epochs", "0"], "argument --epochs: must be a positive integer, got 0"),
    (["--epochs", "-2"], "argument --epochs: must be a positive integer, got -2"),
    (["--steps", "-1"], "argument --steps: must be a positive integer, got -1"),
    (["--steps", "0"], "argument --steps: must be a positive integer, got 0"),
    (["--hidden", "0"], "argument --hidden: must be a positive integer, got 0"),
    (["--batch-size", "-8"], "argument --batch-size: must be a positive integer, got -8"),
    (["--batch-size", "1.5"], "argument --batch-size: expected a positive integer, got '1.5'"),
    (["--log-every", "0"], "argument --log-every: must be a positive integer, got 0"),
    (["--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
    (["--lr", "0"], "argument --lr: must be a positive finite number, got 0"),
    (["--lr", "-0.1"], "argument --lr: must be a positive finite number, got -0.1"),
    (["--lr", "nan"], "argument --lr: must be a positive finite number, got nan"),
    (["--lr", "inf"], "argument --lr: must be a positive finite number, got inf"),
    (["--lr", "fast"], "argument --lr: expected a positive number, got 'fast'"),
]


@pytest.mark.parametrize("argv, message", BAD_FLAGS, ids=[" ".join(argv) for argv, _ in BAD_FLAGS])
def test_bad_numbers_stop_before_training(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert _fails_before_training("mnist_mlp", argv, capsys) == f"mnist_mlp.py: error: {message} (see --help)"


def test_cnn_checks_its_own_flag_too(capsys: pytest.CaptureFixture) -> None:
    line = _fails_before_training("mnist_cnn", ["--channels", "0"], capsys)
    assert line == "mnist_cnn.py: error: argument --channels: must be a positive integer, got 0 (see --help)"


def _broken_mnist(folder: Any) -> None:
    os.makedirs(folder)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"this is not an IDX file")


def _empty_mnist(folder: Any) -> None:
    os.makedirs(folder)
    for split in ("train", "t10k"):
        ta.data.write_idx(os.path.join(folder, f"{split}-images-idx3-ubyte"), np.zeros((0, 28, 28), np.uint8))
        ta.data.write_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte"), np.zeros(0, np.uint8))


@pytest.mark.parametrize("case, message", [
    ("missing", r"--data {path}: load_mnist: MNIST folder '{path}' does not exist\."),
    ("empty folder", r"--data {path}: load_mnist: MNIST file 'train-images-idx3-ubyte' \(or "),
    ("a file", r"--data {path}: is a file; give the folder that holds the four MNIST files \(see --help\)$"),
    ("broken files", r"--data {path}: {path}/train-images-idx3-ubyte: not an IDX file"),
    ("no images", r"--data {path}: the MNIST files hold 0 training and 0 test images; both must hold some$"),
], ids=["missing", "empty-folder", "a-file", "broken-files", "no-images"])
def test_bad_data_folder_stops_before_training(case: str, message: str, tmp_path: Any,
                                               capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "mnist"
    if case == "empty folder":
        os.makedirs(path)
    elif case == "a file":
        path.write_bytes(b"\0" * 100)
    elif case == "broken files":
        _broken_mnist(path)
    elif case == "no images":
        _empty_mnist(path)
    line = _fails_before_training("mnist_mlp", ["--data", str(path)], capsys)
    assert re.match("mnist_mlp.py: error: " + message.format(path=re.escape(str(path))), line), line


@pytest.mark.parametrize("flag, target, message", [
    ("--json", "a folder", "is a folder; give a file name"),
    ("--json", "in a missing folder", "cannot be written (No such file or directory)"),
    ("--json", "under a file", "cannot be written (Not a directory)"),
    ("--out", "a file", "exists and is not a folder"),
    ("--out", "under a file", "cannot write there (Not a directory)"),
], ids=["json-folder", "json-missing-folder", "json-under-a-file", "out-file", "out-under-a-file"])
def test_unwritable_outputs_stop_before_training(flag: str, target: str, message: str, tmp_path: Any,
                                                 capsys: pytest.CaptureFixture) -> None:
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    path = {"a folder": tmp_path, "in a missing folder": tmp_path / "missing" / "s.json",
            "under a file": a_file / "inside", "a file": a_file}[target]
    line = _fails_before_training("mnist_mlp", [flag, str(path)], capsys)
    assert line == f"mnist_mlp.py: error: {flag} {path}: {message} (see --help)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # nothing created by the check


def test_checking_writable_outputs_leaves_nothing_behind(tmp_path: Any) -> None:
    _common = _load("_common")
    parser = _common.build_parser("x.py", "", epochs=1, lr=0.1)
    args = _common.parse_args(parser, ["--json", str(tmp_path / "s.json"), "--out", str(tmp_path / "p")])
    assert args.json == str(tmp_path / "s.json") and not (tmp_path / "s.json").exists()
    assert (tmp_path / "p").is_dir() and list((tmp_path / "p").iterdir()) == []  # --out is made, empty


@pytest.mark.parametrize("argv, message", [
    (["--steps", "-1"], "mnist_mlp.py: error: argument --steps: must be a positive integer, got -1 (see --help)"),
    (["--data", "/nonexistent/mnist"], "mnist_mlp.py: error: --data /nonexistent/mnist: load_mnist: MNIST folder"),
], ids=["steps", "data"])
def test_command_line_error_is_one_line_without_traceback(argv: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, "mnist_mlp.py"), *argv],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(message), result.stderr


def test_broken_tinyamp_data_folder_is_named_as_the_variable(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    _broken_mnist(tmp_path / "mnist")
    monkeypatch.setenv("TINYAMP_DATA", str(tmp_path / "mnist"))
    line = _fails_before_training("mnist_cnn", ["--steps", "1"], capsys)
    assert line.startswith(f"mnist_cnn.py: error: TINYAMP_DATA={tmp_path / 'mnist'}: ") and "not an IDX file" in line


def test_out_without_matplotlib_stops_before_training(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def missing() -> None:
        raise ImportError("plotting needs matplotlib, which is not installed: pip install matplotlib")

    monkeypatch.setattr(grad_stats, "require_matplotlib", missing)
    with pytest.raises(SystemExit) as exit_info:
        _load("mnist_mlp").main(["--hidden", "16", "--steps", "1", "--out", "plots"])
    assert exit_info.value.code == 2
    assert "--out plots: plotting needs matplotlib" in capsys.readouterr().err


def test_the_histogram_title_says_scaled_only_when_a_scale_was_used() -> None:
    grads = [np.exp2(np.linspace(-30, 0, 200)).astype(np.float32)]
    unscaled = grad_stats.plot_exponent_histogram(grad_stats.exponent_histogram(grads), title="t")
    scaled = grad_stats.plot_exponent_histogram(grad_stats.exponent_histogram(grads, scale=1024.0), title="t")
    plain_title, scaled_title = unscaled.axes[0].get_title(), scaled.axes[0].get_title()
    assert "no loss scaling" in plain_title and "scaled" not in plain_title.replace("scaling", "")
    assert "after scaling by 1024" in scaled_title
    labels = [t.get_text() for t in unscaled.axes[0].get_legend().get_texts()]
    assert "unscaled" not in labels and not any(label.startswith("scaled") for label in labels)


def test_the_loss_scale_finding_says_why_a_curve_is_flat() -> None:
    common = _load("_common")
    assert common.scale_finding([65536.0] * 160) == ("flat at 65536: no gradient overflowed float16 in 160 steps, "
                                                     "and the scale doubles only after 2000 good steps in a row")
    moved = common.scale_finding([65536.0, 32768.0, 32768.0, 65536.0], growth_interval=2)
    assert moved == ("65536 at the end: halved 1 time(s) at skipped steps (inf/NaN gradients); doubled 1 time(s), "
                     "each after 2 good steps in a row")
    assert common.scale_finding([32768.0]) == ("32768 at the end: halved 1 time(s) at skipped steps (inf/NaN "
                                               "gradients); never grown")
    assert common.scale_finding([65536.0] * 3 + [131072.0], 3) == ("131072 at the end: no step skipped; doubled 1 "
                                                                   "time(s), each after 3 good steps in a row")


def test_no_amp_plots_skip_the_loss_scale_and_say_why(tmp_path: Any) -> None:
    summary, text = _run("mnist_mlp", ["--hidden", "16", "--steps", "2", "--no-amp", "--out", str(tmp_path)])
    assert sorted(os.path.basename(p) for p in summary["plots"]) == ["grad_exponents.png", "loss.png"]
    assert "no loss_scale.png: this run uses no loss scaling (--no-amp, or bfloat16)" in text
    assert "optimizer state  " in text and "master" not in text  # no master weights to name
