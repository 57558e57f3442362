"""The examples' ``--fp8`` runs: bfloat16 against fp8, the worst casts, the amax plot, the flag checks.

Short runs (the measured targets over full runs and seeds are in
benchmarks/bench_fp8_training.py and RESULTS.md): each example trains the
bfloat16 reference and the fp8 run from the same seed, reports both, names the
fp8 casts that lose most, and draws the amax histories; a flag combination that
cannot mean fp8 stops the example before training.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import warnings
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _main(name: str, argv: list[str]) -> tuple[Any, str]:
    spec = importlib.util.spec_from_file_location(f"fp8_example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summary = module.main(argv)
    return summary, out.getvalue()


@pytest.mark.parametrize("recipe", ["delayed", "mxfp8"])
def test_tiny_transformer_fp8_against_bfloat16(recipe: str, tmp_path: Any) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="No artists with labels")  # MXFP8 has no per-tensor amax
        summary, text = _main("tiny_transformer", ["--fp8", recipe, "--steps", "6", "--out", str(tmp_path)])
    assert summary["bf16_loss"] > 0 and summary["fp8_loss"] > 0
    assert summary["fp8_gap"] == pytest.approx((summary["fp8_loss"] - summary["bf16_loss"]) / summary["bf16_loss"])
    assert "against bfloat16" in text and "where fp8 loses most" in text
    assert summary["fp8_worst_casts"] and {"forward", "backward"} >= {c["phase"] for c in summary["fp8_worst_casts"]}
    with open(os.path.join(tmp_path, "fp8_amax.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_tiny_transformer_e4m3_gradients_are_a_flag() -> None:
    summary, _ = _main("tiny_transformer", ["--fp8", "current", "--fp8-format", "e4m3", "--steps", "3"])
    assert "E4M3" in summary["fp8_recipe"]


def test_mnist_fp8_reports_both_accuracies() -> None:
    summary, text = _main("mnist_mlp", ["--fp8", "--hidden", "64", "--epochs", "1"])
    assert 0 < summary["bfloat16"]["accuracy"] <= 1 and 0 < summary["fp8"]["accuracy"] <= 1
    assert summary["accuracy_gap_points"] == pytest.approx(
        100 * (summary["fp8"]["accuracy"] - summary["bfloat16"]["accuracy"]))
    assert "Float8CurrentScaling" in summary["fp8_recipe"] and "against bfloat16's" in text


def test_mnist_fp8_needs_bfloat16_o1(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        _main("mnist_mlp", ["--fp8", "--dtype", "float16"])
    assert info.value.code == 2 and "--fp8 runs inside bfloat16 autocast" in capsys.readouterr().err
