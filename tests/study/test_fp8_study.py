"""The study tools know fp8: the trace's per-cast statistics, the recipe shadow run, the roofline explanation.

- a delayed-scaling cast whose tensor grew past its history's amax saturates,
  and the trace counts exactly the clipped values (not the current-scaling
  amax element that x * (max / amax) rounds a hair above max); values below
  the format's reach are counted as underflow; MSE and SQNR match a NumPy
  computation; a weight-cache hit is listed, not measured again;
- ``shadow_run(..., fp8_recipes=(a, b))`` runs the step under each recipe and
  compares op by op; against the float32 twin the fp8 linear aligns with the
  twin's plain linear;
- ``explain_fp8``: the tiny model's GEMMs cannot win on an H200, a square
  8192 GEMM can; the bounds follow the stated byte counts.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp import recipe as R
from tinyamp.study.fp8_roofline import H200, estimate
from tinyamp.kernels import fp8


def test_the_trace_counts_saturation_underflow_and_error_of_each_fp8_cast() -> None:
    layer = ta.nn.Linear(8, 4)
    recipe = R.DelayedScaling(amax_history_len=2)
    with ta.amp.fp8_autocast(fp8_recipe=recipe):
        layer(ta.ones(2, 8))  # the input's amax 1 goes into the history: next scale 448
    x = np.ones((2, 8), np.float32)
    x[0, :3] = [600.0, 5.0, 2.0 ** -20]  # 600 * 448 and 5 * 448 saturate; 2^-20 * 448 is below E4M3's reach
    with ta.amp.trace() as t:
        with ta.amp.fp8_autocast(fp8_recipe=recipe):
            layer(ta.tensor(x))
            layer(ta.tensor(x))  # the weight again: a cache hit
    records = [c for c in t.fp8_casts if "input" in c.quantizer]
    stats = records[0].stats
    assert stats.scale_min == stats.scale_max == 448.0
    assert stats.saturated == 2 and stats.underflow == 1 and stats.elements == 16
    q = fp8.decode(fp8.encode(x * np.float32(448), ta.float8_e4m3fn), ta.float8_e4m3fn) / np.float32(448)
    assert stats.mse == pytest.approx(float(np.mean((q.astype(np.float64) - x) ** 2)), rel=1e-6)
    weights = [c for c in t.fp8_casts if "weight" in c.quantizer]
    assert [w.cached for w in weights] == [False, True] and weights[1].stats is None
    assert records[0].layer == "Linear(8, 4)" and records[0].phase == "forward"
    text = str(t)
    assert "fp8 casts" in text and "DelayedScaling e4m3 input" in text and "(weight cache hit)" in text
    assert t.to_dict()["fp8_casts"][0]["stats"]["saturated"] == 2

    current = R.Float8CurrentScaling()
    with ta.amp.trace() as t2:
        with ta.amp.fp8_autocast(fp8_recipe=current):
            layer(ta.tensor(np.linspace(-3.3, 7.7, 64, dtype=np.float32).reshape(8, 8)))
    assert t2.fp8_casts[0].stats.saturated == 0  # the amax element lands on 448: not clipping


def _step(model, x, y):
    with ta.autocast(dtype=ta.bfloat16):
        with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling()):
            out = model(x)
        return ta.nn.functional.cross_entropy(out, y)


def test_the_shadow_run_compares_one_step_under_two_recipes() -> None:
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(32, 64), ta.nn.ReLU(), ta.nn.Linear(64, 8))
    x, y = ta.randn(16, 32), ta.tensor(np.arange(16) % 8)
    same = ta.amp.shadow_run(_step, model, x, y, fp8_recipes=(R.Float8CurrentScaling(), R.Float8CurrentScaling()))
    assert same.worst() == 0.0  # the same recipe twice: the same bits
    report = ta.amp.shadow_run(_step, model, x, y, fp8_recipes=(R.Float8CurrentScaling(fp8_format=R.Format.E4M3),
                                                                 R.MXFP8BlockScaling()))
    assert [r.name for r in report.ops] == ["fp8linear", "relu", "fp8linear", "cross_entropy"]
    assert 0 < report.worst() < 1 and "fp8 recipe Float8CurrentScaling" in str(report)
    assert not report.unmatched["AMP"] and model[0].weight.grad is None  # the caller's model untouched
    twin = ta.amp.shadow_run(_step, model, x, y)  # against float32: no fp8 in the twin, linear matched
    assert not twin.unmatched["AMP"] and not twin.unmatched["reference"]
    assert [r.name for r in twin.ops][0] == "fp8linear" and twin.ops[0].forward.rms > 0
    with pytest.raises(TypeError, match="fp8_recipes must be a pair"):
        ta.amp.shadow_run(_step, model, x, y, fp8_recipes=(R.Float8CurrentScaling(),))


def test_explain_fp8_puts_each_gemm_on_the_roofline() -> None:
    tiny = ta.nn.Sequential(ta.nn.Linear(32, 96), ta.nn.ReLU(), ta.nn.Linear(96, 32))
    report = ta.amp.explain_fp8(tiny, ta.randn(256, 32))
    assert [g.gemm for g in report.gemms] == ["fprop", "dgrad", "wgrad"] * 2
    assert report.fp8_us > report.bf16_us  # width 32: quantisation dominates, fp8 cannot win
    assert "_fp8_meta" not in tiny[0].__dict__  # ran on a copy
    big = estimate("sq", "fprop", 8192, 8192, 8192, 2 * 8192 * 8192)
    assert big.speedup > 1.4 and big.verdict == "fp8 faster: compute-bound"
    assert big.bf16_us == pytest.approx(2 * 8192 ** 3 / (989e12) * 1e6)
    assert big.quantize_us == pytest.approx(2 * 8192 * 8192 * 6 / 4.8e12 * 1e6)
    small = estimate("sq", "fprop", 1024, 1024, 1024, 2 * 1024 * 1024)
    assert small.speedup < 1 and "slower" in small.verdict
    assert H200.ridge_fp8 == pytest.approx(412.3, abs=0.1)
    kept = ta.amp.explain_fp8(tiny, ta.randn(8, 32), module_filter_fn=ta.amp.exclude_first_last(tiny, 1, 0))
    assert kept.kept_16_bit == ["Linear(32, 96)"] and len(kept.gemms) == 3
    assert "fp8 on a H200 SXM" in str(kept)
