"""fp8 recipes (amp/recipe.py) against pure-Python models of Transformer Engine's rules.

- DelayedScaling: a Hypothesis-driven sequence of steps (each quantises
  tensors whose amax is drawn from a corpus with 0, float32 subnormals, inf,
  NaN and huge values, then updates) follows a pure-Python model of TE's
  ``_default_get_amax_and_update_history`` + ``_default_sf_compute``: max into
  slot 0, the window's max or most recent value, (max / amax) / 2^margin with
  the previous scale kept on a non-positive or non-finite amax and an infinite
  scale capped at float32's max, then the roll by one and slot 0 zeroed;
- current scaling: TE's ``compute_scale_from_amax`` on the same corpus
  (power-of-two option included);
- block and MX scaling: every tile's scale and every element against NumPy
  written from the definitions;
- the recipes' argument rules (pure E5M2 refused, history length, algorithms).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyamp as ta
from tinyamp.amp import recipe as R
from tinyamp.kernels import fp8, fp8_quantize as fq

F32_MAX = 3.4028234663852886e38


def f32(value: float) -> float:
    """``value`` rounded to float32 (round to nearest even; beyond the range: inf), in pure Python."""
    if math.isnan(value) or math.isinf(value):
        return value
    if abs(value) >= 3.4028235677973366e38:  # at or above the rounding boundary of float32's max
        return math.copysign(math.inf, value)
    return struct.unpack("f", struct.pack("f", value))[0]


class DelayedModel:
    """TE's delayed-scaling state machine for one tensor, in Python floats rounded to float32."""

    def __init__(self, fmax: float, length: int, algo: str, margin: float) -> None:
        self.fmax, self.algo, self.margin = fmax, algo, margin
        self.history = [0.0] * length
        self.scale = 1.0

    def observe(self, amax: float) -> None:
        head = self.history[0]
        self.history[0] = math.nan if math.isnan(amax) or math.isnan(head) else max(head, amax)

    def update(self) -> None:
        window = self.history
        if self.algo == "max":
            amax = math.nan if any(math.isnan(v) for v in window) else max(window)
        else:
            amax = window[0]
        if amax > 0 and math.isfinite(amax):
            sf = f32(f32(self.fmax / amax) / f32(2.0 ** self.margin))
            self.scale = F32_MAX if math.isinf(sf) else sf
        self.history = window[1:] + window[:1]
        self.history[0] = 0.0


AMAXES = st.one_of(
    st.sampled_from([0.0, 1e-45, 1e-40, 2.0 ** -126, 1e-30, 1.0, 448.0, 57344.0, 3e38, F32_MAX, math.inf, math.nan]),
    st.floats(min_value=0.0, max_value=F32_MAX, width=32, allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 5), algo=st.sampled_from(["max", "most_recent"]), margin=st.sampled_from([0, 1, 3]),
       fmt=st.sampled_from([R.Format.HYBRID, R.Format.E4M3]), role=st.sampled_from(R.ROLES),
       steps=st.lists(st.lists(AMAXES, min_size=1, max_size=3), min_size=1, max_size=8))
def test_delayed_scaling_follows_the_reference_model(length, algo, margin, fmt, role, steps) -> None:
    recipe = R.DelayedScaling(margin=margin, fp8_format=fmt, amax_history_len=length, amax_compute_algo=algo)
    q = recipe.make_quantizer(role)
    model = DelayedModel(q.fmt.max, length, algo, margin)
    for observed in steps:
        for amax in observed:
            x = np.array([np.float32(amax), np.float32(-amax / 4 if math.isfinite(amax) else 0)], np.float32)
            out = q.quantize(x, ta.float32)
            np.testing.assert_array_equal(out.scale_inv, fq.reciprocal(np.float32(model.scale)))  # cast with the old scale
            model.observe(f32(amax))
        q.update()
        model.update()
        assert q.scale.tolist() == [model.scale] or (math.isnan(q.scale[0]) and math.isnan(model.scale))
        got = [float(v) for v in q.amax_history]
        assert len(got) == length
        for g, w in zip(got, model.history):
            assert g == w or (math.isnan(g) and math.isnan(w)), (got, model.history)
    R.PENDING_BACKWARD.clear()


