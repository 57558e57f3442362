"""The loss-scaling recipes of PyTorch's AMP examples, each checked against training without scaling.

In float32 with power-of-two scales and no overflow, scaling commutes with every
rounding in the backward pass (products, sums, the division by the batch size),
so scaled training must give *bit-identical* parameters; the tests say so where
they can, and state the reason where a tolerance is needed instead.
"""

from __future__ import annotations


import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp import GradScaler
from tinyamp.optim import SGD, Adam

nn, F = ta.nn, ta.nn.functional
F32 = np.float32
STEPS = 6


def _batches(n: int = STEPS, seed: int = 0, batch: int = 16) -> list:
    rng = np.random.default_rng(seed)
    return [(ta.tensor(rng.standard_normal((batch, 5)).astype(F32)),
             ta.tensor(rng.standard_normal((batch, 2)).astype(F32))) for _ in range(n)]


def _model(seed: int = 0) -> "nn.Module":
    ta.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))


def _pair(seed: int = 0) -> tuple:
    """Two identical models (same initial weights)."""
    a, b = _model(seed), _model(seed)
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.array, q.array)
    return a, b


def _assert_same(a: "nn.Module", b: "nn.Module") -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_array_equal(p.array, q.array, err_msg=name)


def _assert_trained(model: "nn.Module", seed: int = 0) -> None:
    fresh = _model(seed)
    assert any(not np.array_equal(p.array, q.array) for p, q in zip(model.parameters(), fresh.parameters()))


def test_typical_use() -> None:
    ref, amp = _pair()
    opt_r, opt_a = Adam(ref.parameters(), lr=1e-2), Adam(amp.parameters(), lr=1e-2)
    scaler = GradScaler(init_scale=2.0 ** 16, growth_interval=2)
    for x, y in _batches():
        opt_r.zero_grad()
        F.mse_loss(ref(x), y).backward()
        opt_r.step()

        opt_a.zero_grad()
        loss = F.mse_loss(amp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt_a)
        scaler.update()
    assert scaler.get_scale() == 2.0 ** 19  # grew every 2 clean steps: no step was skipped
    _assert_same(ref, amp)
    _assert_trained(amp)


def test_typical_use_under_autocast_stays_close() -> None:
    ref, amp = _pair()
    opt_r, opt_a = SGD(ref.parameters(), lr=0.1), SGD(amp.parameters(), lr=0.1)
    scaler = GradScaler()
    for x, y in _batches():
        opt_r.zero_grad()
        F.mse_loss(ref(x), y).backward()
        opt_r.step()
        opt_a.zero_grad()
        with ta.amp.autocast():
            loss = F.mse_loss(amp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt_a)
        scaler.update()
    # The autocast run computes the matmuls in float16 (11-bit significand):
    # weights of order 0.1-1 after 6 steps differ by a few float16 ulps.
    for p, q in zip(ref.parameters(), amp.parameters()):
        np.testing.assert_allclose(q.array, p.array, rtol=0, atol=2e-3)


def test_clipping_unscaled_gradients() -> None:
    ref, amp = _pair()
    opt_r, opt_a = SGD(ref.parameters(), lr=0.1), SGD(amp.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0 ** 12)
    max_norm = 0.05  # small enough that every step clips
    for x, y in _batches():
        opt_r.zero_grad()
        F.mse_loss(ref(x), y).backward()
        assert nn.utils.clip_grad_norm_(ref.parameters(), max_norm).item() > max_norm
        opt_r.step()

        opt_a.zero_grad()
        scaler.scale(F.mse_loss(amp(x), y)).backward()
        scaler.unscale_(opt_a)
        nn.utils.clip_grad_norm_(amp.parameters(), max_norm)
        scaler.step(opt_a)  # knows the gradients are already unscaled
        scaler.update()
    _assert_same(ref, amp)


