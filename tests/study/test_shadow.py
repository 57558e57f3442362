"""The float32 shadow run (tinyamp/study/shadow.py): where float16 goes wrong, op by op.

Known answers: an exp overridden to LOWER on inputs near 12 overflows float16
(exp(12) = 162755 > 65504) and is flagged at exp, not before; models that are
safe under the default tags stay within the tolerance everywhere; the twin
starts from master weights; the caller's model, optimizer, scaler, gradients
and random state are unchanged bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn.functional as F
from tinyamp import random as ta_random

nn = ta.nn


def _batch(n: int = 32, features: int = 8, classes: int = 4, seed: int = 0) -> tuple[ta.Tensor, ta.Tensor]:
    rng = np.random.default_rng(seed)
    return (ta.tensor(rng.standard_normal((n, features)), dtype=ta.float32),
            ta.tensor(rng.integers(0, classes, n)))


def _mlp(activation: nn.Module) -> nn.Module:
    ta.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), activation, nn.LayerNorm(32), nn.Linear(32, 4))


def _exp_near_12(lower_exp: bool):
    def step(model: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast(lower_ops={"exp"} if lower_exp else None):
            h = model(x)                              # linear (LOWER), tanh, layer_norm, linear
            z = ta.tanh(h) * 0.25 + 12.0              # inputs of exp within 12 +- 0.25
            return ta.exp(z).mean() * 1e-5
    return step


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_exp_lowered_near_12_is_flagged_at_exp_and_not_before() -> None:
    model, (x, y) = _mlp(nn.Tanh()), _batch()
    report = ta.amp.shadow_run(_exp_near_12(lower_exp=True), model, x, y, scaler=ta.amp.GradScaler())
    names = [r.name for r in report.ops]
    assert names == ["linear", "tanh", "layer_norm", "linear", "tanh", "mul", "add", "exp", "mean", "mul"]
    exp = report.ops[names.index("exp")]
    assert exp.tag == "LOWER" and exp.inputs == ["float16"] and exp.outputs == ["float16"]
    assert report.first_bad_forward is exp and exp.forward.rms == np.inf
    assert all(r.forward.rms <= report.tolerance for r in report.ops[:exp.index])   # not before
    # Backward runs from the loss: mean's and the scaling's gradients are fine, exp's is the first inf.
    assert report.first_bad_backward is exp
    assert "first op over the tolerance: forward #7 exp; backward #7 exp" in str(report)


# add's backward also sums the gradient for the constant 12.0, which needs none (the engine drops
# it): in float16 that unused sum overflows. The shadow run compares only gradients that are needed.
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_the_same_model_under_the_default_tags_is_clean() -> None:
    model, (x, y) = _mlp(nn.Tanh()), _batch()
    report = ta.amp.shadow_run(_exp_near_12(lower_exp=False), model, x, y, scaler=ta.amp.GradScaler())
    exp = next(r for r in report.ops if r.name == "exp")
    assert exp.tag == "FP32" and exp.inputs == ["float32"]
    assert report.first_bad_forward is None and report.first_bad_backward is None


@pytest.mark.parametrize("activation", [nn.GELU(), nn.Tanh(), nn.ReLU()], ids=["gelu", "tanh", "relu"])
def test_a_model_safe_under_the_default_tags_stays_within_float16_tolerance(activation: nn.Module) -> None:
    model, (x, y) = _mlp(activation), _batch(n=64)

    def step(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast():
            return F.cross_entropy(m(x), y)

    report = ta.amp.shadow_run(step, model, x, y, scaler=ta.amp.GradScaler())
    assert report.tolerance == 0.1
    assert report.first_bad_forward is None and report.first_bad_backward is None
    assert report.worst("rms") < report.tolerance
    # A chain: each op's own backward ran after the one above it (the x cast before the first
    # linear has no backward, the op does).
    orders = [r.backward_order for r in report.ops]
    assert None not in orders and orders == sorted(orders, reverse=True)
    assert all(p.error is not None for p in report.parameters) and len(report.parameters) == 6
    if not isinstance(activation, nn.ReLU):
        # Smooth ops compound float16's 2^-11 rounding to about 1e-3, even element by element;
        # ReLU's max error is of order 1 where a value within rounding of 0 took the other branch.
        assert report.worst("max") < 1e-2
    assert abs(report.amp_loss - report.reference_loss) < 1e-2 * report.reference_loss


def test_float64_twin_of_a_float32_run_sees_only_float32_rounding() -> None:
    model, (x, y) = _mlp(nn.GELU()), _batch()

    def step(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast(enabled=False):
            return F.cross_entropy(m(x), y)

    report = ta.amp.shadow_run(step, model, x, y, reference_dtype=ta.float64)
    assert report.reference_dtype == "float64" and report.tolerance == 1e-3
    assert report.worst("rms") < 1e-5 and report.worst("rms") > 0   # float32 rounding, nothing more
    twin_row = report.ops[0]
    assert twin_row.inputs == ["float32", "float32", "float32"]


def test_twin_starts_from_the_optimizers_master_weights() -> None:
    ta.manual_seed(0)
    model = nn.Linear(8, 4).half()
    optimizer = ta.optim.SGD(model.parameters(), lr=0.1, master_weights=True)
    masters = [optimizer.state[p]["master_param"] for p in model.parameters()]
    for m in masters:  # low bits float16 cannot hold: the twin must read the masters
        m.array += np.float32(1e-4)
    x, _ = _batch()

    def step(m: nn.Module, x: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast():
            return (m(x) ** 2).mean()

    report = ta.amp.shadow_run(step, model, x, optimizer=optimizer)
    expected = ((x @ ta.tensor(masters[0].array).T + ta.tensor(masters[1].array)) ** 2).mean().item()
    assert report.reference_loss == expected


def _snapshot(model: nn.Module, optimizer: ta.optim.Optimizer, scaler: ta.amp.GradScaler) -> dict:
    def raw(t: object) -> object:
        return (t.array.dtype.str, t.array.tobytes(), t._version[0]) if isinstance(t, ta.Tensor) else t

    state = {
        "params": [(n, raw(p), None if p.grad is None else raw(p.grad)) for n, p in model.named_parameters()],
        "buffers": [(n, raw(b)) for n, b in model.named_buffers()],
        "optimizer": [(k, raw(v)) for p in model.parameters() for k, v in sorted(optimizer.state[p].items())],
        "master_grads": [raw(s["master_param"].grad) if s.get("master_param") is not None
                         and s["master_param"].grad is not None else None for s in optimizer.state.values()],
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
        "scaler": scaler.state_dict(),
        "scaler_arrays": [None if a is None else a.tobytes() for a in (scaler._scale, scaler._growth_tracker)],
        "rng": ta_random.default_generator("cpu").get_state().numpy().tobytes(),
        "training": [m.training for m in model.modules()],
    }
    return state


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_callers_model_optimizer_scaler_grads_and_rng_are_untouched(level: str) -> None:
    ta.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))
    if level == "O2":
        model.half(keep_norm_fp32=True)
    optimizer = ta.optim.Adam(model.parameters(), lr=1e-3, master_weights=level == "O2")
    scaler = ta.amp.GradScaler(init_scale=1024.0)
    x, y = _batch()

    def step(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast():
            return F.cross_entropy(m(x).float(), y)

    # One real step, so every piece of state exists; then gradients left in .grad.
    scaler.scale(step(model, x, y)).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    scaler.scale(step(model, x, y)).backward()

    before = _snapshot(model, optimizer, scaler)
    report = ta.amp.shadow_run(step, model, x, y, optimizer=optimizer, scaler=scaler)
    assert _snapshot(model, optimizer, scaler) == before
    assert report.loss_scale == scaler.get_scale()
    # Both runs drew the same dropout mask: the AMP and twin losses agree to float16 accuracy.
    assert abs(report.amp_loss - report.reference_loss) < 1e-2
    # ... and the next draw from the caller's generator is the one it would have been.
    after_draw = ta.rand(3).numpy()
    ta_random.default_generator("cpu").set_state(ta.tensor(np.frombuffer(before["rng"], np.uint8)))
    np.testing.assert_array_equal(ta.rand(3).numpy(), after_draw)


def test_an_op_only_one_run_has_is_unmatched_and_does_not_shift_the_rest() -> None:
    model, (x, y) = _mlp(nn.GELU()), _batch()

    def step(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast():
            h = m[0](x)
            if h.dtype == ta.float16:      # a branch only the AMP run takes (Cast ops are dropped anyway)
                h = ta.neg(ta.neg(h))
            h = m[3](m[2](m[1](h)))
            return F.cross_entropy(h, y)

    report = ta.amp.shadow_run(step, model, x, y)
    assert report.unmatched == {"AMP": ["neg", "neg"], "reference": []}
    assert [r.name for r in report.ops] == ["linear", "gelu", "layer_norm", "linear", "cross_entropy"]
    assert report.first_bad_forward is None and report.first_bad_backward is None
    assert "ops only the AMP run has (not compared): neg, neg" in str(report)


def test_print_and_to_dict() -> None:
    model, (x, y) = _mlp(nn.GELU()), _batch()

    def step(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        with ta.amp.autocast():
            return F.cross_entropy(m(x), y)

    report = ta.amp.shadow_run(step, model, x, y)
    text = str(report)
    assert text.splitlines()[1].split() == ["#", "op", "tag", "AMP", "dtypes", "fwd", "max", "fwd", "rms", "bwd",
                                            "max", "bwd", "rms"]
    assert "parameter gradients (unscaled)" in text and "0.weight" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert [r["name"] for r in data["ops"]] == [r.name for r in report.ops]
    assert data["ops"][0]["forward"]["rms"] == report.ops[0].forward.rms
    assert data["first_bad_forward"] is None and data["parameters"][0]["name"] == "0.weight"
    # The AMP run's precision trace comes along (casts, what they lost).
    assert any(c.kind == "autocast" for c in report.trace.casts)


def test_bad_arguments_are_named() -> None:
    model, (x, y) = _mlp(nn.GELU()), _batch()
    with pytest.raises(TypeError, match=r"step\(model, \*inputs\) must return the loss, a one-element floating "
                                        r"Tensor, got a float32 tensor of shape \[32, 4\]"):
        ta.amp.shadow_run(lambda m, x: m(x), model, x)
    with pytest.raises(ValueError, match="reference_dtype must be float32 or float64, got float16"):
        ta.amp.shadow_run(lambda m, x: m(x).sum(), model, x, reference_dtype=ta.float16)
    with pytest.raises(TypeError, match="model must be a ta.nn.Module, got function"):
        ta.amp.shadow_run(lambda m, x: m(x).sum(), lambda: None, x)
    with pytest.raises(ValueError, match="tolerance must be a positive finite number, got -1"):
        ta.amp.shadow_run(lambda m, x: m(x).sum(), model, x, tolerance=-1)


def test_bfloat16_runs_get_bfloat16s_tolerance_and_larger_errors() -> None:
    model, (x, y) = _mlp(nn.GELU()), _batch(n=64)

    def step(dtype: ta.dtype):
        def run(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
            with ta.amp.autocast(dtype=dtype):
                return F.cross_entropy(m(x), y)
        return run

    half = ta.amp.shadow_run(step(ta.float16), model, x, y)
    brain = ta.amp.shadow_run(step(ta.bfloat16), model, x, y)
    assert (half.tolerance, brain.tolerance) == (0.1, 0.2)
    assert brain.ops[0].inputs == ["bfloat16"] * 3
    assert brain.first_bad_forward is None and brain.first_bad_backward is None
    # bfloat16 keeps 8 significant bits to float16's 11: about 8x the rounding error.
    assert brain.worst("rms") > 4 * half.worst("rms")
