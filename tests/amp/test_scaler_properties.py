"""Property tests for GradScaler with Hypothesis.

``ScalerMachine`` drives a scaler and one to three optimizers (tinyamp's SGD, Adam,
AdamW, and an optimizer without the masked-step contract) through random
iterations: clean gradients, gradients with inf/nan in random places or that
overflow only once scaled, ``unscale_`` before ``step`` or not, ``update`` with or
without a new scale, state-dict round trips of the scaler and the optimizers.
A pure-Python model of the scale rule predicts the scaler's state; after every
iteration the machine checks the scale and both trackers against it, that each
optimizer's parameters changed if and only if its gradients were finite (and are
bit-for-bit unchanged, state included, when skipped), that the scale stays within
its bounds, finite and positive, that power-of-two scales give unscaled gradients
equal to the unscaled-training ones, and that only the non-contract optimizer
costs host synchronisations.

The machine runs at least 200 examples (more under ``--hypothesis-profile=thorough``).
"""

from __future__ import annotations

import copy
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import tinyamp as ta
from tinyamp.amp import GradScaler
from tinyamp.optim import SGD, Adam, AdamW, Optimizer

F32 = np.float32
TINY = 2.0 ** -126  # the scaler's floor without a min_scale: the smallest normal float32
SHAPES = ((3,), (2, 2))


def f32(x: float) -> float:
    """Round a Python float to float32 (pure Python: struct packs with round-to-nearest)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


class ReferenceScaler:
    """The scale rule in plain Python: what the scaler's device arrays must hold."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval, hysteresis,
                 min_scale, max_scale) -> None:
        self.scale, self.growth, self.hyst = f32(init_scale), 0, hysteresis
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.interval, self.hysteresis = growth_interval, hysteresis
        self.min_scale, self.max_scale = min_scale, max_scale

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.growth = 0
            self.hyst = max(self.hyst - 1, 0)
            if self.hyst == 0:
                self.scale = max(f32(self.scale * self.backoff_factor),
                                 TINY if self.min_scale is None else self.min_scale)
            return
        self.growth += 1
        if self.growth >= self.interval:
            grown = self.scale * self.growth_factor
            if self.max_scale is not None:
                grown = min(grown, self.max_scale)
            grown = f32(grown)
            if math.isfinite(grown):
                self.scale = grown
            self.growth, self.hyst = 0, self.hysteresis