def test_clipping_scaled_gradients_to_scaled_max_norm() -> None:
    ref, amp = _pair()
    opt_r, opt_a = SGD(ref.parameters(), lr=0.1), SGD(amp.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0 ** 12)
    max_norm = 0.05
    for x, y in _batches():
        opt_r.zero_grad()
        F.mse_loss(ref(x), y).backward()
        nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        opt_r.step()

        opt_a.zero_grad()
        scaler.scale(F.mse_loss(amp(x), y)).backward()
        nn.utils.clip_grad_norm_(amp.parameters(), max_norm * scaler.get_scale())
        scaler.step(opt_a)
        scaler.update()
    # clip's coefficient is max_norm / (norm + 1e-6): the 1e-6 is not scaled with
    # the norm, so the two coefficients differ by about 1e-6 / norm (norm ~ 1).
    for p, q in zip(ref.parameters(), amp.parameters()):
        np.testing.assert_allclose(q.array, p.array, rtol=1e-5, atol=1e-7)


def test_gradient_penalty() -> None:
    ref, amp = _pair()
    opt_r, opt_a = SGD(ref.parameters(), lr=0.05), SGD(amp.parameters(), lr=0.05)
    scaler = GradScaler(init_scale=2.0 ** 10)
    for x, y in _batches(4):
        opt_r.zero_grad()
        loss = F.mse_loss(ref(x), y)
        grads = ta.autograd.grad(loss, list(ref.parameters()), create_graph=True)
        (loss + sum((g * g).sum() for g in grads)).backward()
        opt_r.step()

        opt_a.zero_grad()
        loss = F.mse_loss(amp(x), y)
        scaled_grads = ta.autograd.grad(scaler.scale(loss), list(amp.parameters()), create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        grads = [g * inv_scale for g in scaled_grads]
        penalty = sum((g * g).sum() for g in grads)
        scaler.scale(loss + penalty).backward()
        scaler.step(opt_a)
        scaler.update()
    _assert_same(ref, amp)
    _assert_trained(amp)


def test_several_models_losses_and_optimizers() -> None:
    r0, a0 = _pair(0)
    r1, a1 = _pair(1)
    opts_r = [SGD(r0.parameters(), lr=0.1, momentum=0.9), Adam(r1.parameters(), lr=1e-2)]
    opts_a = [SGD(a0.parameters(), lr=0.1, momentum=0.9), Adam(a1.parameters(), lr=1e-2)]
    scaler = GradScaler(init_scale=2.0 ** 8)
    for x, y in _batches():
        for m0, m1, opts, s in ((r0, r1, opts_r, None), (a0, a1, opts_a, scaler)):
            for o in opts:
                o.zero_grad()
            out0, out1 = m0(x), m1(x)
            loss0 = F.mse_loss(2 * out0 + 3 * out1, y)
            loss1 = F.mse_loss(3 * out0 - 5 * out1, y)
            if s is None:
                loss0.backward(retain_graph=True)
                loss1.backward()
                for o in opts:
                    o.step()
            else:
                s.scale(loss0).backward(retain_graph=True)
                s.scale(loss1).backward()
                s.unscale_(opts[0])  # e.g. to clip one model's gradients
                s.step(opts[0])
                s.step(opts[1])
                s.update()
    _assert_same(r0, a0)
    _assert_same(r1, a1)


def test_gradient_accumulation() -> None:
    ref, amp = _pair()
    opt_r, opt_a = Adam(ref.parameters(), lr=1e-2), Adam(amp.parameters(), lr=1e-2)
    scaler = GradScaler(init_scale=2.0 ** 10, growth_interval=1)
    accumulate = 3
    scales = []
    for i, (x, y) in enumerate(_batches(9)):
        (F.mse_loss(ref(x), y) / accumulate).backward()
        scaler.scale(F.mse_loss(amp(x), y) / accumulate).backward()
        scales.append(scaler.get_scale())
        if (i + 1) % accumulate == 0:
            opt_r.step()
            opt_r.zero_grad()
            scaler.step(opt_a)
            scaler.update()
            opt_a.zero_grad()
    # The scale is constant within an effective batch and updated once per step.
    assert scales == [2.0 ** 10] * 3 + [2.0 ** 11] * 3 + [2.0 ** 12] * 3
    _assert_same(ref, amp)


@pytest.mark.parametrize("use_amp", [False, True])
def test_switching_amp_with_enabled(use_amp: bool) -> None:
    def train(model, opt, scaler=None, amp_on=False):
        for x, y in _batches():
            opt.zero_grad()
            with ta.amp.autocast(enabled=amp_on):
                loss = F.mse_loss(model(x), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

    ref, amp = _pair()
    train(ref, SGD(ref.parameters(), lr=0.1))
    train(amp, SGD(amp.parameters(), lr=0.1), GradScaler(enabled=use_amp), amp_on=use_amp)
    if use_amp:
        # float16 matmuls: a few float16 ulps apart (see the autocast test above).
        for p, q in zip(ref.parameters(), amp.parameters()):
            np.testing.assert_allclose(q.array, p.array, rtol=0, atol=2e-3)
        assert any(not np.array_equal(p.array, q.array) for p, q in zip(ref.parameters(), amp.parameters()))
    else:
        _assert_same(ref, amp)  # the same loop with AMP off is exactly float32 training


def test_batch_replay_with_found_inf() -> None:
    ref, amp = _pair()
    opt_r, opt_a = Adam(ref.parameters(), lr=1e-2), Adam(amp.parameters(), lr=1e-2)
    # 2**127 times gradients above 2 overflows float32 on the first backward;
    # backing off by 2**-16 recovers at once.
    scaler = GradScaler(init_scale=2.0 ** 127, backoff_factor=2.0 ** -16)
    replays = 0
    for x, y in _batches():
        x, y = x * 8, y * 8  # gradients of order 10
        opt_r.zero_grad()
        F.mse_loss(ref(x), y).backward()
        opt_r.step()
        while True:
            opt_a.zero_grad()
            with np.errstate(over="ignore", invalid="ignore"):
                scaler.scale(F.mse_loss(amp(x), y)).backward()
            scaler.step(opt_a)
            skipped = scaler.found_inf(opt_a).item() > 0
            scaler.update()
            assert scaler.last_step.skipped == skipped
            if not skipped:
                break
            replays += 1
    assert replays == 1
    _assert_same(ref, amp)


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_checkpoint_resume_continues_identically(level: str, tmp_path) -> None:
    def build():
        model = _model()
        if level == "O2":
            model.half()
        opt = Adam(model.parameters(), lr=1e-2, master_weights=level == "O2")
        return model, opt, GradScaler(init_scale=2.0 ** 14, growth_interval=2)

    def train(model, opt, scaler, batches, blow_up=()):
        for i, (x, y) in enumerate(batches):
            opt.zero_grad()
            out = model(x.half() if level == "O2" else x)
            loss = F.mse_loss(out.float(), y) * (1e36 if i in blow_up else 1.0)
            with np.errstate(over="ignore", invalid="ignore"):
                scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            assert scaler.last_step.skipped == (i in blow_up)

    batches = _batches(8)
    model, opt, scaler = build()
    train(model, opt, scaler, batches[:4], blow_up=(1,))
    path = tmp_path / "checkpoint.tamp"
    ta.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}, path)
    train(model, opt, scaler, batches[4:], blow_up=(2,))

    model2, opt2, scaler2 = build()
    checkpoint = ta.load(path)
    model2.load_state_dict(checkpoint["model"])
    opt2.load_state_dict(checkpoint["optimizer"])
    scaler2.load_state_dict(checkpoint["scaler"])
    train(model2, opt2, scaler2, batches[4:], blow_up=(2,))
    _assert_same(model, model2)
    for p, q in zip(model.parameters(), model2.parameters()):
        for key, value in opt.state[p].items():
            np.testing.assert_array_equal(value.array, opt2.state[q][key].array, err_msg=key)
    assert scaler.state_dict() == scaler2.state_dict()