def test_delayed_scaling_edge_rules_by_hand() -> None:
    q = R.DelayedScaling(amax_history_len=3).make_quantizer("input")
    q.quantize(np.zeros(4, np.float32), ta.float32)   # amax 0: the scale stays 1
    q.update()
    assert q.scale[0] == 1.0
    q.quantize(np.array([2.0], np.float32), ta.float32)
    q.update()
    assert q.scale[0] == np.float32(448 / 2)
    q.quantize(np.array([np.inf], np.float32), ta.float32)  # inf: the history's max is inf -> scale kept
    q.update()
    assert q.scale[0] == np.float32(224)
    q.quantize(np.array([1e-45], np.float32), ta.float32)  # subnormal amax; the window still holds inf
    q.update()
    assert q.scale[0] == np.float32(224)
    q.update()
    q.update()  # inf has rolled out: only 1e-45 left, 448 / 1e-45 overflows -> float32's max
    assert q.scale[0] == np.float32(F32_MAX)


def _current_reference(amax: float, fmax: float, pow2: bool) -> float:
    if amax == 0 or not math.isfinite(amax):
        return 1.0
    scale = f32(fmax / amax)
    scale = F32_MAX if math.isinf(scale) else scale
    if pow2:
        scale = 2.0 ** math.floor(math.log2(scale))
    return scale


@settings(max_examples=200, deadline=None)
@given(amax=AMAXES, pow2=st.booleans(), f=st.sampled_from([fp8.E4M3, fp8.E5M2]))
def test_current_scale_follows_te_compute_scale_from_amax(amax, pow2, f) -> None:
    got = fq.current_scale(np.array(amax, np.float32), f, pow2=pow2)
    assert float(got) == _current_reference(float(np.float32(amax)), f.max, pow2)


def test_current_quantizer_quantizes_with_its_own_amax() -> None:
    x = np.array([3.0, -7.0, 0.5], np.float32)
    q = R.Float8CurrentScaling().make_quantizer("input")
    out = q.quantize(x, ta.bfloat16)
    scale = np.float32(448) / np.float32(7)
    np.testing.assert_array_equal(out.data, fp8.encode(x * scale, ta.float8_e4m3fn))
    assert out.dtype == ta.bfloat16 and out.fmt is fp8.E4M3 and q.last_amax == 7
    g = R.Float8CurrentScaling().make_quantizer("grad_output")
    assert g.fmt is fp8.E5M2
    assert R.Float8CurrentScaling(fp8_format=R.Format.E4M3).make_quantizer("grad_output").fmt is fp8.E4M3


def test_block_scaling_tiles_follow_the_definition() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 40)) * np.exp(rng.uniform(-6, 6, (6, 1)))).astype(np.float32)
    x[2, 3] = 0.0
    x[4] = 0.0  # a row of zeros: scale 1
    for block in ((1, 16), (4, 16)):
        q = fq.quantize_blocks(x, fp8.E4M3, block, columnwise=True)
        rows, cols = block
        for i in range(0, 6, rows):
            for j in range(0, 40, cols):
                tile = x[i:i + rows, j:j + cols]
                amax = float(np.abs(tile).max())
                scale = _current_reference(amax, 448.0, True)
                assert q.scale_inv[i // rows, j // cols] == np.float32(1 / scale)
                np.testing.assert_array_equal(q.data[i:i + rows, j:j + cols],
                                              fp8.encode(tile * np.float32(scale), ta.float8_e4m3fn))
        deq = fq.dequantize(q)
        assert np.abs(deq - x).max() <= np.abs(x).max() / 16  # E4M3: 3 mantissa bits
    # the recipe's quantisers: 1 x block inputs, block x block weights, power-of-two scales by default
    recipe = R.Float8BlockScaling(block=16)
    for role, block in (("input", (1, 16)), ("weight", (16, 16))):
        made = recipe.make_quantizer(role).quantize(x, ta.float32)
        want = fq.quantize_blocks(x, fp8.E4M3, block)
        assert made.block == block
        np.testing.assert_array_equal(made.data, want.data)
        np.testing.assert_array_equal(made.scale_inv, want.scale_inv)
        if rows == 1:  # the column-wise copy: the transpose quantised along its own rows
            ref = fq.quantize_blocks(np.ascontiguousarray(x.T), fp8.E4M3, block)
            np.testing.assert_array_equal(q.columnwise.data, ref.data)
            np.testing.assert_array_equal(q.columnwise.scale_inv, ref.scale_inv)


@pytest.mark.parametrize("rule", ["floor", "rceil"])
def test_mx_blocks_follow_the_definition(rule: str) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 70)) * 50).astype(np.float32)
    q = fq.quantize_mx(x, fp8.E4M3, rule=rule, columnwise=True)
    assert q.scale_inv.dtype == np.uint8 and q.scale_inv.shape == (3, 3)
    for i in range(3):
        for b in range(3):
            block = x[i, 32 * b:32 * (b + 1)]
            code = int(fp8.e8m0_exponent(np.abs(block).max(), ta.float8_e4m3fn, rule))
            assert q.scale_inv[i, b] == code
            np.testing.assert_array_equal(q.data[i, 32 * b:32 * (b + 1)],
                                          fp8.encode(block * np.float32(2.0 ** (127 - code)), ta.float8_e4m3fn))
            value = fp8.decode(q.data[i, 32 * b:32 * (b + 1)], ta.float8_e4m3fn) * np.float32(2.0 ** (code - 127))
            np.testing.assert_array_equal(fq.dequantize(q)[i, 32 * b:32 * (b + 1)], value)
    assert q.columnwise.shape == (70, 3)