class PlainSGD(Optimizer):
    """No ``_step_supports_amp_scaling``: GradScaler must decide on the host."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        with ta.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.data -= group["lr"] * p.grad.data
                        p._version[0] += 1


FACTORIES = {
    "sgd": lambda ps: SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: Adam(ps, lr=0.01, amsgrad=True),
    "adamw": lambda ps: AdamW(ps, lr=0.01),
    "plain": lambda ps: PlainSGD(ps, lr=0.1),
}


@st.composite
def scaler_configs(draw):
    exponent = draw(st.integers(-10, 30))
    below = draw(st.one_of(st.none(), st.integers(0, 6)))
    above = draw(st.one_of(st.none(), st.integers(0, 6)))
    return dict(init_scale=2.0 ** exponent,
                growth_factor=draw(st.sampled_from([2.0, 4.0, 1.5])),
                backoff_factor=draw(st.sampled_from([0.5, 0.25, 0.75])),
                growth_interval=draw(st.integers(1, 4)),
                hysteresis=draw(st.integers(1, 3)),
                min_scale=None if below is None else 2.0 ** (exponent - below),
                max_scale=None if above is None else 2.0 ** (exponent + above))


def _power_of_two(x: float) -> bool:
    return x > 0 and math.frexp(x)[0] == 0.5


def _snapshot(opt: Optimizer) -> tuple:
    params = [p.array.copy() for g in opt.param_groups for p in g["params"]]
    state = {id(p): {k: (v.array.copy() if isinstance(v, ta.Tensor) else v) for k, v in s.items()}
             for p, s in opt.state.items()}
    return params, state


def _machine_settings() -> settings:
    base = settings.default
    return settings(base, max_examples=max(200, base.max_examples), stateful_step_count=6, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class ScalerMachine(RuleBasedStateMachine):
    @initialize(config=scaler_configs(), kinds=st.lists(st.sampled_from(sorted(FACTORIES)), min_size=1,
                                                         max_size=3), seed=st.integers(0, 2 ** 16))
    def setup(self, config, kinds, seed) -> None:
        self.config = config
        self.scaler = GradScaler(**config)
        self.ref = ReferenceScaler(**config)
        rng = np.random.default_rng(seed)
        self.kinds = kinds
        self.params = [[ta.tensor(rng.standard_normal(s).astype(F32), requires_grad=True) for s in SHAPES]
                       for _ in kinds]
        self.opts = [FACTORIES[k](ps) for k, ps in zip(kinds, self.params)]

    def _coefficients(self, data, scale: float) -> tuple:
        """Per-parameter loss coefficients C (grad of the unscaled loss) and the injected fault."""
        kind = data.draw(st.sampled_from(["clean", "clean", "inf", "nan", "overflow"]))
        seed = data.draw(st.integers(0, 2 ** 16))
        rng = np.random.default_rng(seed)
        coeffs = [(rng.uniform(0.5, 2.0, s) * rng.choice([-1.0, 1.0], s)).astype(F32) for s in SHAPES]
        if kind != "clean":
            which = data.draw(st.integers(0, len(SHAPES) - 1))
            index = data.draw(st.integers(0, coeffs[which].size - 1))
            if kind == "overflow" and scale >= 4:
                value = F32(np.finfo(F32).max / scale * 2)  # finite, but not once scaled
            else:
                value = F32(np.nan if kind == "nan" else np.inf)
            coeffs[which].reshape(-1)[index] = value
        return kind, coeffs

    @rule(data=st.data())
    def iteration(self, data) -> None:
        scaler, ref = self.scaler, self.ref
        scale = ref.scale
        inv = F32(1.0 / np.float64(F32(scale)))
        syncs = ta.cuda.sync_count()
        expected_found, coeffs_all, snapshots = [], [], []
        with np.errstate(over="ignore", invalid="ignore"):
            for opt, params in zip(self.opts, self.params):
                opt.zero_grad()
                _, coeffs = self._coefficients(data, scale)
                loss = sum(((p * ta.tensor(c)).sum() for p, c in zip(params, coeffs)), ta.tensor(0.0))
                scaler.scale(loss).backward()
                scaled = [F32(scale) * c for c in coeffs]
                expected_found.append(any(not np.isfinite(g * inv).all() for g in scaled))
                coeffs_all.append(coeffs)
                snapshots.append(_snapshot(opt))
            for opt in self.opts:
                if data.draw(st.booleans()):
                    scaler.unscale_(opt)
            for opt in self.opts:
                scaler.step(opt)
        plain_steps = sum(1 for k in self.kinds if k == "plain")
        assert ta.cuda.sync_count() - syncs == plain_steps  # zero for tinyamp's optimizers

        exact = _power_of_two(scale) and 2.0 ** -100 <= scale <= 2.0 ** 100
        for opt, params, coeffs, found, (before, state) in zip(self.opts, self.params, coeffs_all,
                                                                 expected_found, snapshots):
            assert scaler.found_inf(opt).item() == float(found)
            after = [p.array for p in params]
            if found:
                for a, b in zip(after, before):
                    np.testing.assert_array_equal(a, b)
                for p, entry in opt.state.items():
                    for key, value in entry.items():
                        old = state.get(id(p), {}).get(key)
                        if old is None:  # made by this (skipped) step: must still be fresh zeros
                            assert not np.any(as_array(value)), key
                        else:
                            np.testing.assert_array_equal(as_array(value), old, err_msg=key)
            else:
                assert all(not np.array_equal(a, b) for a, b in zip(after, before))
                if exact:
                    for p, c in zip(params, coeffs):
                        np.testing.assert_array_equal(p.grad.array, c)

        if data.draw(st.integers(0, 6)) == 0:
            low = self.config["min_scale"] or 2.0 ** -20
            high = self.config["max_scale"] or 2.0 ** 40
            new = 2.0 ** data.draw(st.integers(math.ceil(math.log2(low)), math.floor(math.log2(high))))
            scaler.update(new)
            ref.scale = new
        else:
            scaler.update()
            ref.update(any(expected_found))
        assert scaler.last_step.skipped == any(expected_found)
        self._check_against_reference()

    @rule(which=st.integers(0, 2))
    def round_trip(self, which: int) -> None:
        saved = copy.deepcopy(self.scaler.state_dict())
        self.scaler = GradScaler()
        self.scaler.load_state_dict(saved)
        k = which % len(self.opts)
        opt_state = copy.deepcopy(self.opts[k].state_dict())
        self.opts[k] = FACTORIES[self.kinds[k]](self.params[k])
        self.opts[k].load_state_dict(opt_state)
        self._check_against_reference()

    def _check_against_reference(self) -> None:
        assert self.scaler.get_scale() == self.ref.scale
        assert self.scaler._get_growth_tracker() == self.ref.growth
        assert self.scaler._get_hysteresis_tracker() == self.ref.hyst

    @invariant()
    def scale_in_bounds(self) -> None:
        if not hasattr(self, "scaler"):
            return
        scale = self.scaler.get_scale()
        assert math.isfinite(scale) and scale > 0
        assert scale >= (self.config["min_scale"] or TINY)
        if self.config["max_scale"] is not None:
            assert scale <= self.config["max_scale"]


def as_array(value):
    return value.array if isinstance(value, ta.Tensor) else value


ScalerMachine.TestCase.settings = _machine_settings()
TestScalerMachine = ScalerMachine.TestCase


# ------------------------------------------------------------ state-machine errors
ERRORS = {
    ("unscale", "UNSCALED"): r"unscale_\(\) has already been called on this optimizer since the last update\(\)\.",
    ("unscale", "STEPPED"): r"unscale_\(\) is being called after step\(\)\.",
    ("step", "STEPPED"): r"step\(\) has already been called since the last update\(\)\.",
    ("update", "READY"): r"No inf checks were recorded prior to update\.",
}


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(st.sampled_from(["unscale", "step", "update"]), max_size=12))
def test_state_machine_errors_follow_pytorch(calls) -> None:
    p = ta.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    scaler = GradScaler()
    scaler.scale(ta.tensor(1.0))
    stage = "READY"
    for call in calls:
        p.grad = ta.tensor([1.0, 1.0])
        expected = ERRORS.get((call, stage))
        fn = {"unscale": scaler.unscale_, "step": scaler.step, "update": lambda _: scaler.update()}[call]
        if expected is not None:
            with pytest.raises(RuntimeError, match=f"^{expected}$"):
                fn(opt)
            continue
        fn(opt)
        stage = {"unscale": "UNSCALED", "step": "STEPPED", "update": "READY"}[call]


# ------------------------------------------------------------ enabled=False
@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2 ** 16), steps=st.integers(1, 5), kind=st.sampled_from(sorted(FACTORIES)),
       unscale_first=st.booleans())
def test_disabled_scaler_is_the_identity(seed, steps, kind, unscale_first) -> None:
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s).astype(F32) for s in SHAPES]
    a = [ta.tensor(w, requires_grad=True) for w in start]
    b = [ta.tensor(w, requires_grad=True) for w in start]
    opt_a, opt_b = FACTORIES[kind](a), FACTORIES[kind](b)
    scaler = GradScaler(enabled=False, init_scale=2.0 ** 5)
    for _ in range(steps):
        coeffs = [rng.standard_normal(s).astype(F32) for s in SHAPES]
        for params, opt, use in ((a, opt_a, False), (b, opt_b, True)):
            opt.zero_grad()
            loss = sum(((p * p * ta.tensor(c)).sum() for p, c in zip(params, coeffs)), ta.tensor(0.0))
            if use:
                scaled = scaler.scale(loss)
                assert scaled is loss
                scaled.backward()
                if unscale_first:
                    scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.array, q.array)
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}


# ------------------------------------------------------------ resume
@settings(max_examples=50, deadline=None)
@given(config=scaler_configs(), pattern=st.lists(st.booleans(), min_size=2, max_size=12), data=st.data())
def test_resumed_scaler_follows_the_same_trajectory(config, pattern, data) -> None:
    cut = data.draw(st.integers(1, len(pattern) - 1))

    def run(scaler, opt, p, flags):
        scales = []
        for bad in flags:
            opt.zero_grad()
            with np.errstate(over="ignore", invalid="ignore"):
                scaler.scale((p * ta.tensor([np.inf if bad else 1.0, 2.0], dtype=ta.float32)).sum()).backward()
            scaler.step(opt)
            scaler.update()
            scales.append((scaler.get_scale(), scaler._get_growth_tracker(), scaler._get_hysteresis_tracker()))
        return scales

    p = ta.tensor([1.0, -1.0], requires_grad=True)
    opt = Adam([p], lr=0.01)
    full = run(GradScaler(**config), opt, p, pattern)

    q = ta.tensor([1.0, -1.0], requires_grad=True)
    opt1 = Adam([q], lr=0.01)
    first = GradScaler(**config)
    head = run(first, opt1, q, pattern[:cut])
    checkpoint = copy.deepcopy((first.state_dict(), opt1.state_dict(), q.array.copy()))
    r = ta.tensor(checkpoint[2], requires_grad=True)
    opt2 = Adam([r], lr=0.01)
    opt2.load_state_dict(checkpoint[1])
    resumed = GradScaler()
    resumed.load_state_dict(checkpoint[0])
    tail = run(resumed, opt2, r, pattern[cut:])
    assert head + tail == full
    np.testing.assert_array_equal(r.array, p.array)
