"""examples/autocast_tour.py: each section prints the outcome its explanation claims."""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import pytest
from tests.support import REPO

EXAMPLE = os.path.join(str(REPO), "examples", "autocast_tour.py")


def _tour(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    spec = importlib.util.spec_from_file_location("example_autocast_tour", EXAMPLE)
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(argv)
    return capsys.readouterr().out


def test_every_section_shows_what_it_explains(capsys: pytest.CaptureFixture) -> None:
    out = _tour([], capsys)
    for number in range(1, 7):
        assert re.search(rf"^{number}\. ", out, re.M), f"section {number} missing"
    assert out.count("What happened and why:") == 6
    # 1: casts forward and backward; float32 weights keep float32 gradients.
    assert "[backward]  float16 -> float32" in out and "[backward]  float32 -> float16" in out
    assert re.search(r"0\.weight\s+float32\s+grad float32", out)
    # 2: one conversion per weight, reused, and redone after an in-place write.
    assert "cache misses 5, hits 7" in out
    # 3: the float16 running sum stalls at 2048, gemm does not.
    assert re.search(r"sum of  4096 ones:  float16 running sum\s+2048\s+gemm \(float32 accumulator\)\s+4096", out)
    # 4: every unscaled logit gradient flushes to zero; none does after scaling by 2^16.
    assert "loss scale       1: the float32 -> float16 gradient cast of the logits: 192 values, 192 became zero" in out
    assert "loss scale   65536: the float32 -> float16 gradient cast of the logits: 192 values, 0 became zero" in out
    # 5: float16 weights never move; masters move most copies.
    assert "float16 weights, no master:    0 of 1000 weights ever moved" in out
    moved = int(re.search(r"float32 master weights:\s+(\d+) of 1000", out).group(1))
    assert moved > 500
    # 6: the shadow run points at exp only when exp is lowered.
    assert "exp with its FP32 tag: first bad op none" in out
    assert "exp overridden to LOWER: first bad op #6 exp (LOWER, output float16)" in out


def test_bfloat16_needs_no_scaling(capsys: pytest.CaptureFixture) -> None:
    out = _tour(["--section", "4", "--dtype", "bfloat16"], capsys)
    assert "loss scale       1: the float32 -> bfloat16 gradient cast of the logits: 192 values, 0 became zero" in out
    assert "bfloat16 has float32's exponent range" in out