def test_recipe_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="pure E5M2"):
        R.DelayedScaling(fp8_format=R.Format.E5M2)
    with pytest.raises(ValueError, match="pure E5M2"):
        R.Float8CurrentScaling(fp8_format=R.Format.E5M2)
    with pytest.raises(ValueError, match="amax_history_len"):
        R.DelayedScaling(amax_history_len=0)
    with pytest.raises(ValueError, match="amax_compute_algo"):
        R.DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(ValueError, match="scale_rule"):
        R.MXFP8BlockScaling(scale_rule="even")
    with pytest.raises(ValueError, match="both inputs and weights"):
        R.Float8BlockScaling(x_block_scaling_dim=2)
    with pytest.raises(ValueError, match="fp8_format"):
        R.Float8CurrentScaling(fp8_format="E3M4")
    assert R.DelayedScaling().amax_history_len == 1024 and R.DelayedScaling().fp8_format is R.Format.HYBRID
    assert R.Float8BlockScaling().fp8_format is R.Format.E4M3 and R.MXFP8BlockScaling().scale_rule == "rceil"
    assert ta.amp.recipe.Format.HYBRID.formats() == (fp8.E4M3, fp8.E5M2)


def _e8m0_model(amax: float, f: fp8.Fp8Format, rule: str) -> int:
    """The MX scale's E8M0 code of a block's amax (OCP floor / NVIDIA RCEIL), in Python (frexp: exact)."""
    if not math.isfinite(amax):
        return 255
    if amax == 0:
        return 0
    if rule == "floor":
        biased = math.frexp(amax)[1] - 1 + 127 if amax >= 2.0 ** -126 else 0  # a float32 subnormal: exponent 0
        return min(max(biased - f.emax, 0), 254)
    v = f32(f32(amax) / f.max)
    if v == 0:
        return 0
    m, e = math.frexp(v)
    return min(max((e - 1 if m == 0.5 else e) + 127, 0), 254)


@settings(max_examples=80, deadline=None)
@given(amaxes=st.lists(AMAXES, min_size=4, max_size=4), rule=st.sampled_from(["floor", "rceil"]),
       f=st.sampled_from([fp8.E4M3, fp8.E5M2]), seed=st.integers(0, 2**16))
def test_block_and_mx_scales_follow_the_models_on_any_block_amax(amaxes, rule, f, seed) -> None:
    """Each 32-block of a (2, 64) array holds one element of a drawn amax (0, subnormal, huge, inf, NaN) and
    smaller ones: the block recipe's tile scale is TE's power-of-two current scale of it, the MX code the model's,
    and every element is the encoder's code of itself times its tile's scale."""
    rng = np.random.default_rng(seed)
    x = np.zeros((2, 64), np.float32)
    for t, amax in enumerate(amaxes):
        i, j = divmod(t, 2)
        a = np.float32(amax)
        block = (rng.uniform(-1, 1, 32) * a).astype(np.float32) if np.isfinite(a) else rng.uniform(-1, 1, 32)
        block[rng.integers(32)] = a * np.float32(rng.choice([-1, 1]))
        x[i, 32 * j:32 * (j + 1)] = block
    peaks = [float(np.float32(a)) for a in amaxes]
    qb = fq.quantize_blocks(x, f, (1, 32), pow2=True)
    qm = fq.quantize_mx(x, f, rule=rule)
    with np.errstate(all="ignore"):
        for t, amax in enumerate(peaks):
            i, j = divmod(t, 2)
            tile = x[i, 32 * j:32 * (j + 1)]
            scale = np.float32(_current_reference(amax, f.max, True))
            assert qb.scale_inv[i, j] == np.float32(1) / scale
            np.testing.assert_array_equal(qb.data[i, 32 * j:32 * (j + 1)], fp8.encode(tile * scale, f.dtype))
            code = _e8m0_model(amax, f, rule)
            assert int(qm.scale_inv[i, j]) == code
            inverse = np.float32(np.nan) if code == 255 else np.float32(2.0 ** (127 - code))
            np.testing.assert_array_equal(qm.data[i, 32 * j:32 * (j + 1)], fp8.encode(tile * inverse, f.dtype))
