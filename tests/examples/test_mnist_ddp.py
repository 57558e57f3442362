"""examples/mnist_ddp.py holds to the examples' rules: flags checked before training, resume only when asked.

Runs through the launcher on 2 MPI ranks (the mpich wheel's mpiexec, with the
settings tests/porting/test_distributed.py uses on the 2-core CI machine): the
documented command run twice trains twice; ``--resume`` continues from rank 0's
checkpoint; a bad flag stops every rank before training with one line and exit
status 2. The flag and checkpoint checks themselves run in-process (no MPI).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tinyamp as ta

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mnist_ddp.py"


def _launch(cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TINYAMP_CUDA")}
    env.update({"MPIEXEC_TIMEOUT": "300", "HYDRA_LAUNCHER": "fork", "OMP_NUM_THREADS": "1",
                "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "PYTHONPATH": str(REPO)})
    return subprocess.run([sys.executable, "-m", "tinyamp.distributed.run", "--nproc-per-node", "2", str(EXAMPLE),
                           *flags], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("example_mnist_ddp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_documented_command_twice_trains_twice_and_resume_continues(tmp_path: Path) -> None:
    flags = ("--epochs", "1", "--hidden", "64")  # the README's command, made small
    first = _launch(tmp_path, *flags)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert first.stdout.count("epoch 0:") == 1 and "world size 2" in first.stdout  # rank 0 alone reports
    assert (tmp_path / "mnist_ddp.ckpt").is_file()
    steps = [line for line in first.stdout.splitlines() if line.startswith("step ")]
    assert steps[0].startswith("step     1/31  epoch 0/0  loss ") and "scale 65536  skipped 0" in steps[0]
    assert steps[-1].startswith("step    31/31") and len(steps) <= 12

    second = _launch(tmp_path, *flags)  # the same command again: trains again, and says it overwrites
    assert second.returncode == 0, second.stderr[-3000:]
    assert "mnist_ddp.ckpt exists: training from scratch, overwriting it after epoch 0 (--resume continues from it)" \
        in second.stdout and second.stdout.count("epoch 0:") == 1 and "resumed" not in second.stdout

    resumed = _launch(tmp_path, "--epochs", "2", "--hidden", "64", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from mnist_ddp.ckpt at epoch 1" in resumed.stdout and "epoch 0:" not in resumed.stdout
    accuracy = float(resumed.stdout.split("epoch 1: loss ")[1].split("test accuracy ")[1].split()[0])
    assert accuracy > 0.8, resumed.stdout


@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--epochs", "-1"], "argument --epochs: must be a positive integer, got -1 (see --help)"),
    (["--checkpoint", "missing/x.ckpt"], "--checkpoint missing/x.ckpt: cannot be written: its folder does not exist "
                                         "(see --help)"),
], ids=["epochs", "checkpoint"])
def test_a_bad_flag_stops_every_rank_with_one_line_and_status_2(tmp_path: Path, flags: list, message: str) -> None:
    done = _launch(tmp_path, *flags)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"mnist_ddp.py: error: {message}\n"


BAD_FLAGS = [
    (["--epochs", "-1"], "argument --epochs: must be a positive integer, got -1"),
    (["--epochs", "0"], "argument --epochs: must be a positive integer, got 0"),
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
    (["--hidden", "x"], "argument --hidden: expected a positive integer, got 'x'"),
    (["--lr", "nan"], "argument --lr: must be a positive finite number, got nan"),
    (["--log-every", "0"], "argument --log-every: must be a positive integer, got 0"),
    (["--backend", "nccl"], "--backend nccl needs --device cuda (NCCL reduces CUDA tensors; gloo/mpi reduce CPU ones)"),
    (["--checkpoint", "{tmp}"], "--checkpoint {tmp}: is a folder; give a file name"),
    (["--checkpoint", "{tmp}/no/x.ckpt"], "--checkpoint {tmp}/no/x.ckpt: cannot be written: its folder does not exist"),
    (["--checkpoint", "{tmp}/file/x.ckpt"], "--checkpoint {tmp}/file/x.ckpt: cannot be written: it is under a file"),
    (["--resume", "--checkpoint", "{tmp}/none.ckpt"],
     "--resume: {tmp}/none.ckpt does not exist (run once without --resume to make it)"),
]


@pytest.mark.parametrize("argv, message", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flags_are_refused_before_anything_runs(tmp_path: Path, argv: list, message: str,
                                                    capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as stop:
        _load().parse([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err == f"mnist_ddp.py: error: {message.format(tmp=tmp_path)} (see --help)\n"


def test_only_rank_0_says_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit) as stop:
        _load().parse(["--epochs", "-1"])
    assert stop.value.code == 2 and capsys.readouterr().err == ""


def _parts(hidden: int) -> tuple[Any, Any, Any]:
    """The example's model, optimizer and scaler at ``--hidden``."""
    model = ta.nn.Sequential(ta.nn.Linear(784, hidden), ta.nn.ReLU(), ta.nn.Linear(hidden, 10))
    return model, ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), ta.amp.GradScaler("cpu")


def _state(tmp_path: Path, hidden: int, epoch: int) -> tuple[Any, Any, Any, str]:
    """The parts at ``hidden`` and the path of a checkpoint of them after ``epoch``, as rank 0 writes it."""
    model, optimizer, scaler = _parts(hidden)
    path = str(tmp_path / "run.ckpt")
    ta.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
             "epoch": epoch}, path)
    return model, optimizer, scaler, path


@pytest.mark.parametrize("case, message", [
    ("done", "--resume: {ckpt} holds epochs 0-1 already; nothing to train with --epochs 2 (give more)"),
    ("other model", "--resume: {ckpt} does not fit this run (other flags?): Error(s) in loading state_dict for "
                    "Sequential: size mismatch for 0.weight: copying a param with shape [32, 784] from checkpoint, "
                    "the shape in current model is [64, 784]. ..."),
    ("damaged", "--resume: {ckpt} cannot be read: ta.load: '{ckpt}' is not a tinyamp checkpoint"),
])
def test_a_checkpoint_that_cannot_be_resumed_is_one_line_before_training(
        tmp_path: Path, case: str, message: str, capsys: pytest.CaptureFixture) -> None:
    module = _load()
    model, optimizer, scaler, ckpt = _state(tmp_path, 32 if case == "other model" else 64, 1)
    if case == "damaged":
        Path(ckpt).write_bytes(b"not a checkpoint")
    if case == "other model":
        model, optimizer, scaler = _parts(64)
    args = module.parse(["--epochs", "2", "--hidden", "64", "--resume", "--checkpoint", ckpt])
    with pytest.raises(SystemExit) as stop:
        module.resume(args, model, optimizer, scaler, "cpu")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"mnist_ddp.py: error: {message.format(ckpt=ckpt)}"), err


def test_resume_continues_after_the_checkpoint_epoch(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    module = _load()
    model, optimizer, scaler, ckpt = _state(tmp_path, 64, 0)
    args = module.parse(["--epochs", "3", "--hidden", "64", "--resume", "--checkpoint", ckpt])
    assert module.resume(args, model, optimizer, scaler, "cpu") == 1
    assert capsys.readouterr().out == f"resumed from {ckpt} at epoch 1\n"
    fresh = module.parse(["--epochs", "3", "--checkpoint", ckpt])  # the file exists; no --resume: from scratch
    assert module.resume(fresh, model, optimizer, scaler, "cpu") == 0
    assert "training from scratch, overwriting it" in capsys.readouterr().out
