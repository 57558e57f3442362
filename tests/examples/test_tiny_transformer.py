"""examples/tiny_transformer.py: AMP against float32 on a copy task, and where float16 overflows.

The slow test runs the example as a user would, with its default flags, and
checks the learning, AMP's loss against float32's within the stated tolerance,
the loss-scale trajectory, the swamping table and the overflow study. It runs
in a subprocess with one BLAS thread: on a busy 2-core machine OpenBLAS's
threads make small transposed products up to 100x slower (benchmarks/RESULTS.md
measures with one thread for the same reason). The overflow study is checked
in-process on an untrained model too: same seed, same answer, every time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import tinyamp as ta
from tests.support import REPO

ROOT = str(REPO)
EXAMPLE = os.path.join(ROOT, "examples", "tiny_transformer.py")


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("example_tiny_transformer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, float]:
    path = tmp_path_factory.mktemp("tiny_transformer") / "summary.json"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, EXAMPLE, "--json", str(path)], capture_output=True, text=True,
                            env=env, timeout=900)  # a hang guard: 120 s was too short at load 15 on 2 cores
    seconds = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-2000:]
    with open(path) as f:
        return json.load(f), result.stdout, seconds


@pytest.mark.slow
def test_the_model_learns_and_amp_matches_float32_within_the_stated_tolerance(default_run: tuple) -> None:
    summary, text, seconds = default_run
    module = _load()
    assert summary["steps"] == module.DEFAULT_STEPS
    assert summary["first_loss"] > 2.5                   # ln 15 = 2.71: the copy is guessed at first
    assert summary["float32_loss"] < 0.05                 # ... and learned
    assert summary["loss_tolerance"] == pytest.approx(module.LOSS_RTOL * summary["float32_loss"])
    assert summary["loss_gap"] <= summary["loss_tolerance"] and summary["amp_matches_float32"] is True
    assert "AMP matches float32" in text
    print(f"tiny_transformer default run: {seconds:.1f} s, AMP {summary['amp_loss']:.5f} vs float32 "
          f"{summary['float32_loss']:.5f} (gap {summary['loss_gap']:.2e})")


@pytest.mark.slow
def test_loss_scale_trajectory_and_swamping_are_reported(default_run: tuple) -> None:
    summary, text, _ = default_run
    scales = summary["scales"]
    assert len(scales) == summary["steps"] and scales[0] == 65536.0
    # growth_interval 100 and no overflow: the scale doubles at steps 100 and 200.
    assert summary["skipped_at"] == [] and summary["final_scale"] == 65536.0 * 4
    assert "loss scale: 65536 after step 1 -> 262144; skipped steps: 0" in text
    swamping = summary["swamping"]
    assert len(swamping["parameters"]) == 30 and swamping["totals"]["kept_fp32"] > 0
    assert 0 < swamping["totals"]["vanished_fp16"] < swamping["totals"]["kept_fp32"]
    assert "update swamping" in text


@pytest.mark.slow
def test_the_overflow_study_of_the_trained_model(default_run: tuple) -> None:
    summary, text, _ = default_run
    _check_overflow_study(summary["overflow"])
    assert "where float16 overflows" in text


def _check_overflow_study(study: dict) -> None:
    assert study["residual_default"]["first_bad_forward"] is None       # the FP32 tags protect the variance
    assert study["residual_lowered"]["first_bad_forward"]["name"] == "pow"
    assert study["residual_lowered"]["first_bad_forward"]["tag"] == "LOWER"
    assert study["logits_default"]["first_bad_forward"]["name"] == "matmul"   # q @ k^T overflows
    assert study["logits_matmul_fp32"]["first_bad_forward"] is None
    assert study["residual_lowered"]["worst_rms"] == np.inf
    # The fused ops (the model's default) under the same stress: float32 inside, nothing overflows.
    assert study["fused_residual_lowered"]["first_bad_forward"] is None
    assert study["fused_logits_default"]["first_bad_forward"] is None


def test_the_overflow_study_is_reproducible_with_a_fixed_seed() -> None:
    module = _load()
    args = module.parse_args(["--steps", "1"])
    inputs, targets = ta.data.copy_task(16, args.length, args.vocab, seed=0)
    x, y = ta.tensor(inputs), ta.tensor(targets)
    first = module.overflow_study(module.build(args), args, x, y, lambda *parts: None)
    second = module.overflow_study(module.build(args), args, x, y, lambda *parts: None)
    assert first == second
    _check_overflow_study(first)


@pytest.mark.parametrize("flags", [[], ["--written-out"]], ids=["fused", "written-out"])
def test_the_study_is_the_same_whichever_variant_trained(flags: list) -> None:
    module = _load()
    args = module.parse_args(["--steps", "1", *flags])
    inputs, targets = ta.data.copy_task(16, args.length, args.vocab, seed=0)
    model = module.build(args)
    assert isinstance(model.ln_f, ta.nn.LayerNorm) == (not flags)
    assert model.blocks[0].attn.fused == (not flags)
    _check_overflow_study(module.overflow_study(model, args, ta.tensor(inputs), ta.tensor(targets), lambda *p: None))


def test_the_default_model_uses_the_library_layers() -> None:
    module = _load()
    model = module.build(module.parse_args(["--steps", "1"]))
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"LayerNorm", "GELU"} <= kinds and model.blocks[0].attn.fused
    assert all(type(m) is not module.LayerNorm for m in model.modules())  # not the written-out one
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            module.loss_of(model, *(ta.tensor(a) for a in ta.data.copy_task(2, 8, 16, seed=0)))
    names = {r.name for r in t.ops}
    assert {"layer_norm", "gelu", "scaled_dot_product_attention"} <= names and "softmax" not in names


def test_progress_lines_for_both_runs(capsys: pytest.CaptureFixture) -> None:
    _load().main(["--steps", "20", "--json", os.devnull])
    lines = capsys.readouterr().out.splitlines()
    fp32 = [line for line in lines if line.startswith("float32  step ")]
    amp = [line for line in lines if line.startswith("AMP      step ")]
    # Every 2 steps (a tenth of the run) and step 1; a slow machine may add lines (one at least every 5 s).
    assert {f"{n}/20" for n in (1, *range(2, 21, 2))} <= {line.split()[2] for line in fp32}
    assert fp32[0].split()[2] == "1/20" and fp32[-1].split()[2] == "20/20" and "scale" not in fp32[0]
    assert amp[-1].split()[2] == "20/20" and "scale 65536  skipped 0" in amp[-1] and amp[-1].endswith(" s")
    assert not any("\r" in line for line in lines)


def test_no_amp_out_writes_the_float32_loss_and_says_why_only_that(tmp_path: Any,
                                                                   capsys: pytest.CaptureFixture) -> None:
    summary = _load().main(["--steps", "3", "--no-amp", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    assert summary["plot"] == str(tmp_path / "loss.png") and (tmp_path / "loss.png").stat().st_size > 5000
    assert "float32's loss only: amp_study.png compares AMP with float32, which --no-amp skips" in text


def test_a_few_steps_with_the_trace(capsys: pytest.CaptureFixture) -> None:
    summary = _load().main(["--steps", "3", "--trace"])
    text = capsys.readouterr().out
    assert "information lost at casts" in text and "precision trace:" in text
    assert summary["steps"] == 3 and len(summary["scales"]) == 3


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps: must be a positive integer, got 0"),
    (["--lr", "nan"], "--lr: must be a positive finite number, got nan"),
    (["--heads", "3"], "--heads 3 must divide --dim 32"),
    (["--vocab", "2"], "--vocab: must be at least 3 (two tokens and the separator), got 2"),
    (["--seed", "-1"], "--seed: must be a non-negative integer, got -1"),
])
def test_bad_flags_stop_before_training(argv: list, message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        _load().main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tiny_transformer.py: error: ") and message in err and "Traceback" not in err


def test_unwritable_out_stops_before_training(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit):
        _load().main(["--out", str(blocker)])
    assert "--out " in capsys.readouterr().err


def test_copy_task_is_seeded_and_shaped() -> None:
    a = ta.data.copy_task(4, length=3, vocab=5, seed=7)
    b = ta.data.copy_task(4, length=3, vocab=5, seed=7)
    np.testing.assert_array_equal(a[0], b[0])
    inputs, targets = a
    assert inputs.shape == targets.shape == (4, 6) and inputs.dtype == np.int64
    assert (inputs[:, 3] == 4).all()                                  # the separator
    np.testing.assert_array_equal(targets[:, 3:], inputs[:, :3])      # the copy
    assert (targets[:, :2] == -100).all() and (targets[:, 2] == 4).all()
    assert inputs[:, :3].max() <= 3
    with pytest.raises(ValueError, match="copy_task: vocab must be an integer >= 3, got 2"):
        ta.data.copy_task(4, vocab=2)


def test_the_amp_loop_is_in_the_example_file() -> None:
    import ast
    with open(EXAMPLE) as f:
        tree = ast.parse(f.read())
    train = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "train")

    def name(node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{name(node.value)}.{node.attr}"
        if isinstance(node, ast.Call):
            return f"{name(node.func)}()"
        return "?"

    calls = {name(node.func) for node in ast.walk(train) if isinstance(node, ast.Call)}
    assert {"optimizer.zero_grad", "ta.amp.autocast", "scaler.scale().backward", "scaler.step",
            "scaler.update"} <= calls


def test_help_lists_the_flags() -> None:
    result = subprocess.run([sys.executable, EXAMPLE, "--help"], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr
    for flag in ("--amp", "--no-amp", "--steps", "--batch-size", "--lr", "--length", "--vocab", "--dim", "--heads",
                 "--written-out", "--seed", "--device", "--out", "--trace", "--json"):
        assert flag in result.stdout


def test_amp_out_writes_the_study_plot(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    summary = _load().main(["--steps", "3", "--out", str(tmp_path)])
    assert summary["plot"] == str(tmp_path / "amp_study.png") and (tmp_path / "amp_study.png").stat().st_size > 5000
    assert f"plot: {tmp_path / 'amp_study.png'}" in capsys.readouterr().out
