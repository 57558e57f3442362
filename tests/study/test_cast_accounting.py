"""Information lost at every cast (tinyamp/study/rounding.py through the precision report).

Exact counts on constructed values around float16's limits, forward (explicit
and autocast casts) and backward (the gradient casts of Cast nodes), for the
roundings ops report themselves (``record_cast``), and the printed section.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import precision
from tinyamp.study.rounding import rounding_stats
from tinyamp.autograd.function import Function
from tests.support import REPO

# Constructed float32 values and what float16 does to each (ties round to even).
UNDERFLOW = [2.0**-26, -2.0**-27, 2.0**-30, 2.0**-25]                 # 2^-25 is half of 2^-24: ties to 0
SUBNORMAL = [2.0**-20, -3 * 2.0**-22, 2.0**-15, -2.0**-24, 1.5 * 2.0**-25]  # the last rounds up to 2^-24
OVERFLOW = [1e5, -7e4, 65520.0, 3e38]                                  # 65520 = 65504 + half an ulp: to inf
KEPT = [1.0, 0.0, -2.0**-14, 65519.0, np.inf]                          # normal, zero, smallest normal, to 65504,
NANS = [np.nan, np.nan]                                                 # an inf that was already inf


pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")


def _constructed() -> np.ndarray:
    values = np.array(UNDERFLOW + SUBNORMAL + OVERFLOW + KEPT + NANS, dtype=np.float32)
    return np.random.default_rng(0).permutation(values)


def _check(stats: object) -> None:
    assert (stats.elements, stats.underflow, stats.subnormal, stats.overflow, stats.nan) == (20, 4, 5, 4, 2)
    assert stats.min_abs == float(np.float32(2.0**-30))
    assert stats.max_abs == float(np.float32(3e38))


def test_rounding_stats_count_each_kind_exactly() -> None:
    source = _constructed()
    _check(rounding_stats(source, source.astype(np.float16)))
    # The same values into bfloat16 (float32's exponent range): nothing under- or overflows.
    as_bf16 = rounding_stats(source, source.astype(ta.bfloat16))
    assert (as_bf16.underflow, as_bf16.subnormal, as_bf16.overflow, as_bf16.nan) == (0, 0, 0, 2)


def test_rounding_stats_refuses_mismatched_arrays() -> None:
    with pytest.raises(ValueError, match=r"rounding_stats: source \[3\] \(float32\) and result \[2\]"):
        rounding_stats(np.zeros(3, np.float32), np.zeros(2, np.float16))


def test_forward_casts_explicit_and_autocast() -> None:
    x = ta.tensor(_constructed())
    with ta.amp.trace() as t:
        x.half()                                        # explicit
        with ta.amp.autocast(lower_ops={"neg"}):
            ta.neg(x)                                   # autocast (neg overridden to LOWER)
    explicit, autocast = t.casts
    assert (explicit.kind, autocast.kind) == ("explicit", "autocast")
    _check(explicit.rounding)
    _check(autocast.rounding)
    totals = t.totals()["rounding"]["forward"]
    assert (totals["elements"], totals["underflow"], totals["overflow"]) == (40, 8, 8)


def test_backward_gradient_casts_count_what_float16_gradients_lose() -> None:
    # x16 -> float32 -> times constructed g: backward casts g (float32) back to float16.
    x16 = ta.zeros(20, dtype=ta.float16, requires_grad=True)
    g = ta.tensor(_constructed())
    with ta.amp.trace() as t:
        ((x16.float()) * g).sum().backward()
    backward = [c for c in t.casts if c.phase == "backward"]
    assert len(backward) == 1 and backward[0].kind == "backward"
    assert (backward[0].source, backward[0].target) == ("float32", "float16")
    _check(backward[0].rounding)
    assert t.totals()["rounding"]["backward"]["underflow"] == 4
    # ...and the gradient that arrived really is what float16 made of g.
    np.testing.assert_array_equal(x16.grad.numpy(), _constructed().astype(np.float16))


def test_autocast_gradient_cast_of_an_fp32_op_in_backward() -> None:
    # exp is FP32: a float16 input is cast up; its float32 gradient is cast back down.
    x16 = ta.tensor(np.zeros(20), dtype=ta.float16, requires_grad=True)
    g = ta.tensor(_constructed())
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y = ta.exp(x16)                            # exp(0) = 1: the gradient is g itself
        (y * g).sum().backward()
    down = [c for c in t.casts if c.phase == "backward" and c.target == "float16"]
    assert len(down) == 1 and down[0].op == "exp"
    _check(down[0].rounding)


def test_cache_hits_convert_nothing_and_count_nothing() -> None:
    w = ta.tensor(_constructed().reshape(4, 5), requires_grad=True)
    x = ta.ones(2, 5)
    with ta.amp.trace() as t, ta.amp.autocast(), np.errstate(invalid="ignore"):
        ta.linear(x, w)
        ta.linear(x, w)
    weight_casts = [c for c in t.casts if c.shape == [4, 5]]
    assert [c.kind for c in weight_casts] == ["autocast", "cache hit"]
    _check(weight_casts[0].rounding)
    assert weight_casts[1].rounding is None


class RoundsInside(Function):
    """y = x rounded to float16 inside the op; dx = gy rounded through float16 (a fused cast each way)"""

    precision = ta.amp.NEUTRAL
    name = "rounds_inside"

    def forward(self, xp, x):
        y = x.astype(np.float16)
        precision.record_cast(self, x, y, "forward")
        return y.astype(np.float32)

    def backward(self, gy):
        rounded = gy.array.astype(np.float16)
        precision.record_cast(self, gy.array, rounded, "backward")
        return ta.tensor(rounded.astype(np.float32))


def test_fused_casts_reported_by_an_op_count_the_same() -> None:
    x = ta.tensor(_constructed(), requires_grad=True)
    g = ta.tensor(_constructed())
    with ta.amp.trace() as t, np.errstate(invalid="ignore"):
        (RoundsInside()(x) * g).sum().backward()
    fused = [c for c in t.casts if c.fused]
    assert [(c.phase, c.kind, c.op) for c in fused] == [("forward", "fused", "rounds_inside"),
                                                       ("backward", "fused", "rounds_inside")]
    for c in fused:
        _check(c.rounding)
    row = t.ops[fused[0].op_index]
    assert row.name == "rounds_inside" and row.phase == "forward" and fused[0].index in row.casts
    assert fused[1].op_index == row.index           # the backward rounding names the op that made it
    assert t.totals()["fused_casts"] == 2
    assert fused[0].rule == "fused: float32 -> float16 inside rounds_inside"
    assert fused[1].rule == "fused: gradient float32 -> float16 inside rounds_inside"


def test_record_cast_without_a_trace_does_nothing_and_checks_direction() -> None:
    assert precision.current_trace() is None
    precision.record_cast("op", np.zeros(2, np.float32), np.zeros(2, np.float16), "forward")
    with ta.amp.trace() as t:
        with pytest.raises(ValueError, match="direction must be 'forward' or 'backward', got 'sideways'"):
            t.record_cast("op", np.zeros(2, np.float32), np.zeros(2, np.float16), "sideways", fused=True)


def test_nested_traces_both_see_fused_casts() -> None:
    with ta.amp.trace() as outer:
        with ta.amp.trace() as inner:
            precision.record_cast("op", np.array([1e5], np.float32), np.array([np.inf], np.float16), "forward")
    assert [c.rounding.overflow for c in inner.casts] == [1]
    assert [c.rounding.overflow for c in outer.casts] == [1]


def test_print_and_to_dict_show_what_each_cast_lost() -> None:
    x = ta.tensor(_constructed(), requires_grad=True)
    with ta.amp.trace() as t:
        (x.half().float() * 2.0).sum().backward()
    text = str(t)
    assert "information lost at casts" in text
    row = next(line for line in text.splitlines() if "float32 -> float16" in line and "forward" in line
               and line.strip()[0].isdigit() and "->0" not in line)
    cells = row.split()
    # index, phase, "float32", "->", "float16", made-for, elements, ->0, sub, ->inf, nan, min, max
    assert cells[6:11] == ["20", "4", "5", "4", "2"]
    # The NaNs are counted again by the cast back up (a NaN stays NaN); nothing else is lost there.
    assert "forward: 40 values converted, 4 became zero, 5 subnormal, 4 inf, 4 NaN" in text
    data = json.loads(json.dumps(t.to_dict(), default=str))
    first = data["casts"][0]["rounding"]
    assert (first["underflow"], first["subnormal"], first["overflow"], first["nan"]) == (4, 5, 4, 2)
    assert data["totals"]["rounding"]["forward"]["overflow"] == 4


def test_mnist_trace_flag_prints_the_loss_section(capsys: pytest.CaptureFixture) -> None:
    import importlib.util
    import os
    path = os.path.join(str(REPO), "examples", "mnist_mlp.py")
    spec = importlib.util.spec_from_file_location("example_mnist_mlp_trace", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--hidden", "16", "--steps", "1", "--epochs", "1", "--trace"])
    out = capsys.readouterr().out
    assert "information lost at casts" in out
    assert "backward: " in out and "values converted" in out
